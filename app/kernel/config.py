"""Configuration, read only here: environment variables, typed and validated."""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import string
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


class ConfigError(RuntimeError):
    pass


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def seconds(name: str, default: float) -> float:
    """A non-negative number of seconds (0 disables the cache or delay it configures)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {raw!r}")
    return value


def normalize_database_url(url: str) -> str:
    """Accept postgresql:// and postgres:// and use the psycopg 3 driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ConfigError("DATABASE_URL must start with postgresql:// or postgresql+psycopg://")


@dataclass(frozen=True)
class Settings:
    database_url: str
    database_replica_url: str | None
    database_replica_max_lag: float
    redis_url: str
    secret_key: str
    base_url: str
    local_dev: bool
    db_pool_size: int
    db_pool_timeout: float
    db_statement_timeout: float
    hot_key_interval_seconds: int
    claim_seconds: int
    request_body_limit: int
    body_budget_seconds: float
    refused_per_minute: int
    registry_stats_ttl: float
    sitemap_index_threshold: int
    sitemap_max_urls: int
    sitemap_cache_ttl: float
    shadow_sample_keys: int
    shadow_period_minutes: int
    shadow_recheck_seconds: float
    export_dir: str


# every variable `_read_settings` reads: the cache's key (tests/kernel/test_config.py checks the list is whole)
SETTINGS_ENV = (
    "BASE_URL", "BODY_BUDGET_SECONDS", "DATABASE_REPLICA_MAX_LAG", "DATABASE_REPLICA_URL", "DATABASE_URL",
    "DB_POOL_SIZE", "DB_POOL_TIMEOUT", "DB_STATEMENT_TIMEOUT", "EXPORT_DIR", "INFESTATIONS_CLAIM_SECONDS",
    "INFESTATIONS_HOT_KEY_INTERVAL", "INFESTATIONS_SHADOW_PERIOD_MINUTES", "INFESTATIONS_SHADOW_RECHECK_SECONDS",
    "INFESTATIONS_SHADOW_SAMPLE", "REDIS_URL", "REFUSED_PER_MINUTE", "REGISTRY_STATS_TTL", "REQUEST_BODY_LIMIT",
    "SECRET_KEY", "SITEMAP_CACHE_TTL", "SITEMAP_INDEX_THRESHOLD", "SITEMAP_MAX_URLS",
)  # fmt: skip
# os.environ's own table (bytes on POSIX): a look-up there skips the encode and decode of `os.environ.get`, a
# microsecond a variable; every change made through os.environ (an operator's, a test's monkeypatch) lands in it
_RAW_ENVIRON: Mapping[bytes, bytes] | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
_RAW_KEYS = tuple(os.fsencode(name) for name in SETTINGS_ENV)


def settings() -> Settings:
    """Current settings, read at call time so tests and operators can change the environment; parsed once per
    distinct set of values (a report asks five times: 22 us a parse, 2 us a look-up)."""
    if _RAW_ENVIRON is not None:
        return _parsed(tuple(map(_RAW_ENVIRON.get, _RAW_KEYS)))
    return _parsed(tuple(map(os.environ.get, SETTINGS_ENV)))


@functools.lru_cache(maxsize=16)
def _parsed(_values: tuple[bytes | str | None, ...]) -> Settings:
    return _read_settings()  # an invalid value raises, and is not kept


def _read_settings() -> Settings:
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url:
        raise ConfigError("DATABASE_URL is not set (./run starts an embedded Postgres when it is absent)")
    replica = os.environ.get("DATABASE_REPLICA_URL") or None
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url:
        raise ConfigError("REDIS_URL is not set (./run starts an embedded Valkey when it is absent)")
    base_url = os.environ.get("BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    return Settings(
        database_url=normalize_database_url(database_url),
        database_replica_url=normalize_database_url(replica) if replica else None,
        # a replica further behind than this many seconds is skipped until it catches up (docs/scaling.md)
        database_replica_max_lag=seconds("DATABASE_REPLICA_MAX_LAG", 10.0),
        redis_url=redis_url,
        secret_key=os.environ.get("SECRET_KEY", ""),
        base_url=base_url,
        local_dev=base_url.startswith("http://127.0.0.1") or base_url.startswith("http://localhost"),
        db_pool_size=_int("DB_POOL_SIZE", 10, minimum=1),
        # a request waits this long for a pooled connection, then answers 503 (docs/reliability.md)
        db_pool_timeout=seconds("DB_POOL_TIMEOUT", 5.0),
        # the web server's cap on one SQL statement (0: none); CLI and worker run without it (docs/reliability.md)
        db_statement_timeout=seconds("DB_STATEMENT_TIMEOUT", 15.0),
        hot_key_interval_seconds=_int("INFESTATIONS_HOT_KEY_INTERVAL", 30),
        # a claim outlives any sane refresh; keys of a worker that died are taken over when it expires
        claim_seconds=_int("INFESTATIONS_CLAIM_SECONDS", 300, minimum=1),
        request_body_limit=_int("REQUEST_BODY_LIMIT", 4 * 1024 * 1024, minimum=1024),
        # CPU seconds one request may spend parsing, validating and scanning its body (docs/security.md "Body budget")
        body_budget_seconds=seconds("BODY_BUDGET_SECONDS", 1.0),
        # refused submissions a minute per API token before it gets 429s (0: no limit)
        refused_per_minute=_int("REFUSED_PER_MINUTE", 60),
        registry_stats_ttl=seconds("REGISTRY_STATS_TTL", 30.0),
        # listed repositories at which /sitemap.xml becomes a sitemapindex (docs/domain.md §13 "Sitemap": 20,000)
        sitemap_index_threshold=_int("SITEMAP_INDEX_THRESHOLD", 20_000, minimum=1),
        # cap of one urlset (protocol: 50,000); the benchmark raises it to stream 10^6 URLs in one file
        sitemap_max_urls=_int("SITEMAP_MAX_URLS", 50_000, minimum=1),
        sitemap_cache_ttl=seconds("SITEMAP_CACHE_TTL", 60.0),
        # continuous shadow-compare in the worker (docs/operations.md "TarakanShadowMismatch"): keys per run (0: off),
        # a run every N minutes, and how long a mismatched key's refresh is waited for before it is compared again
        shadow_sample_keys=_int("INFESTATIONS_SHADOW_SAMPLE", 50),
        shadow_period_minutes=_int("INFESTATIONS_SHADOW_PERIOD_MINUTES", 5, minimum=1),
        shadow_recheck_seconds=seconds("INFESTATIONS_SHADOW_RECHECK_SECONDS", 120.0),
        # where the worker writes the bulk exports and the web serves them from (docs/operations.md "Bulk export")
        export_dir=os.environ.get("EXPORT_DIR", "").strip() or ".data/exports",
    )


def transaction_pooling() -> bool:
    """`DB_TRANSACTION_POOLING=1`: the database URLs point at a transaction-pooling PgBouncer, which refuses startup
    options and gives each transaction any server connection, so nothing may be set per connection
    (docs/scaling.md "PgBouncer in transaction mode")."""
    return _bool("DB_TRANSACTION_POOLING", False)


def read_from_rollup_default() -> bool:
    """The rollup read flag's default, for a database where `tarakan flags set` never wrote it: the runtime value is
    `app.kernel.flags.read_from_rollup()` (docs/domain.md §13 "Feature flag and Cutover gates")."""
    return _bool("INFESTATIONS_READ_FROM_ROLLUP", True)


def log_format() -> str:
    """`LOG_FORMAT`: `text` (default) or `json` (one JSON object per line; docs/operations.md "Logs")."""
    raw = os.environ.get("LOG_FORMAT", "").strip().lower() or "text"
    if raw not in ("text", "json"):
        raise ConfigError(f"LOG_FORMAT must be text or json, got {raw!r}")
    return raw


def server_timing() -> bool:
    """`SERVER_TIMING=1`: every response says the server's time in `Server-Timing` (the benchmarks read it); off by
    default, so visitors do not learn how long each request took (docs/security.md "Limits")."""
    return _bool("SERVER_TIMING", False)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# loopback and the private ranges: a scraper on the same host or network (compose's Prometheus)
DEFAULT_METRICS_ALLOW = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"


@functools.lru_cache(maxsize=8)
def _networks(name: str, raw: str) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in raw.split(",") if item.strip())
    except ValueError as exc:
        raise ConfigError(f"{name} must be comma-separated IP networks (CIDR), got {raw!r}: {exc}") from exc


def metrics_allow() -> tuple[Network, ...]:
    """`METRICS_ALLOW`: the client networks `/metrics` answers on web and worker (others get 404); unset or empty:
    loopback and the private ranges. Read at every scrape (parsed once per value)."""
    return _networks("METRICS_ALLOW", os.environ.get("METRICS_ALLOW", "").strip() or DEFAULT_METRICS_ALLOW)


def forwarded_allow_ips() -> list[str]:
    """`FORWARDED_ALLOW_IPS`: the proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` are trusted (addresses or
    CIDR networks, or `*`); default the loopback addresses, as uvicorn's."""
    raw = os.environ.get("FORWARDED_ALLOW_IPS", "").strip() or "127.0.0.1,::1"
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if items != ["*"]:
        _networks("FORWARDED_ALLOW_IPS", ",".join(items))  # a host name would never match: refused at start
    return items


def render_cache_bytes() -> int:
    """`RENDER_CACHE_BYTES`: the bytes of rendered public pages one web process keeps (app.record.rendered; least
    recently used out first; 0: no render cache). Read when the cache is first used."""
    return _int("RENDER_CACHE_BYTES", 64 * 1024 * 1024)


def search_rate_per_minute() -> int:
    """`SEARCH_RATE_PER_MINUTE`: searches a minute per client address (IPv4, or IPv6 /64) before 429 (0: none)."""
    return _int("SEARCH_RATE_PER_MINUTE", 120)


FORGE_TEMPLATE_FIELDS = frozenset({"host", "owner", "name", "path"})
# each forge host's base setting and its default: the product appends that forge's own paths to the base
# (app.maintainers.forge, one function per host); tarakan.lol's forge has no public default
FORGE_BASE_SETTINGS: dict[str, tuple[str, str | None]] = {
    "github.com": ("FORGE_GITHUB_RAW_URL", "https://raw.githubusercontent.com"),
    "gitlab.com": ("FORGE_GITLAB_URL", "https://gitlab.com"),
    "codeberg.org": ("FORGE_CODEBERG_URL", "https://codeberg.org"),
    "tarakan.lol": ("FORGE_TARAKAN_URL", None),
}
TEMPLATE_HOST = "tarakan.lol"  # the one host FORGE_RAW_URL_TEMPLATE still serves
_log = logging.getLogger("tarakan.config")
_template_warned = False


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address: where plain http is allowed (a forge played by a test)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def forge_base_url(host: str) -> str | None:
    """The base URL of `host`'s forge from its setting (FORGE_GITHUB_RAW_URL, FORGE_GITLAB_URL, FORGE_CODEBERG_URL,
    FORGE_TARAKAN_URL), else its default; None: no forge for this host. An http(s) URL whose path is kept (a
    trailing slash dropped), plain http only to a loopback host. Read at every fetch; checked at start."""
    setting = FORGE_BASE_SETTINGS.get(host)
    if setting is None:
        return None
    name, default = setting
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment or "{" in raw:
        raise ConfigError(f"{name} must be an http(s) base URL (a path is kept; no query, no fields), got {raw!r}")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ConfigError(f"{name} may use plain http only to a loopback host, got {raw!r}")
    return raw.rstrip("/")


def check_forge_settings() -> None:
    """Every forge setting at start (`serve`, `worker`): each host's base, FORGE_RAW_URL_TEMPLATE, the API bases,
    the bounds and EVIDENCE_CHECK; one warning line when the gate is on and a host has no token."""
    for host in FORGE_BASE_SETTINGS:
        forge_base_url(host)
        forge_api_url(host)
    forge_raw_url_template()
    forge_max_file_bytes()
    forge_requests_per_second()
    forge_burst()
    forge_budget_seconds()
    if evidence_check() == "gate":
        bare = [host for host, name in FORGE_TOKEN_SETTINGS.items() if not forge_token(host)]
        if bare:
            _log.warning(
                "EVIDENCE_CHECK=gate with no token for %s: their forges allow anonymous callers far fewer requests "
                '(docs/forge.md "Tokens")',
                ", ".join(bare),
            )


FORGE_TOKEN_SETTINGS = {
    "github.com": "FORGE_GITHUB_TOKEN",
    "gitlab.com": "FORGE_GITLAB_TOKEN",
    "codeberg.org": "FORGE_CODEBERG_TOKEN",
}


def forge_api_url(host: str) -> str | None:
    """The REST API base of `host`'s forge: FORGE_GITHUB_API_URL (default https://api.github.com) for github.com,
    `{base}/api/v4` for GitLab, `{base}/api/v1` for Forgejo (codeberg.org; tarakan.lol only when FORGE_TARAKAN_URL
    is set); None: no forge API for this host. Read at every request; checked at start."""
    if host == "github.com":
        raw = os.environ.get("FORGE_GITHUB_API_URL", "").strip()
        if not raw:
            return "https://api.github.com"
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(f"FORGE_GITHUB_API_URL must be an http(s) base URL, got {raw!r}")
        if parts.scheme == "http" and not is_loopback_host(parts.hostname):
            raise ConfigError(f"FORGE_GITHUB_API_URL may use plain http only to a loopback host, got {raw!r}")
        return raw.rstrip("/")
    base = forge_base_url(host)
    if base is None:
        return None
    return f"{base}/api/v4" if host == "gitlab.com" else f"{base}/api/v1"


def forge_token(host: str) -> str | None:
    """`FORGE_GITHUB_TOKEN`, `FORGE_GITLAB_TOKEN`, `FORGE_CODEBERG_TOKEN`: sent only to that host's API base."""
    name = FORGE_TOKEN_SETTINGS.get(host)
    return (os.environ.get(name, "").strip() or None) if name else None


def forge_max_file_bytes() -> int:
    """`FORGE_MAX_FILE_BYTES` (1 MiB): the most of one forge answer (a file, a JSON body) that is read."""
    return _int("FORGE_MAX_FILE_BYTES", 1024 * 1024, minimum=1024)


def forge_requests_per_second() -> float:
    """`FORGE_REQUESTS_PER_SECOND` (5): the rate of requests to one forge host, shared by every process."""
    value = seconds("FORGE_REQUESTS_PER_SECOND", 5.0)
    if value <= 0:
        raise ConfigError("FORGE_REQUESTS_PER_SECOND must be > 0")
    return value


def forge_burst() -> int:
    """`FORGE_BURST` (20): requests to one forge host that may go at once before the rate applies."""
    return _int("FORGE_BURST", 20, minimum=1)


def forge_budget_seconds() -> float:
    """`FORGE_BUDGET_SECONDS` (3): the forge time one report's evidence check may spend before it is pending."""
    return seconds("FORGE_BUDGET_SECONDS", 3.0)


def evidence_check() -> str:
    """`EVIDENCE_CHECK`: `gate` (default: findings are checked at their commit before they are public) or `off`
    (no forge request but the claims'; evidence `unchecked`). Read at every report; checked at start."""
    raw = os.environ.get("EVIDENCE_CHECK", "").strip().lower() or "gate"
    if raw not in ("gate", "off"):
        raise ConfigError(f"EVIDENCE_CHECK must be gate or off, got {raw!r}")
    return raw


def forge_raw_url_template() -> str | None:
    """`FORGE_RAW_URL_TEMPLATE`: where a tarakan.lol repository's verification file is fetched from when
    FORGE_TARAKAN_URL is not set, an http(s) URL with the fields `{host}`, `{owner}`, `{name}` and `{path}` (and no
    others). Every other host ignores it (one warning line per process, at the first read): it once replaced every
    host's default, so a claim on one forge could be proved by a file on another. Read at every fetch; checked at
    start by `serve` and `worker`."""
    global _template_warned
    raw = os.environ.get("FORGE_RAW_URL_TEMPLATE", "").strip()
    if not raw:
        return None
    if not _template_warned:
        _template_warned = True
        others = [name for host, (name, _) in FORGE_BASE_SETTINGS.items() if host != TEMPLATE_HOST]
        _log.warning(
            "FORGE_RAW_URL_TEMPLATE applies to %s only (and not when FORGE_TARAKAN_URL is set); it is ignored for "
            "every other host, whose forge is set by %s",
            TEMPLATE_HOST,
            ", ".join(others),
        )
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(raw) if name]
    except ValueError as exc:
        raise ConfigError(f"FORGE_RAW_URL_TEMPLATE is not a valid template: {exc}") from exc
    for name, spec, conversion in fields:
        if name not in FORGE_TEMPLATE_FIELDS or spec or conversion:
            raise ConfigError(
                f"FORGE_RAW_URL_TEMPLATE may hold only {{host}}, {{owner}}, {{name}} and {{path}}, got {{{name}}}"
            )
    if urlsplit(raw).scheme not in ("http", "https"):
        raise ConfigError(f"FORGE_RAW_URL_TEMPLATE must be an http(s) URL, got {raw!r}")
    return raw


def maintainer_recheck_hours() -> float:
    """`MAINTAINER_RECHECK_HOURS` (default 24): how far apart two rechecks must find a maintainer's file gone before
    the maintainership ends (docs/domain.md "Maintainers"). Read at each recheck run."""
    raw = os.environ.get("MAINTAINER_RECHECK_HOURS", "").strip()
    if not raw:
        return 24.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"MAINTAINER_RECHECK_HOURS must be a number of hours, got {raw!r}") from exc
    if not value >= 0:  # also refuses NaN
        raise ConfigError(f"MAINTAINER_RECHECK_HOURS must be >= 0, got {raw!r}")
    return value


def webhook_allow_private() -> bool:
    """`WEBHOOK_ALLOW_PRIVATE=1` (tests only): webhook destinations may be loopback, private or any other refused
    address, on any port, and plain http (a receiver on loopback); nothing else changes (docs/security.md "Webhook
    destinations"). Read at every check, at registration and at connect time."""
    return _bool("WEBHOOK_ALLOW_PRIVATE", False)


def varnish_purge_urls() -> tuple[str, ...]:
    """`VARNISH_PURGE_URLS`: the shared page caches (Varnish with xkey, deploy/varnish/default.vcl) that takedowns and
    rollup refreshes purge, comma-separated http(s) base URLs; unset or empty: no shared cache, nothing to purge
    (docs/scaling.md "Shared cache"). Read at every purge; checked at start by `serve` and `worker`."""
    raw = os.environ.get("VARNISH_PURGE_URLS", "").strip()
    urls = tuple(item.strip().rstrip("/") for item in raw.split(",") if item.strip())
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
            raise ConfigError(f"VARNISH_PURGE_URLS must be comma-separated http(s) base URLs, got {url!r}")
    return urls


def varnish_purge_timeout() -> float:
    """`VARNISH_PURGE_TIMEOUT` (default 1 s): one purge request's bound; a takedown waits at most a few of them
    (`app.kernel.purge`: retries, then the purge-everything fallback) before the moderator's answer."""
    value = seconds("VARNISH_PURGE_TIMEOUT", 1.0)
    if value <= 0:
        raise ConfigError("VARNISH_PURGE_TIMEOUT must be > 0")
    return value
