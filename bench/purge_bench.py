"""What a takedown's shared-cache purge adds to the moderator's answer (issue 26, Deliver 3): `app.kernel.purge`
against a real local `varnishd` running deploy/varnish/default.vcl (no backend needed), for a report's few tags, a
large report's 2,000 occurrence tags (five requests), two caches, and a cache that refuses connections (every try
of both stages fails). No database.

    .venv/bin/python -m bench.purge_bench [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time

from app.devservices import Varnish, free_port
from app.kernel import purge


async def _timed(rounds: int, tags: set[str]) -> str:
    took = []
    state = ""
    for _ in range(rounds):
        started = time.perf_counter()
        state = (await purge.purge(tags)).state
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    p95 = took[max(0, int(len(took) * 0.95) - 1)]
    return f"median {statistics.median(took):7.2f} ms   p95 {p95:7.2f} ms   {state}"


async def main(rounds: int) -> None:
    logging.disable(logging.ERROR)  # the refused cache logs every try
    varnish = Varnish(tempfile.mkdtemp(prefix="purge-bench-"), f"127.0.0.1:{free_port()}").start()
    few = {f"o:{i}" for i in range(20)} | {"atlas", "r:1"}
    many = {f"o:{i}" for i in range(100_000, 102_000)}
    cases = [
        ("22 tags, one cache", varnish.url, few, rounds),
        ("2,000 tags, one cache", varnish.url, many, max(10, rounds // 4)),
        ("22 tags, two caches", f"{varnish.url},{varnish.url}/", few, rounds),
        ("22 tags, a refused cache", f"http://127.0.0.1:{free_port()}", few, 10),
    ]
    try:
        for name, urls, tags, n in cases:
            os.environ["VARNISH_PURGE_URLS"] = urls
            print(f"{name:28} {await _timed(n, tags)}")
    finally:
        varnish.stop()
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(main(parser.parse_args().rounds))
