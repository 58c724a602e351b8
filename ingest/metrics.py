"""The receiver's Prometheus metric families, and how a process renders its families.

Per-process families (received, rejections, ack latency, processed, processing
time) are declared in ``hookd.metric_families`` and registered where they are
observed: the receiver's here. With several ``hookd serve`` worker processes they use
prometheus-client's multiprocess mode: ``hookd serve --workers N`` points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the workers start, and every
scrape, whichever process answers it, sums the files of all of them.
Queue and reconciliation families are read from the database at scrape time
(``hookd.metrics.db``), so every process and every replica reports the same value.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client import values as client_values
from prometheus_client.multiprocess import MultiProcessCollector

from hookd import metric_families as families

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

ACK_BUCKETS = families.ACK_SECONDS.buckets

UNKNOWN_SOURCE = "_unknown"
# The outcome label of hookd_webhooks_received_total.
OUTCOMES = ("accepted", "duplicate", "rejected")
# Why a verifier refuses a request (SignatureError, 401): the reason codes every
# provider shares (docs/providers.md).
SIGNATURE_REASONS = (
    "missing_header",
    "duplicate_header",
    "conflicting_headers",
    "empty_header",
    "malformed_id",
    "malformed_signature",
    "missing_signature",
    "malformed_timestamp",
    "timestamp_too_old",
    "timestamp_in_future",
    "bad_signature",
)
# The reason label of hookd_webhook_rejections_total for a configured source: the
# verifiers' reasons, then the receiver's own (400, 413, 408, a client gone before its
# body arrived, 503).
REJECTION_REASONS = (
    *SIGNATURE_REASONS,
    "malformed_payload",
    "unstorable_value",
    "body_too_large",
    "body_timeout",
    "client_disconnected",
    "unavailable",
    # A registration handshake refused (403): Meta's verify token, Asana's token.
    "handshake_refused",
)
# Refusals before a source is known, counted with source="_unknown".
UNKNOWN_SOURCE_REASONS = ("unknown_source", "header_timeout", "headers_too_large")

# Declared in hookd.metric_families; registered here, in the processes that receive.
WEBHOOKS_RECEIVED = families.WEBHOOKS_RECEIVED.register()
WEBHOOK_REJECTIONS = families.WEBHOOK_REJECTIONS.register()
ACK_SECONDS = families.ACK_SECONDS.register()
# Group commits: what an acknowledgement waits for once its request is read.
COMMIT_OUTCOMES = ("committed", "failed")
COMMIT_SECONDS = families.COMMIT_SECONDS.register()


def initialise(sources: Iterable[str]) -> None:
    """Every label set these families know of, at 0, before the first request: a
    dashboard or an ``absent()`` alert sees each series from the first scrape on,
    not from the first time it happens."""
    for source in sources:
        for outcome in OUTCOMES:
            WEBHOOKS_RECEIVED.labels(source, outcome)
        for reason in REJECTION_REASONS:
            WEBHOOK_REJECTIONS.labels(source, reason)
        ACK_SECONDS.labels(source)
    WEBHOOKS_RECEIVED.labels(UNKNOWN_SOURCE, "rejected")
    for outcome in COMMIT_OUTCOMES:
        COMMIT_SECONDS.labels(outcome)
    for reason in UNKNOWN_SOURCE_REASONS:
        WEBHOOK_REJECTIONS.labels(UNKNOWN_SOURCE, reason)


class AckTally:
    """The receiver's per-request counts and ack times, written to their families once
    per event-loop turn instead of once per request.

    The requests of one group commit all resume in the same turn of the loop, so one
    write per label set covers the whole group (a counter ``inc(n)``, a histogram's
    buckets and sum each once) where one per request cost a lock and a bucket search
    each. The write is scheduled with ``call_soon`` by the first request of the turn
    and runs before anything queued after it, a scrape included: nothing is held back.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._acks: dict[str, list[float]] = {}
        self._scheduled = False

    def record(self, source: str, outcome: str, seconds: float) -> None:
        key = (source, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1
        acks = self._acks.get(source)
        if acks is None:
            self._acks[source] = [seconds]
        else:
            acks.append(seconds)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        counts, self._counts = self._counts, {}
        acks, self._acks = self._acks, {}
        for (source, outcome), n in counts.items():
            WEBHOOKS_RECEIVED.labels(source, outcome).inc(n)
        for source, seconds in acks.items():
            observe_many(ACK_SECONDS.labels(source), seconds)


def observe_many(histogram: Histogram, values: list[float]) -> None:
    """``observe`` each of ``values``, with one write per bucket and one to the sum.

    Uses the child's bucket and sum values, as ``Histogram.observe`` does; should a
    prometheus-client release rename them, each value is observed on its own.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        # The first bound at or above the value, as observe() picks it (the last is +Inf).
        counts[bisect.bisect_left(bounds, value)] += 1
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)
    total.inc(math.fsum(values))


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def prepare_multiprocess(workers: int, processors: int = 0) -> Path | None:
    """Before worker and processor processes start: give them one shared, empty
    metrics directory.

    Returns the directory this call created (the caller removes it at exit), or
    None when there is nothing to clean up: one process alone needs no directory,
    and a directory the operator chose is emptied of stale ``*.db`` files but kept.
    With processor processes (``HOOKD_PROCESSORS``), the processing families are
    counted there, so even one receiver process needs the directory to show them.
    """
    chosen = multiprocess_dir()
    if chosen is not None:
        path = Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        return None
    if workers <= 1 and processors <= 0:
        return None
    created = Path(tempfile.mkdtemp(prefix="hookd-metrics-"))
    os.environ[MULTIPROC_ENV] = str(created)
    _count_in_files()
    return created


def _count_in_files() -> None:
    """Count in the directory from this process too, when it answers requests itself
    (one receiver process): prometheus-client picks where values live when it is
    imported, which was before the directory was chosen. Every family here has labels,
    so no value exists before its first ``labels()``, which comes after this."""
    client_values.ValueClass = client_values.get_value_class()  # type: ignore[no-untyped-call]


def render_process_families() -> bytes:
    """This process's families; in multiprocess mode, the sum over all processes."""
    if multiprocess_dir() is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)
