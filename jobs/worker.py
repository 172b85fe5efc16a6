"""arq worker settings and job functions (to be completed by the projection engine)."""

from __future__ import annotations

from typing import Any

from arq.connections import RedisSettings
from arq.worker import run_worker as arq_run_worker

from app.config import settings


async def drain_dirty_keys(ctx: dict[str, Any]) -> int:
    from app.infestations.projection import drain

    return await drain()


class WorkerSettings:
    functions = [drain_dirty_keys]
    redis_settings: RedisSettings | None = None


def run_worker(*, burst: bool = False) -> int:
    WorkerSettings.redis_settings = RedisSettings.from_dsn(settings().redis_url)
    arq_run_worker(WorkerSettings, burst=burst)  # type: ignore[arg-type]
    return 0
