"""The tables of alerts and their notifications (migration 0017), beside
``store.models``, which imports this module so that every table is in one metadata."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.models import UTCDateTime

# At most one alert per condition and key that is not resolved (``uq_alerts_live``).
LIVE = "status <> 'resolved'"
# The senders' look for notifications to send.
DUE = "status = 'pending'"


def _utc(nullable: bool = False) -> Any:
    return Field(sa_column=sa.Column(UTCDateTime(), nullable=nullable))


class Alert(SQLModel, table=True):
    """A condition that needs a person, per kind and key (a source, a destination):
    ``open`` → ``acknowledged`` → ``resolved`` (by hand, or when the condition clears).
    A condition found again after its alert was resolved opens a new one."""

    __tablename__ = "alerts"
    __table_args__ = (
        sa.Index(
            "uq_alerts_live",
            "kind",
            "key",
            unique=True,
            postgresql_where=sa.text(LIVE),
            sqlite_where=sa.text(LIVE),
        ),
        sa.Index("ix_alerts_status", "status", "last_seen"),
    )

    id: str = Field(primary_key=True, max_length=26)
    kind: str = Field(max_length=32)  # a hookd.notify.message ALERT_KINDS entry
    key: str = Field(max_length=255)
    source: str | None = Field(default=None, max_length=64)
    severity: str = Field(max_length=16)
    status: str = Field(max_length=16)  # open | acknowledged | resolved
    # One line in plain words, and the admin page with the evidence.
    summary: str = Field(sa_type=sa.Text)
    link: str = Field(max_length=1024)
    # The condition's size when last evaluated (dead events, consecutive failures, ...).
    value: float = Field(default=0.0)
    # Evaluations that found the condition true since it opened.
    count: int = Field(default=1)
    first_seen: datetime = _utc()
    last_seen: datetime = _utc()
    acknowledged_at: datetime | None = _utc(nullable=True)
    acknowledged_by: str | None = Field(default=None, max_length=128)
    resolved_at: datetime | None = _utc(nullable=True)
    resolved_by: str | None = Field(default=None, max_length=128)
    # {channel: when a message about it was last queued there}: what reminders go by.
    notified: dict[str, str] = Field(
        default_factory=dict, sa_column=sa.Column(sa.JSON(), nullable=False)
    )


class Notification(SQLModel, table=True):
    """A message queued for one channel (the outbox): written in the transaction that
    changed the alerts it is about, sent by whichever process holds its lease, retried
    with back-off, then ``sent`` or ``failed``. Its id is the message's id, so a
    receiver can deduplicate."""

    __tablename__ = "notifications"
    __table_args__ = (
        sa.Index(
            "ix_notifications_due",
            "next_attempt_at",
            postgresql_where=sa.text(DUE),
            sqlite_where=sa.text(DUE),
        ),
        sa.Index("ix_notifications_channel", "channel", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=26)
    channel: str = Field(max_length=64)
    what: str = Field(max_length=16)  # opened | resolved | reminder | test
    kind: str = Field(max_length=32)
    alert_ids: list[str] = Field(
        default_factory=list, sa_column=sa.Column(sa.JSON(), nullable=False)
    )
    status: str = Field(max_length=16)  # pending | sent | failed
    attempts: int = Field(default=0)
    next_attempt_at: datetime = _utc()
    lease_owner: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = _utc(nullable=True)
    last_error: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = _utc()
    sent_at: datetime | None = _utc(nullable=True)


ALERTS: sa.Table = Alert.__table__  # type: ignore[attr-defined]
NOTIFICATIONS: sa.Table = Notification.__table__  # type: ignore[attr-defined]
