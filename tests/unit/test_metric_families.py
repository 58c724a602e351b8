"""The per-process metric families: declared once (``hookd.metric_families``), exported
as they always were (name, type, help, labels, buckets), each by the processes that
observe it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, Histogram

from hookd import metric_families
from hookd.metric_families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]

# name: (type, help, labels, buckets without +Inf). A change here is a change of what
# /metrics says: dashboards and alerts read these.
EXPORTED: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]] = {
    "hookd_webhooks_received": (
        "counter",
        "Webhook requests by outcome (accepted, duplicate, rejected).",
        ("source", "outcome"),
        (),
    ),
    "hookd_webhook_rejections": (
        "counter",
        "Rejected webhook requests by reason code.",
        ("source", "reason"),
        (),
    ),
    "hookd_ack_seconds": (
        "histogram",
        "Time from request start to acknowledgement of a stored event.",
        ("source",),
        (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0),
    ),
    "hookd_commit_seconds": (
        "histogram",
        "Group commits of received events: how long each insert and its commit took.",
        ("outcome",),
        (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.5, 1.0, 2.5, 10),
    ),
    "hookd_events_processed": (
        "counter",
        "Processing outcomes per attempt (processed, retry, dead), and events superseded "
        "without running ([sources.order]).",
        ("source", "outcome"),
        (),
    ),
    "hookd_processing_seconds": (
        "histogram",
        "Time to run an event's handlers, per attempt.",
        ("source",),
        (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0),
    ),
    "hookd_claims": (
        "counter",
        "Events claimed for processing (each claim is an attempt), takeovers included.",
        ("source",),
        (),
    ),
    "hookd_lease_takeovers": (
        "counter",
        "Claims of events whose previous claim's lease had expired: its worker died or stalled.",
        ("source",),
        (),
    ),
    "hookd_destination_deliveries": (
        "counter",
        "Deliveries per destination: delivered, failed (an attempt used), skipped by the "
        "filter, deferred (paused, rate or concurrency limit, breaker: no attempt used).",
        ("source", "destination", "outcome"),
        (),
    ),
    "hookd_destination_delivery_seconds": (
        "histogram",
        "Time of each delivery's HTTP request, answered or not.",
        ("source", "destination"),
        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    ),
    "hookd_handler_skips": (
        "counter",
        "Handlers not run for an event because their filter did not select it.",
        ("source",),
        (),
    ),
    "hookd_reconcile_run_seconds": (
        "histogram",
        "Duration of reconciliation runs that ended (succeeded or failed).",
        ("source",),
        (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
    ),
    "hookd_reconcile_duplicates": (
        "counter",
        "Items a reconciliation run listed that were already stored: duplicates the store "
        "suppressed on the reconcile path.",
        ("source",),
        (),
    ),
    "hookd_notifications": (
        "counter",
        "Notifications to [[notify]] channels by result: sent, retry (a failure that will be "
        "tried again), failed (refused for good, or out of attempts).",
        ("channel", "result"),
        (),
    ),
}
RECEIVING = {
    "hookd_webhooks_received",
    "hookd_webhook_rejections",
    "hookd_ack_seconds",
    "hookd_commit_seconds",
}
RECONCILING = {"hookd_reconcile_run_seconds", "hookd_reconcile_duplicates"}
# The alerts' schedule sends notifications (hookd serve without Redis, hookd worker).
NOTIFYING = {"hookd_notifications"}
PROCESSING = set(EXPORTED) - RECEIVING - RECONCILING - NOTIFYING

# What a fresh process registers, listed as {name: [type, help, labels, buckets]}.
REGISTERED = """
import importlib, json, sys
from prometheus_client import REGISTRY
for module in sys.argv[1:]:
    importlib.import_module(module)
found = {}
for collector in list(REGISTRY._collector_to_names):
    for family in getattr(collector, "describe", list)():
        if family.name.startswith("hookd_"):
            bounds = getattr(collector, "_upper_bounds", [])
            found[family.name] = [
                family.type, family.documentation, list(collector._labelnames),
                [b for b in bounds if b != float("inf")],
            ]
print(json.dumps(found))
"""


def registered_by(*modules: str) -> dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", REGISTERED, *modules],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return {
        name: (kind, help_text, tuple(labels), tuple(buckets))
        for name, (kind, help_text, labels, buckets) in json.loads(out).items()
    }


def test_every_family_is_declared_once_as_exported() -> None:
    declared = {}
    for family in FAMILIES:
        kind = "histogram" if isinstance(family, metric_families.HistogramFamily) else "counter"
        name = family.name.removesuffix("_total")
        buckets = family.buckets if isinstance(family, metric_families.HistogramFamily) else ()
        declared[name] = (kind, family.help, family.labels, buckets)
    assert declared == EXPORTED
    # Every declaration of the module is in FAMILIES.
    module_families = [
        value
        for value in vars(metric_families).values()
        if isinstance(value, metric_families.CounterFamily | metric_families.HistogramFamily)
    ]
    assert sorted(f.name for f in module_families) == sorted(f.name for f in FAMILIES)


@pytest.mark.parametrize(
    ("modules", "families"),
    [
        (("hookd.runtime.app",), set(EXPORTED)),  # hookd serve's receiver processes
        (("hookd.runtime.worker",), set(EXPORTED) - RECEIVING),  # hookd worker
        (("ingest.metrics",), RECEIVING),
        (("processing.processor",), PROCESSING),
    ],
    ids=["serve", "worker", "receiving", "processing"],
)
def test_a_process_exports_the_families_of_what_it_runs(
    modules: tuple[str, ...], families: set[str]
) -> None:
    registered = registered_by(*modules)
    assert set(registered) == families
    assert registered == {name: EXPORTED[name] for name in families}


def test_the_registered_families_are_the_declared_ones() -> None:
    """The module-level objects the observing code uses are those families."""
    from hookd.notify import outbox
    from ingest import metrics
    from processing import destinations, processor
    from reconcile import poller

    owners = {
        "WEBHOOKS_RECEIVED": metrics,
        "WEBHOOK_REJECTIONS": metrics,
        "ACK_SECONDS": metrics,
        "COMMIT_SECONDS": metrics,
        "EVENTS_PROCESSED": processor,
        "PROCESSING_SECONDS": processor,
        "CLAIMS": processor,
        "TAKEOVERS": processor,
        "DELIVERIES": destinations,
        "DELIVERY_SECONDS": destinations,
        "HANDLER_SKIPS": destinations,
        "RUN_SECONDS": poller,
        "DUPLICATES": poller,
        "NOTIFICATIONS": outbox,
    }
    assert len(owners) == len(FAMILIES)
    for attribute, owner in owners.items():
        family = getattr(metric_families, attribute)
        observed = getattr(owner, attribute)
        assert observed._name == family.name.removesuffix("_total"), attribute
        assert observed._documentation == family.help, attribute
        assert observed._labelnames == family.labels, attribute
        assert REGISTRY._names_to_collectors[observed._name] is observed, attribute
        if isinstance(observed, Histogram):
            assert isinstance(family, metric_families.HistogramFamily)
            assert tuple(observed._upper_bounds[:-1]) == family.buckets, attribute
