"""How the admin pages are rendered: the Jinja environment and its filters, which
write a time as UTC with how long ago (or from now) it is and a duration in its two
largest units; and the pages' own words: the flash message a redirect names by its
code, a refused filter."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jinja2
from starlette.datastructures import QueryParams

TEMPLATES = Path(__file__).parent / "templates" / "admin"

# Flash messages are codes in the redirect's query string, looked up here: the
# page never repeats text it was given.
DONE = {
    "replayed": "Replayed: the event is pending again.",
    "replayed_many": "Replayed {count} dead event(s).",
    "reconcile_started": "Reconciliation run started.",
    "enabled": "Reconciliation enabled again.",
    "disabled": "Reconciliation disabled: no run starts until it is enabled again.",
    "logged_out": "Logged out.",
    "operation_cancelled": "Cancel asked: the operation stops at its next batch.",
    "paused": "Paused: events are stored and acknowledged, not processed, until resumed.",
    "resumed": "Resumed: what waited is processed in the order it came.",
    "alert_acknowledged": "Acknowledged: no more reminders; it resolves when its condition clears.",
    "alert_resolved": "Resolved: the channels that heard of it are told.",
}
ERRORS = {
    "in_progress": "Not replayed: the event is being processed right now.",
    "nothing_dead": "Nothing to replay: no dead events.",
    "not_configured": "This source has no [sources.reconcile] table.",
    "done": "Not cancelled: the operation had already ended.",
    "bad_reason": "Not disabled: the reason must be one line of at most 500 characters.",
    "bad_pause_reason": "Not paused: the reason must be one line of at most 500 characters.",
    "alert_not_open": "Not acknowledged: the alert is no longer open.",
    "alert_resolved": "Not resolved: the alert is resolved already.",
}
# A refused filter in this UI's words where the API's would mean nothing here.
BAD_FILTER = {
    "cursor": "That page link is not one this page made.",
    "text": "Filters must not contain NUL.",
    "attempts": "Attempts must be a whole number from 1 to 10000.",
}


def _parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _span(seconds: float) -> str:
    seconds = int(abs(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def fmt_time(value: str | float | None) -> str:
    """A UTC time (ISO string or unix seconds) with how long ago / from now it is."""
    if value is None or value == "":
        return "—"
    at = datetime.fromtimestamp(value, UTC) if isinstance(value, int | float) else _parse_iso(value)
    if at is None:
        return "—"
    delta = (datetime.now(UTC) - at).total_seconds()
    relative = f"{_span(delta)} ago" if delta >= 0 else f"in {_span(delta)}"
    return f"{at.strftime('%Y-%m-%d %H:%M:%S')} UTC ({relative})"


def fmt_duration(value: float | None) -> str:
    return "—" if value is None else _span(value)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters["time"] = fmt_time
    env.filters["duration"] = fmt_duration
    return env


def flash_message(query: QueryParams) -> dict[str, str] | None:
    """The message the redirect's ``done`` or ``error`` code names, if it is one of ours."""
    count = query.get("count", "")
    if query.get("done") in DONE:
        text = DONE[query["done"]].format(count=count if count.isdigit() else "some")
        return {"kind": "ok", "text": text}
    if query.get("error") in ERRORS:
        return {"kind": "bad", "text": ERRORS[query["error"]]}
    return None
