"""Prometheus metrics (served on /metrics). Defined in one place; features import what they record."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram
from starlette.datastructures import MutableHeaders
from starlette.types import Message, Receive, Scope, Send

from app.kernel.asgi import HTTPMiddleware

LIST_DURATION = Histogram(
    "tarakan_infestations_list_seconds",
    "Duration of list_infestations by source (rollup|legacy) and window",
    ["source", "window"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
REFRESH_DURATION = Histogram(
    "tarakan_infestations_refresh_seconds",
    "Duration of refresh_pattern by reason",
    ["reason"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
)
REFRESH_INSTANCES = Histogram(
    "tarakan_infestations_refresh_instances",
    "Instance rows written per refresh_pattern, by reason",
    ["reason"],
    buckets=(0, 1, 2, 5, 10, 50, 100, 1000, 10000, 100000),
)
REFRESH_ERRORS = Counter("tarakan_infestations_refresh_errors_total", "refresh_pattern failures")
RECONCILE_KEYS = Counter("tarakan_infestations_reconcile_keys_total", "Keys visited by reconcile, by phase", ["phase"])
SHADOW_MISMATCHES = Counter(
    "tarakan_infestations_shadow_mismatches_total", "Shadow-compare mismatches between legacy and rollup reads"
)
DIRTY_BACKLOG = Gauge("tarakan_infestations_dirty_backlog", "Pattern keys waiting for a rollup refresh")
DIRTY_OLDEST_AGE = Gauge("tarakan_infestations_dirty_oldest_age_seconds", "Age of the oldest waiting dirty key")
OLDEST_REFRESHED_AGE = Gauge(
    "tarakan_infestations_oldest_refreshed_age_seconds", "Age of the least recently refreshed rollup row"
)


class ServerTimingMiddleware(HTTPMiddleware):
    """`Server-Timing: app;dur=<ms>` on every response: the server's time until the response headers (the whole
    render for a template page), so operators and the benchmark see server time apart from the network."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed_ms = (time.perf_counter() - started) * 1000
                MutableHeaders(scope=message).append("Server-Timing", f"app;dur={elapsed_ms:.2f}")
            await send(message)

        await self.app(scope, receive, send_with_timing)
