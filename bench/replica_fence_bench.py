"""What the takedown fence costs a public read (issue 25, Deliver 2): in-process requests to a repository twin and to
/index.json, with the replica URL pointing at the primary (no fence: the suite's default) and at a real hot standby
(the fence: the primary's newest audit id once per request, the standby's replayed one at most once a second).

    .venv/bin/python -m bench.replica_fence_bench [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import psycopg


async def _no_marker() -> int:
    return -1


async def _run(paths: list[str], requests: int, *, fence: bool) -> dict[str, float]:
    import httpx

    from app.kernel import db
    from app.main import app

    original = db._primary_marker
    if not fence:
        db._primary_marker = _no_marker

    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 4711))
    out: dict[str, float] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for path in paths:
            for _ in range(50):  # warm pools and caches
                assert (await client.get(path)).status_code == 200
            samples = []
            for _ in range(requests):
                t = time.perf_counter()
                response = await client.get(path)
                samples.append(time.perf_counter() - t)
                assert response.status_code == 200
            out[path] = statistics.median(samples) * 1e6
    await db.dispose_engines()
    db._primary_marker = original
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    from app.devservices import Postgres, Redis, Standby

    tmp = tempfile.mkdtemp(prefix="tarakan-fence-")
    primary = Postgres(os.path.join(tmp, "pg"), fast_unsafe=True).start()
    os.environ.update(DATABASE_URL=primary.url, SECRET_KEY="bench", BASE_URL="http://testserver")
    redis = Redis(os.path.join(tmp, "redis")).start()
    os.environ["REDIS_URL"] = redis.url
    from app.migrate import upgrade_to_head

    upgrade_to_head()
    plain = primary.url.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO repositories (host, owner, name, canonical_url, description, listing_status)"
            " VALUES ('github.com', 'bench', 'widget', 'https://github.com/bench/widget', 'bench', 'listed')"
        )
        conn.execute("INSERT INTO audit_events (action, subject_type, subject_id) VALUES ('bench', 'bench', 'x')")
    standby = Standby(os.path.join(tmp, "standby"), primary.url, fast_unsafe=True).start()
    time.sleep(1.0)  # replayed
    paths = ["/repos/github.com/bench/widget.json", "/index.json"]
    try:
        results: dict[str, list[dict[str, float]]] = {}
        runs = (
            ("replica = primary (no fence)", primary.url, False),
            ("standby, fence off", standby.url, False),
            ("standby, fence on", standby.url, True),
        )
        for _ in range(3):  # interleaved rounds: this machine's noise hits every configuration alike
            for label, replica, fence in runs:
                os.environ["DATABASE_REPLICA_URL"] = replica
                results.setdefault(label, []).append(asyncio.run(_run(paths, args.requests, fence=fence)))
        for label, rounds in results.items():
            medians = {p: statistics.median(r[p] for r in rounds) for p in paths}
            print(f"{label:30s} " + "  ".join(f"{p}: {us:6.0f} us" for p, us in medians.items()))
        with psycopg.connect(plain, autocommit=True) as conn:
            t = time.perf_counter()
            for _ in range(2000):
                conn.execute("SELECT coalesce(max(id), 0) FROM audit_events").fetchone()
            print(f"the primary's marker query alone (one connection): {(time.perf_counter() - t) / 2000 * 1e6:.0f} us")
    finally:
        standby.stop()
        primary.stop()
        redis.stop()


if __name__ == "__main__":
    main()
