"""Throw-away services for one benchmark run: an embedded Postgres (fsync off) and Valkey in a temporary
directory, plus the real `tarakan` processes the run starts; all stopped and removed when the run ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.devservices import Postgres, Redis
from tests.harness import start_server, stop


@dataclass
class Services:
    pg: Postgres
    redis: Redis
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # stopped at the end of the run

    @property
    def dsn(self) -> str:
        """The database URL for psycopg (no SQLAlchemy driver suffix)."""
        return self.pg.url.replace("postgresql+psycopg://", "postgresql://")

    def use(self, revision: str | None = "head", **extra: str) -> dict[str, str]:
        """The environment of the run's `tarakan` processes, set in this process too (in-process service calls),
        with the schema migrated to `revision` (None: left empty, e.g. for `restore_tier`)."""
        from alembic import command

        from app.migrate import alembic_config

        env = {"DATABASE_URL": self.pg.url, "REDIS_URL": self.redis.url, "SECRET_KEY": "bench", **extra}
        os.environ.update(env)
        if revision is not None:
            command.upgrade(alembic_config(), revision)
        return env

    def serve(self, env: dict[str, str], **options: Any) -> tuple[subprocess.Popen[bytes], str]:
        """A quiet `tarakan serve` (tests/harness.py `start_server` options), stopped at the end of the run at the
        latest: the process and its base URL. It sends `Server-Timing` (SERVER_TIMING=1): the benchmarks read it."""
        proc, base = start_server({"SERVER_TIMING": "1", **env}, **{"quiet": True, **options})
        self.procs.append(proc)
        return proc, base


@contextlib.contextmanager
def throwaway_services(prefix: str) -> Iterator[Services]:
    tmp = tempfile.mkdtemp(prefix=prefix)
    services = Services(
        Postgres(os.path.join(tmp, "pg"), fast_unsafe=True).start(), Redis(os.path.join(tmp, "redis")).start()
    )
    try:
        yield services
    finally:
        for proc in services.procs:
            stop(proc)
        services.redis.stop()
        services.pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
