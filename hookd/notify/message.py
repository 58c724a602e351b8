"""What a notification says: one alert kind, what happened to its alerts (opened,
resolved, still open after the quiet time), and those alerts, grouped so that many
keys of one kind make one message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# What an alert can be about: defined with the sources file's [[notify]] and [alerts]
# tables, which are checked against it at load (hookd.sources sits below hookd.notify).
from hookd.sources.notify import ALERT_KINDS

__all__ = ["ALERT_KINDS", "AlertItem", "Message", "Severity", "What"]


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ("info", "warning", "critical").index(self.value)


class What(StrEnum):
    OPENED = "opened"
    RESOLVED = "resolved"
    REMINDER = "reminder"  # still open after the channel's quiet time
    TEST = "test"  # `hookd notify test NAME`


@dataclass(frozen=True, slots=True)
class AlertItem:
    """One alert as a message shows it."""

    id: str
    kind: str
    key: str  # what it is about: "stripe", "stripe/billing-api", ...
    source: str | None
    severity: Severity
    summary: str  # one line, plain words, no payload and no secret
    link: str  # the admin page with the evidence (absolute when HOOKD_PUBLIC_URL is set)
    first_seen: datetime
    last_seen: datetime
    count: int  # evaluations that found the condition true since it opened


@dataclass(frozen=True, slots=True)
class Message:
    """One notification to one channel. ``id`` is stable across retries and processes
    (a webhook's ``webhook-id``, an email's Message-ID): a receiver can deduplicate."""

    id: str
    what: What
    kind: str
    items: tuple[AlertItem, ...]

    @property
    def severity(self) -> Severity:
        return max((item.severity for item in self.items), key=lambda s: s.rank)

    @property
    def title(self) -> str:
        n = len(self.items)
        subject = self.items[0].key if n == 1 else f"{n} alerts"
        return f"hookd {self.what.value}: {self.kind} ({subject})"
