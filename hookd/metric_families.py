"""The Prometheus families hookd's processes count in, each declared once: its name,
help text, labels and (for a histogram) buckets.

The module that observes a family registers it (``COMMIT_SECONDS.register()`` in
``ingest.metrics``), so a process exports the families of what it runs, as before:
``hookd worker`` has no receiver's families. The families read from the database at
scrape time are collectors, not declarations: ``hookd.metrics.db`` and
``hookd.metrics.destinations``. To add a family: declare it here and in ``FAMILIES``,
register it where it is observed, and give it its label sets at 0 at start-up if a
dashboard should see it before the first observation (``ingest.metrics.initialise``).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Histogram


@dataclass(frozen=True)
class CounterFamily:
    name: str
    help: str
    labels: tuple[str, ...]

    def register(self) -> Counter:
        """The family, in the process's default registry."""
        return Counter(self.name, self.help, self.labels)


@dataclass(frozen=True)
class HistogramFamily:
    name: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...]

    def register(self) -> Histogram:
        """The family, in the process's default registry."""
        return Histogram(self.name, self.help, self.labels, buckets=self.buckets)


# -- receiving (ingest) ----------------------------------------------------------------

WEBHOOKS_RECEIVED = CounterFamily(
    "hookd_webhooks_received_total",
    "Webhook requests by outcome (accepted, duplicate, rejected).",
    ("source", "outcome"),
)
WEBHOOK_REJECTIONS = CounterFamily(
    "hookd_webhook_rejections_total",
    "Rejected webhook requests by reason code.",
    ("source", "reason"),
)
ACK_SECONDS = HistogramFamily(
    "hookd_ack_seconds",
    "Time from request start to acknowledgement of a stored event.",
    ("source",),
    # The providers' answer budgets show: Slack 3 s, GitHub 10 s.
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0),
)
# Group commits: what an acknowledgement waits for once its request is read.
COMMIT_SECONDS = HistogramFamily(
    "hookd_commit_seconds",
    "Group commits of received events: how long each insert and its commit took.",
    ("outcome",),
    (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.5, 1.0, 2.5, 10.0),
)

# -- processing ------------------------------------------------------------------------

EVENTS_PROCESSED = CounterFamily(
    "hookd_events_processed_total",
    "Processing outcomes per attempt (processed, retry, dead), and events superseded "
    "without running ([sources.order]).",
    ("source", "outcome"),
)
PROCESSING_SECONDS = HistogramFamily(
    "hookd_processing_seconds",
    "Time to run an event's handlers, per attempt.",
    ("source",),
    (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0),
)
CLAIMS = CounterFamily(
    "hookd_claims_total",
    "Events claimed for processing (each claim is an attempt), takeovers included.",
    ("source",),
)
TAKEOVERS = CounterFamily(
    "hookd_lease_takeovers_total",
    "Claims of events whose previous claim's lease had expired: its worker died or stalled.",
    ("source",),
)

# -- destinations ----------------------------------------------------------------------

DELIVERIES = CounterFamily(
    "hookd_destination_deliveries_total",
    "Deliveries per destination: delivered, failed (an attempt used), skipped by the "
    "filter, deferred (paused, rate or concurrency limit, breaker: no attempt used).",
    ("source", "destination", "outcome"),
)
DELIVERY_SECONDS = HistogramFamily(
    "hookd_destination_delivery_seconds",
    "Time of each delivery's HTTP request, answered or not.",
    ("source", "destination"),
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HANDLER_SKIPS = CounterFamily(
    "hookd_handler_skips_total",
    "Handlers not run for an event because their filter did not select it.",
    ("source",),
)

# -- reconciliation --------------------------------------------------------------------

# Per process, like the processing families: in the process that ran the run (a
# `hookd worker`'s schedule, `hookd serve`'s API runs, or its schedule without Redis).
RUN_SECONDS = HistogramFamily(
    "hookd_reconcile_run_seconds",
    "Duration of reconciliation runs that ended (succeeded or failed).",
    ("source",),
    (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
)
DUPLICATES = CounterFamily(
    "hookd_reconcile_duplicates_total",
    "Items a reconciliation run listed that were already stored: duplicates the store "
    "suppressed on the reconcile path.",
    ("source",),
)

# -- notifications (hookd.notify) -------------------------------------------------------

NOTIFICATIONS = CounterFamily(
    "hookd_notifications_total",
    "Notifications to [[notify]] channels by result: sent, retry (a failure that will be "
    "tried again), failed (refused for good, or out of attempts).",
    ("channel", "result"),
)

FAMILIES: tuple[CounterFamily | HistogramFamily, ...] = (
    WEBHOOKS_RECEIVED,
    WEBHOOK_REJECTIONS,
    ACK_SECONDS,
    COMMIT_SECONDS,
    EVENTS_PROCESSED,
    PROCESSING_SECONDS,
    CLAIMS,
    TAKEOVERS,
    DELIVERIES,
    DELIVERY_SECONDS,
    HANDLER_SKIPS,
    RUN_SECONDS,
    DUPLICATES,
    NOTIFICATIONS,
)
