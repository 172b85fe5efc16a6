"""The demo's data (docs/domain.md §10): its accounts, its fictional repositories, the original's 20 infestation
patterns and a few one-off findings; `app.seed` stores them through the real services."""

from __future__ import annotations

MODERATOR_EMAIL = "mod@example.com"

# (email, handle, platform_role, trust_tier)
DEMO_ACCOUNTS = (
    (MODERATOR_EMAIL, "mod", "moderator", "reviewer"),
    ("reviewer@example.com", "reviewer", "member", "reviewer"),
    ("member@example.com", "member", "member", "contributor"),
)

# Fictional projects: the demo must not publish findings against real repositories.
# (owner, name, language, stars, description)
DEMO_REPOSITORIES = (
    ("acme-labs", "ledgerd", "Go", 4812, "Append-only ledger daemon with a gRPC and REST gateway."),
    ("northwind", "paystream", "Java", 2306, "Payment event streaming service for small merchants."),
    ("quillwork", "inkpress", "TypeScript", 9120, "Headless CMS with a Markdown-first editor."),
    ("hollow-oak", "burrow", "Rust", 1544, "Tiny reverse proxy with automatic TLS."),
    ("tidewater", "harbor-api", "Python", 733, "Booking API for marinas and dry docks."),
    ("glasshouse", "sprout", "Ruby", 3408, "Plant-care tracker and reminder service."),
    ("ironbark", "vaultkeeper", "Elixir", 612, "Secrets broker for Phoenix clusters."),
    ("moth-and-lamp", "nightjar", "JavaScript", 15230, "Browser extension for dark reading modes."),
    ("redfern", "chartwell", "Python", 2891, "Dashboards and alerts over Postgres metrics."),
    ("saltmarsh", "estuary", "Go", 5177, "Log shipping agent with on-disk buffering."),
    ("copperline", "switchyard", "C", 402, "Embedded MQTT broker for microcontrollers."),
    ("pebble-works", "mosaic", "PHP", 1288, "Image gallery and album sharing."),
)

# docs/domain.md §10: (title, severity, statuses — one per repository, so the list length is the fan-out)
DEMO_PATTERNS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("SQL injection via string concatenation", "critical", ("open", "open", "verified", "open", "open")),
    ("Hardcoded credentials in config loader", "high", ("open", "fixed", "open", "verified", "open")),
    ("Command injection through shell interpolation", "critical", ("open", "open", "open", "open", "verified")),
    ("Path traversal in archive extract", "high", ("open", "open", "fixed", "open")),
    ("SSRF via user-controlled URL fetch", "high", ("open", "verified", "open", "open", "open")),
    ("JWT accepts alg=none", "critical", ("open", "open", "disputed", "open")),
    ("Missing authorization on admin API route", "critical", ("open", "open", "open", "verified", "open", "open")),
    ("Insecure deserialization of user input", "high", ("open", "fixed", "open", "open")),
    ("Open redirect after login", "medium", ("open", "open", "verified", "fixed", "open")),
    ("Prototype pollution in deep merge", "high", ("open", "open", "open", "open")),
    ("Debug endpoint left enabled", "medium", ("open", "fixed", "open", "open", "open")),
    ("Weak random token generation", "medium", ("open", "open", "verified", "open")),
    ("CORS reflects arbitrary Origin", "medium", ("open", "open", "open", "open", "open")),
    ("Timing-unsafe secret comparison", "high", ("open", "verified", "open", "open")),
    ("Unsanitized HTML rendered as markup", "high", ("open", "open", "open", "fixed", "verified", "open", "open")),
    ("XML external entity in parser", "high", ("open", "open", "verified")),
    ("LDAP injection in directory search", "high", ("open", "open", "open", "fixed")),
    ("Mass assignment on privileged fields", "medium", ("open", "verified", "open", "open", "open")),
    ("Broken access control on object ID", "critical", ("open", "open", "open", "open", "verified", "open")),
    ("Insecure direct object reference", "high", ("open", "open", "fixed", "open", "open")),
)

# One-off findings (a single repository each): they never form an infestation but fill repository pages.
# (repository index, file, line, severity, title, status)
DEMO_ONE_OFFS = (
    (0, "internal/api/export.go", 88, "low", "Verbose error leaks SQL statement to client", "open"),
    (2, "src/editor/paste.ts", 41, "medium", "Clipboard paste bypasses image size limit", "verified"),
    (4, "harbor/booking/refunds.py", 132, "high", "Refund amount not bounded by original charge", "open"),
    (7, "src/content/inject.js", 17, "info", "Extension requests broader host permissions than used", "fixed"),
    (9, "pkg/buffer/segment.go", 203, "medium", "Buffer segment files created world-readable", "open"),
)
