"""`python -m app` (./run): embedded Postgres/Valkey when DATABASE_URL/REDIS_URL are unset, migrate, seed demo
data into an empty database, then serve the web app and an arq worker until Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from app.devservices import Postgres, Redis, pdeathsig

_die_with_parent = pdeathsig(signal.SIGTERM)  # children get SIGTERM if this launcher dies, even by SIGKILL


def main() -> int:
    t0 = time.perf_counter()
    data = Path(os.environ.get("APP_DATA_DIR", ".data")).resolve()
    services: list[Postgres | Redis] = []
    if not os.environ.get("DATABASE_URL"):
        pg = Postgres(data / "pg").start()
        services.append(pg)
        os.environ["DATABASE_URL"] = pg.url
    if not os.environ.get("REDIS_URL"):
        redis = Redis(data / "redis").start()
        services.append(redis)
        os.environ["REDIS_URL"] = redis.url
    port = os.environ.get("PORT", "8000")
    os.environ.setdefault("BASE_URL", f"http://127.0.0.1:{port}")
    procs: list[subprocess.Popen[bytes]] = []
    signalled: set[int] = set()

    def stop(*_: object) -> None:  # SIGINT once per child: a second one makes uvicorn skip its lifespan shutdown
        for p in procs:
            if p.poll() is None and p.pid not in signalled:
                signalled.add(p.pid)
                p.send_signal(signal.SIGINT)

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, on_term)
    try:
        tarakan = [sys.executable, "-m", "app.cli"]
        subprocess.run([*tarakan, "migrate"], check=True)
        subprocess.run([*tarakan, "seed", "--demo", "--if-empty"], check=True)
        procs.append(
            subprocess.Popen([*tarakan, "serve", "--port", port], start_new_session=True, preexec_fn=_die_with_parent)
        )
        procs.append(subprocess.Popen([*tarakan, "worker"], start_new_session=True, preexec_fn=_die_with_parent))
        print(f"[run] Tarakan is starting at http://127.0.0.1:{port}/ (set up in {time.perf_counter() - t0:.1f}s)")
        print("[run] Ctrl-C stops everything", flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except subprocess.CalledProcessError as exc:
        print(f"[run] {' '.join(map(str, exc.cmd))} failed with {exc.returncode}", file=sys.stderr)
        return 1
    finally:
        stop()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        for s in reversed(services):
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
