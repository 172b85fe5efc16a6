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

from app.devservices import Postgres, Redis
from tests.harness import stop


@dataclass
class Services:
    pg: Postgres
    redis: Redis
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # stopped at the end of the run

    @property
    def dsn(self) -> str:
        """The database URL for psycopg (no SQLAlchemy driver suffix)."""
        return self.pg.url.replace("postgresql+psycopg://", "postgresql://")


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
