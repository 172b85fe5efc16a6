"""Prometheus metrics, defined in one place, summed over `--workers` processes in multiprocess mode
(docs/operations.md "Metrics", docs/scaling.md)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_wsgi_app
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client.exposition import ThreadingWSGIServer
from starlette.types import Scope

from app.kernel.addresses import parse_address
from app.kernel.config import metrics_allow


def _counter_by(name: str, documentation: str, label: str, values: Iterable[str]) -> Counter:
    """A counter with one label, each of whose `values` is exported at 0 from the start (a rate over a value never
    seen yet is 0, not no data)."""
    counter = Counter(name, documentation, [label])
    for value in values:
        counter.labels(**{label: value})
    return counter


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
REFRESH_SCOPES = Counter(
    "tarakan_infestations_refreshes_total",
    "refresh_pattern runs by scope: the whole key from source, or only the repositories the dirty-key queue named",
    ["scope"],
)
REFRESH_ERRORS = Counter("tarakan_infestations_refresh_errors_total", "refresh_pattern failures")
RECONCILE_KEYS = Counter("tarakan_infestations_reconcile_keys_total", "Keys visited by reconcile, by phase", ["phase"])
SHADOW_MISMATCHES = Counter(
    "tarakan_infestations_shadow_mismatches_total", "Shadow-compare mismatches between legacy and rollup reads"
)
# database gauges (app/ops/gauges.py): a fact about the fleet read at scrape time, never summed over processes
_DB_GAUGE: Final = "mostrecent"
DIRTY_BACKLOG = Gauge(
    "tarakan_infestations_dirty_backlog", "Pattern keys waiting for a rollup refresh", multiprocess_mode=_DB_GAUGE
)
DIRTY_OLDEST_AGE = Gauge(
    "tarakan_infestations_dirty_oldest_age_seconds", "Age of the oldest waiting dirty key", multiprocess_mode=_DB_GAUGE
)
OLDEST_REFRESHED_AGE = Gauge(
    "tarakan_infestations_oldest_refreshed_age_seconds",
    "Age of the least recently refreshed rollup row",
    multiprocess_mode=_DB_GAUGE,
)
# the evidence gate (docs/operations.md "TarakanEvidencePendingOld"): findings whose report waits for the forge
EVIDENCE_PENDING = Gauge(
    "tarakan_evidence_pending",
    "Finding occurrences whose evidence is pending (their reports wait for a re-check at the forge)",
    multiprocess_mode=_DB_GAUGE,
)
EVIDENCE_OLDEST_PENDING_AGE = Gauge(
    "tarakan_evidence_oldest_pending_seconds",
    "Age of the oldest report whose evidence is pending (0 when none is)",
    multiprocess_mode=_DB_GAUGE,
)
# coordinated disclosure's clock (docs/operations.md "TarakanDisclosureOverdue"): how late each embargo was
# published after its deadline (the worker's job, or `tarakan disclosures publish-due`), and the oldest one due now
DISCLOSURE_PUBLISH_LATENESS = Histogram(
    "tarakan_disclosure_publish_lateness_seconds",
    "Seconds between an embargo's deadline and its publication by the clock",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 21600, 86400),
)
DISCLOSURE_OLDEST_OVERDUE = Gauge(
    "tarakan_disclosure_oldest_overdue_seconds",
    "How long past its deadline the oldest embargo still unpublished is (0 when none is due)",
    multiprocess_mode=_DB_GAUGE,
)

# Forge requests (app.forge, docs/forge.md): kind repository|commit|compare|raw|branch, outcome as app.forge.api's
FORGE_REQUESTS = Counter(
    "tarakan_forge_requests_total", "Requests to a forge by host, kind and outcome", ["host", "kind", "outcome"]
)

# Dependency outages (app.kernel.outages, docs/reliability.md)
DEPENDENCY_FAILURES = Counter(
    "tarakan_dependency_failures_total",
    "Failures because Postgres or Redis was unreachable or too slow, by dependency and where (request, stream, "
    "ring, worker)",
    ["dependency", "source"],
)
REPLICA_FALLBACKS = Counter(
    "tarakan_replica_fallbacks_total", "Public reads sent to the primary because the read replica did not answer"
)
# Replica freshness (app.kernel.db, docs/scaling.md "Read replicas"): reads skip a replica that has not replayed the
# newest takedown (behind_takedown) or lags more than DATABASE_REPLICA_MAX_LAG (lagging)
REPLICA_SKIPS = _counter_by(
    "tarakan_replica_skips_total",
    "Public reads sent to the primary because the replica had not replayed the newest takedown or lagged too far",
    "reason",
    ("behind_takedown", "lagging"),
)
# The shared page cache (app.kernel.purge, docs/scaling.md "Shared cache"): a purge of tags that failed on one Varnish
# after its retries (stage tags: everything there was purged instead), and one whose fallback failed too (stage
# everything: that cache may serve what a takedown removed until the page's s-maxage runs out)
CACHE_PURGE_FAILURES = _counter_by(
    "tarakan_cache_purge_failures_total",
    "Shared-cache purges that failed on one cache after their retries, by stage (tags: fell back to purging "
    "everything; everything: the fallback failed too)",
    "stage",
    ("tags", "everything"),
)
REPLICA_LAG = Gauge(
    "tarakan_replica_lag_seconds",
    "Replica lag: 0 while it has replayed all it received, else seconds since its last replayed transaction",
    multiprocess_mode=_DB_GAUGE,
)
REPLICA_CONFLICTS = Counter(
    "tarakan_replica_conflicts_total",
    "Public reads canceled on the replica by a recovery conflict (retried once on the primary when the answer had "
    "not started, else a 503)",
)
WORKER_RECONNECTS = Counter(
    "tarakan_worker_reconnects_total",
    "Times the rollup worker lost a dependency and waited to reconnect",
    ["dependency"],
)
# max(refreshed_at): the pipeline's heartbeat (docs/operations.md "Alerts"); an hour old with work waiting = stopped
NEWEST_REFRESHED_AGE = Gauge(
    "tarakan_infestations_newest_refreshed_age_seconds",
    "Age of the most recently refreshed rollup row",
    multiprocess_mode=_DB_GAUGE,
)
DRAINED_KEYS = Counter("tarakan_infestations_drained_keys_total", "Dirty keys refreshed and removed from the queue")
HOT_KEYS_THROTTLED = Counter(
    "tarakan_infestations_hot_keys_throttled_total",
    "Keys re-dirtied during their refresh and held back for the hot-key interval",
)
SHADOW_COMPARED = Counter(
    "tarakan_infestations_shadow_compared_total", "Keys compared by the continuous shadow-compare (legacy vs rollup)"
)
SHADOW_SKIPPED = Counter(
    "tarakan_infestations_shadow_skipped_total",
    "Continuous shadow-compare skips for lag: dirty keys, keys changed since their refresh, windows crossed since "
    "the last recompute",
    ["reason"],
)
SHADOW_SUSPECTS = Counter(
    "tarakan_infestations_shadow_suspects_total",
    "Keys that differed in the continuous shadow-compare and were marked dirty to be compared again after a refresh",
)
# `fleet_job`, not `job`: Prometheus sets `job` and `instance` on every scraped series (a product label of either
# name is renamed exported_*, and rules matching it match nothing: docs/operations.md "Metrics")
JOB_LAST_SUCCESS = Gauge(
    "tarakan_job_last_success_timestamp_seconds",
    "Unix time the fleet-wide job last finished (from job_runs), by fleet_job",
    ["fleet_job"],
    multiprocess_mode=_DB_GAUGE,
)

# Maintainers' webhooks (docs/domain.md "Webhooks"): attempts counted by the worker that made them; the backlog
# gauges are facts about the fleet, read from the database by the worker after each delivery run and at each scrape
# of a web process (app/ops/gauges.py)
WEBHOOK_DELIVERIES = _counter_by(
    "tarakan_webhook_deliveries_total",
    "Webhook delivery attempts by outcome: delivered (a 2xx) or failed (another status, or no answer)",
    "outcome",
    ("delivered", "failed"),
)
WEBHOOKS_DISABLED = Counter("tarakan_webhooks_disabled_total", "Webhooks disabled after failing for 24 hours")
WEBHOOK_PENDING = Gauge(
    "tarakan_webhook_deliveries_pending",
    "Undelivered webhook deliveries of enabled webhooks (due, in flight, waiting for a retry or for the one before)",
    multiprocess_mode=_DB_GAUGE,
)
WEBHOOK_OLDEST_DUE_AGE = Gauge(
    "tarakan_webhook_oldest_due_age_seconds",
    "How long the most overdue webhook delivery has been due without being sent",
    multiprocess_mode=_DB_GAUGE,
)

# app.record.rendered: anonymous public pages rendered once per version (docs/scaling.md "Rendered once per version")
RENDER_CACHE_REQUESTS = _counter_by(
    "tarakan_render_cache_requests_total",
    "Anonymous public page requests by render-cache outcome (hit: served from memory, miss: rendered and kept, "
    "bypass: not kept: signed in, not a public 200, or too large)",
    "outcome",
    ("hit", "miss", "bypass"),
)
RENDER_CACHE_BYTES = Gauge(
    "tarakan_render_cache_bytes", "Bytes of rendered pages the render caches hold", multiprocess_mode="livesum"
)
RENDER_CACHE_EVICTIONS = Counter(
    "tarakan_render_cache_evictions_total", "Rendered pages dropped to stay within RENDER_CACHE_BYTES"
)

# HTTP RED metrics. Labels stay bounded: the route template (never the raw path; unmatched paths share one
# label), a known method or "other", and the status class.
UNMATCHED_ROUTE = "unmatched"
_CONVERTOR = re.compile(r":\w+}")  # `{pattern_key:stem}` -> `{pattern_key}`
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
HTTP_REQUESTS = Counter(
    "tarakan_http_requests_total",
    "HTTP requests by route template, method and status class",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "tarakan_http_request_duration_seconds",
    "Time from request to the end of the response body, by route template and method",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# app.kernel.watchdog: how late a 0.1 s sleep wakes, in every web and worker process (a blocked loop stalls every
# request and job of its process)
EVENT_LOOP_LAG = Histogram(
    "tarakan_event_loop_lag_seconds",
    "How late the event-loop watchdog woke from its 0.1 s sleep (web and worker processes)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


def metrics_allowed(host: str | None) -> bool:
    """`/metrics` answers this client address (METRICS_ALLOW; the address after trusted-proxy resolution)."""
    address = parse_address(host)
    return address is not None and any(address in network for network in metrics_allow())


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every 15 s is not worth a line


def start_metrics_server(port: int, host: str) -> WSGIServer:
    """prometheus-client's metrics listener in a background thread (the worker's `--metrics-port`), answering
    only the addresses in METRICS_ALLOW; others get a 404, as on the web."""
    metrics_app = make_wsgi_app()

    def guarded(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if not metrics_allowed(environ.get("REMOTE_ADDR")):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"Not found\n"]
        result: Iterable[bytes] = metrics_app(environ, start_response)
        return result

    class Server(ThreadingWSGIServer):
        address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    server = make_server(host, port, guarded, Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


@contextlib.contextmanager
def multiprocess_metrics(processes: int) -> Iterator[None]:
    """Around `tarakan serve`: with more than one process (or PROMETHEUS_MULTIPROC_DIR already set), the processes
    started inside the block record their samples in a directory emptied first (files of an earlier run would be
    summed in); a directory we created is removed afterwards. Must wrap the start of the processes: prometheus-client
    picks its storage when it is imported."""
    configured = os.environ.get(MULTIPROC_DIR)
    if processes <= 1 and not configured:
        yield
        return
    path = Path(configured) if configured else Path(tempfile.mkdtemp(prefix="tarakan-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROC_DIR] = str(path)
    try:
        yield
    finally:
        if not configured:
            os.environ.pop(MULTIPROC_DIR, None)
            shutil.rmtree(path, ignore_errors=True)


def exposition() -> bytes:
    """The Prometheus text of this server: with several processes, every metric summed over them (gauges as their
    mode says); the per-process `process_*` and `python_*` defaults exist only with one process."""
    if not os.environ.get(MULTIPROC_DIR):
        return generate_latest()
    registry = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def process_exit() -> None:
    """A serve process stops: its live gauges go (counters and histograms stay in the sum)."""
    if os.environ.get(MULTIPROC_DIR):
        prometheus_multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


# a route template (`{pattern_key:stem}` -> `{pattern_key}`) per route path, worked out once
_templates: dict[str, str] = {}
# the labelled children of the two RED metrics per (route, method label, status class): a dict lookup per request
# instead of two `labels()` calls (each builds its key and takes a lock)
_observed: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def route_template(scope: Scope) -> str:
    """The template of the route that handled the request (`/infestations/{key}`), set by Starlette's router."""
    path = getattr(scope.get("route"), "path", None)
    if not isinstance(path, str) or not path:
        return UNMATCHED_ROUTE
    template = _templates.get(path)
    if template is None:
        template = _templates[path] = _CONVERTOR.sub("}", path)
    return template


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one request by route template, method ("other" beyond the known ones) and status class, and time it."""
    label = method if method in _METHODS else "other"
    key = (route, label, status // 100)
    children = _observed.get(key)
    if children is None:
        children = _observed[key] = (
            HTTP_REQUESTS.labels(route=route, method=label, status=f"{status // 100}xx"),
            HTTP_DURATION.labels(route=route, method=label),
        )
    children[0].inc()
    children[1].observe(seconds)
