"""Generate a synthetic registry quickly in SQL (for the benchmarks, never for tests).

Tier A: 10^4 listed repositories; Tier B: 10^5; Tier C: 10^6. Power-law fan-out (Zipf-like) over shared patterns
with a hot pattern in >= 10^4 repositories (Tier B; >= 10^5 at Tier C), plus rare per-repository findings, about
10^6 canonical findings at Tier B and 10^7 at Tier C. Pattern keys are computed in SQL with sha256 over titles that
are already in normalized form, so they are exactly `pattern_key(title)`.

A bulk tier (C) loads the two big tables without their secondary indexes and foreign-key triggers and builds the
indexes afterwards (one sort each instead of 10^7 index insertions). `save_tier` / `restore_tier` keep a
generated (and backfilled) tier as a `pg_dump -Fc` archive, made and restored with the PostgreSQL binaries the
embedded server runs (`app.devservices.pg_bin_dir`), so a rerun skips the generation.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from app.devservices import pg_bin_dir


@dataclass(frozen=True)
class Tier:
    name: str
    repos: int
    shared_patterns: int  # patterns with a power-law fan-out
    hot_fanout: int  # repositories of the hottest pattern
    rare_per_repo: int  # findings with rarely shared titles, per repository
    rare_pool: int  # distinct rare titles
    bulk: bool = False  # load the big tables without secondary indexes and FK triggers, index afterwards


TIERS = {
    "T": Tier("T", 2_000, 300, 500, 3, 1_000),  # smoke run of the benchmark itself
    "A": Tier("A", 10_000, 2_000, 2_000, 6, 20_000),
    "B": Tier("B", 100_000, 20_000, 12_000, 9, 60_000),
    # ~1.5 * 10^6 shared (Zipf over 200k patterns, the hot one in 120k repositories) + 9 * 10^6 rare canonicals
    "C": Tier("C", 1_000_000, 200_000, 120_000, 9, 600_000, bulk=True),
}
BULK_TABLES = ("canonical_findings", "scan_findings")

STATUSES = "ARRAY['open','open','open','open','open','verified','verified','fixed','disputed']"


def generate(dsn: str, tier: Tier, *, progress: bool = True) -> dict[str, int]:
    """Fill an EMPTY migrated database. Returns row counts."""
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress:
            print(f"[generate {tier.name}] {time.perf_counter() - t0:6.1f}s {msg}", flush=True)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        indexes: list[str] = []
        if tier.bulk:
            conn.execute("SET work_mem = '256MB'")
            conn.execute("SET maintenance_work_mem = '1GB'")
            # no FK trigger per row (the generator's rows are consistent by construction); indexes rebuilt below
            conn.execute("SET session_replication_role = replica")
            indexes = _drop_secondary_indexes(conn, BULK_TABLES)
            say(f"dropped {len(indexes)} secondary indexes of {', '.join(BULK_TABLES)}")
        conn.execute(
            "INSERT INTO accounts (email, handle, platform_role, trust_tier, state) "
            "VALUES ('bench@example.com', 'bench', 'admin', 'reviewer', 'active')"
        )
        conn.execute(
            """
            INSERT INTO repositories (host, owner, name, canonical_url, listing_status, stars_count, primary_language)
            SELECT 'github.com', 'owner' || (g %% 9973), 'repo-' || g,
                   'https://github.com/owner' || (g %% 9973) || '/repo-' || g,
                   CASE WHEN g %% 50 = 0 THEN 'quarantined' WHEN g %% 97 = 0 THEN 'pending' ELSE 'listed' END,
                   (g::bigint * 7919) %% 5000, (ARRAY['python','go','rust','ruby','elixir'])[1 + g %% 5]
            FROM generate_series(1, %(n)s) g
            """,
            {"n": tier.repos},
        )
        say(f"{tier.repos} repositories")
        # one public scan per repository, plus a restricted one on every 40th
        conn.execute(
            """
            INSERT INTO scans (repository_id, submitted_by_id, commit_sha, model, prompt_version, visibility,
                               findings_count, inserted_at, updated_at)
            SELECT r.id, 1, substr(md5('c' || r.id) || md5('d' || r.id), 1, 40), 'bench', 'bench/v1',
                   'public', 0, now() - interval '1 day' * (r.id % 400), now()
            FROM repositories r
            UNION ALL
            SELECT r.id, 1, substr(md5('e' || r.id) || md5('f' || r.id), 1, 40), 'bench', 'bench/v1',
                   'restricted', 0, now(), now()
            FROM repositories r WHERE r.id % 40 = 0
            """
        )
        say("scans")
        # shared patterns: fan-out ~ hot / rank (Zipf, alpha 1), at least 1; repos spread by multiplicative hashing
        conn.execute(
            """
            CREATE TEMP TABLE gen_canon AS
            WITH p AS (
              SELECT r AS rank, 'shared pattern ' || r || ' injection in handler' AS title,
                     GREATEST(1, (%(hot)s / r)::int) AS fanout
              FROM generate_series(1, %(shared)s) r
            )
            SELECT DISTINCT ON (repo_id, title) repo_id, title, i
            FROM (
              SELECT p.title, i, 1 + ((p.rank::bigint * 2654435761 + i::bigint * 40503) %% %(n)s) AS repo_id
              FROM p, LATERAL generate_series(1, p.fanout) i
              UNION ALL
              SELECT 'rare finding ' || (1 + ((g::bigint * 2246822519 + k::bigint * 3266489917) %% %(pool)s))
                     || ' in module', k,
                     g AS repo_id
              FROM generate_series(1, %(n)s) g, generate_series(1, %(rare)s) k
            ) x
            """,
            {"hot": tier.hot_fanout, "shared": tier.shared_patterns, "n": tier.repos, "rare": tier.rare_per_repo,
             "pool": tier.rare_pool},
        )  # fmt: skip
        say("candidate canonicals")
        conn.execute(
            f"""
            INSERT INTO canonical_findings (repository_id, fingerprint, pattern_key, file_path, line_start, line_end,
              severity, title, description, status, first_seen_commit_sha, last_seen_commit_sha, detections_count,
              inserted_at, updated_at)
            SELECT c.repo_id,
                   md5(c.repo_id || '/' || c.title) || md5(c.title || '/' || c.repo_id),
                   encode(sha256(convert_to(c.title, 'UTF8')), 'hex'),
                   'src/mod_' || (c.i % 97) || '/file_' || c.i || '.py', 10 + c.i % 900, 10 + c.i % 900,
                   (ARRAY['critical','high','medium','low','info'])[1 + (hashtext(c.title) & 4)],
                   c.title, 'Synthetic benchmark finding: ' || c.title,
                   ({STATUSES})[1 + ((hashtext(c.title || c.repo_id) & 2147483647) % 9)],
                   substr(md5('c' || c.repo_id) || md5('d' || c.repo_id), 1, 40),
                   substr(md5('c' || c.repo_id) || md5('d' || c.repo_id), 1, 40), 1,
                   now() - interval '1 hour' * (((hashtext(c.title || c.repo_id || 'i') & 2147483647) % 9600) + 24),
                   now() - interval '1 hour' * ((hashtext(c.title || c.repo_id || 'u') & 2147483647) % 9600)
            FROM gen_canon c
            """
        )
        conn.execute("UPDATE canonical_findings SET inserted_at = updated_at WHERE inserted_at > updated_at")
        say("canonical findings")
        # every canonical's public occurrence, and a second, restricted one (must never count or be the sample)
        for position, disposition, visibility in ((0, "new", "public"), (1, "matches_existing", "restricted")):
            conn.execute(
                f"""
                INSERT INTO scan_findings (scan_id, position, file_path, line_start, line_end, severity, title,
                  description, canonical_finding_id, fingerprint, disposition)
                SELECT s.id, {position}, c.file_path, c.line_start, c.line_end, c.severity, c.title, c.description,
                       c.id, c.fingerprint, '{disposition}'
                FROM canonical_findings c
                JOIN scans s ON s.repository_id = c.repository_id AND s.visibility = '{visibility}'
                """
            )
        say("occurrences")
        if tier.bulk:
            conn.execute("SET session_replication_role = origin")
            for ddl in indexes:
                conn.execute(ddl)
            say(f"rebuilt {len(indexes)} indexes")
        conn.execute("ANALYZE")
        counts = {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
            for t in ("repositories", "scans", "canonical_findings", "scan_findings")
        }
        counts["pattern_keys"] = int(
            conn.execute("SELECT count(DISTINCT pattern_key) FROM canonical_findings").fetchone()[0]  # type: ignore[index]
        )
        counts["hot_repos"] = int(
            conn.execute(
                "SELECT count(DISTINCT repository_id) FROM canonical_findings WHERE title = "
                "'shared pattern 1 injection in handler'"
            ).fetchone()[0]  # type: ignore[index]
        )
        say(f"done: {counts}")
        return counts


def _drop_secondary_indexes(conn: psycopg.Connection[tuple[object, ...]], tables: tuple[str, ...]) -> list[str]:
    """Drop every index of `tables` that backs no constraint; return their definitions to rebuild them."""
    rows = conn.execute(
        """
        SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
        FROM pg_index i
        WHERE i.indrelid = ANY(CAST(%s AS regclass[]))
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
        """,
        (list(tables),),
    ).fetchall()
    for name, _ in rows:
        conn.execute(f"DROP INDEX {name}")
    return [str(ddl) for _, ddl in rows]


def _pg_tool(name: str, dsn: str, *args: str) -> None:
    subprocess.run([str(pg_bin_dir() / name), "--dbname", dsn, *args], check=True)


def save_tier(dsn: str, path: Path) -> None:
    """Archive the whole database (schema, rows, rollups) as `pg_dump -Fc` (light compression: fast both ways)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _pg_tool("pg_dump", dsn, "--format=custom", "--compress=1", "--file", str(path))


def restore_tier(dsn: str, path: Path, *, jobs: int = 2) -> None:
    """Restore an archive of `save_tier` into an empty database (nothing migrated: the archive carries the schema
    and its Alembic version), migrate it to head (an archive may predate a migration; DATABASE_URL must name `dsn`),
    then refresh the planner's statistics."""
    from app.migrate import upgrade_to_head

    _pg_tool("pg_restore", dsn, "--no-owner", f"--jobs={jobs}", "--exit-on-error", str(path))
    upgrade_to_head()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
