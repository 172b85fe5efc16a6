"""`python -m app` (./run): embedded Postgres/Valkey when DATABASE_URL/REDIS_URL are unset (and then the demo forge,
for the FORGE_* bases that are unset), migrate, seed demo data into an empty database, then serve the web app and an
arq worker until Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from app.devforge import DEMO_FORGE_DIR, DEMO_FORGE_URL, EXAMPLES_FORGE, FolderForge
from app.devservices import Postgres, Redis, free_port, pdeathsig

_die_with_parent = pdeathsig(signal.SIGTERM)  # children get SIGTERM if this launcher dies, even by SIGKILL


def _wait_http(url: str, procs: list[subprocess.Popen[bytes]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the web server did not answer {url}")


_PASTED = ("DATABASE_URL", "REDIS_URL", "BASE_URL")


def paste_line(environ: Mapping[str, str], forge: Mapping[str, str] | None = None) -> str:
    """`export DATABASE_URL=... REDIS_URL=... BASE_URL=...` and the demo forge's settings: what a second terminal
    needs to reach this one."""
    pairs = [(k, environ[k]) for k in _PASTED] + sorted((forge or {}).items())
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in pairs)


def start_demo_forge(data: Path) -> tuple[FolderForge, dict[str, str]]:
    """The embedded default's forge (README "What the two commands do"): the README's example repositories copied
    into `data`/forge, where the seed adds its own; every FORGE_* base that is unset points at it."""
    folder = data / "forge"
    shutil.copytree(EXAMPLES_FORGE, folder, dirs_exist_ok=True)
    forge = FolderForge(folder).start()
    chosen = {k: v for k, v in forge.settings().items() if not os.environ.get(k)}
    chosen |= {DEMO_FORGE_DIR: str(folder), DEMO_FORGE_URL: forge.url}
    os.environ.update(chosen)
    return forge, chosen


def main() -> int:
    t0 = time.perf_counter()
    data = Path(os.environ.get("APP_DATA_DIR", ".data")).resolve()
    services: list[Postgres | Redis | FolderForge] = []
    forge_settings: dict[str, str] = {}
    if not os.environ.get("DATABASE_URL"):
        pg = Postgres(data / "pg").start()
        services.append(pg)
        os.environ["DATABASE_URL"] = pg.url
        forge, forge_settings = start_demo_forge(data)
        services.append(forge)
    if not os.environ.get("REDIS_URL"):
        redis = Redis(data / "redis").start()
        services.append(redis)
        os.environ["REDIS_URL"] = redis.url
    port = os.environ.get("PORT", "8000")
    os.environ.setdefault("BASE_URL", f"http://127.0.0.1:{port}")
    procs: list[subprocess.Popen[bytes]] = []
    seed: subprocess.Popen[bytes] | None = None
    signalled: set[int] = set()
    stopping: list[bool] = []

    def stop(*_: object) -> None:  # SIGINT once per child: a second one makes uvicorn skip its lifespan shutdown
        stopping.append(True)
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
        procs.append(
            subprocess.Popen([*tarakan, "serve", "--port", port], start_new_session=True, preexec_fn=_die_with_parent)
        )
        worker_metrics = os.environ.get("WORKER_METRICS_PORT") or str(free_port())

        def start_worker() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [*tarakan, "worker", "--metrics-port", worker_metrics],
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

        procs.append(start_worker())
        worker_started, worker_restarts = time.monotonic(), 0
        # the demo seed fills an empty database while the site is already up (it is idempotent and skips
        # a database that has repositories); the page shows the registry as the reports land
        seed = subprocess.Popen([*tarakan, "seed", "--demo", "--if-empty"], preexec_fn=_die_with_parent)
        _wait_http(f"http://127.0.0.1:{port}/healthz", procs)
        print(f"[run] Tarakan is up at http://127.0.0.1:{port}/ ({time.perf_counter() - t0:.1f}s)")
        print("[run] for the tarakan CLI in another terminal, paste:")
        print(paste_line(os.environ, forge_settings))
        if forge_settings:
            print(f"[run] demo forge: {forge_settings[DEMO_FORGE_URL]}/ serving {forge_settings[DEMO_FORGE_DIR]}")
        print(
            f"[run] metrics: http://127.0.0.1:{port}/metrics (web), http://127.0.0.1:{worker_metrics}/metrics (worker)"
        )
        print("[run] Ctrl-C stops everything", flush=True)
        while procs[0].poll() is None and not stopping:
            worker = procs[1]
            if worker.poll() is not None:
                # a worker that dies is restarted (docs/reliability.md), backing off if it keeps dying at once
                worker_restarts = 0 if time.monotonic() - worker_started > 60 else worker_restarts + 1
                delay = min(2.0**worker_restarts, 30.0)
                print(f"[run] the worker exited with {worker.returncode}; restarting it in {delay:.0f}s", flush=True)
                time.sleep(delay)
                if stopping:
                    break
                procs[1] = start_worker()
                worker_started = time.monotonic()
            if seed is not None and seed.poll() is not None:
                if seed.returncode != 0:
                    print(f"[run] demo seed failed with {seed.returncode}", file=sys.stderr)
                seed = None
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except subprocess.CalledProcessError as exc:
        print(f"[run] {' '.join(map(str, exc.cmd))} failed with {exc.returncode}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"[run] {exc}", file=sys.stderr)
        return 1
    finally:
        stop()
        if seed is not None and seed.poll() is None:
            seed.terminate()
            seed.wait(15)
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
