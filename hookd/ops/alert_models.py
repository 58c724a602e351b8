"""The alert resources hookd.ops answers with (``hookd.ops.alerts``), beside
``hookd.ops.models`` and in its style: one pydantic model per resource, extra keys
forbidden, a docstring that is the schema's description."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from hookd.ops.models import Resource, Ulid


class Alert(Resource):
    """A condition that needs a person, per kind and key: open, then acknowledged, then
    resolved (by hand, or by itself when the condition clears)."""

    id: Ulid
    kind: str = Field(description="What is wrong: dead, breaker_open, coverage_hole, ...")
    key: str = Field(description="What it is about: a source, or source/destination.")
    source: str | None
    severity: Literal["info", "warning", "critical"]
    status: Literal["open", "acknowledged", "resolved"]
    summary: str = Field(description="One line in plain words: what and what to do.")
    link: str = Field(description="The admin page that shows the evidence.")
    value: float = Field(description="The condition's size when last evaluated.")
    count: int = Field(ge=1, description="Evaluations that found it since it opened.")
    first_seen: datetime
    last_seen: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    resolved_at: datetime | None
    resolved_by: str | None


class AlertList(Resource):
    """Alerts, newest first."""

    alerts: list[Alert]


class ChannelState(Resource):
    """A ``[[notify]]`` channel and what it was asked to send: waiting (a retry, a group
    held, the rate limit), sent, failed for good, and the last failure's reason."""

    name: str
    kind: str
    pending: int = Field(ge=0)
    sent: int = Field(ge=0)
    failed: int = Field(ge=0)
    last_error: str | None
