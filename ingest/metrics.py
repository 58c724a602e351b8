"""Prometheus metric families (CONTRACT §3)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Buckets that show the providers' answer budgets: Slack 3 s, GitHub 10 s.
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)

UNKNOWN_SOURCE = "_unknown"

WEBHOOKS_RECEIVED = Counter(
    "hookd_webhooks_received_total",
    "Webhook requests by outcome (accepted, duplicate, rejected).",
    ["source", "outcome"],
)
WEBHOOK_REJECTIONS = Counter(
    "hookd_webhook_rejections_total",
    "Rejected webhook requests by reason code.",
    ["source", "reason"],
)
ACK_SECONDS = Histogram(
    "hookd_ack_seconds",
    "Time from request start to acknowledgement of a stored event.",
    ["source"],
    buckets=ACK_BUCKETS,
)
