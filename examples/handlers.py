"""A small real handler module: what the Quickstart's sources run for each event.

It logs one line per event (never the body) so a new user sees an event go from
the 202 to ``processed``. It logs under its own module's name, as yours will: hookd
prints a handler's records in its own format, with the event's ``event_id``,
``source``, ``type``, ``attempt`` and ``handler`` added. Copy it as the start of your
own module.
"""

from __future__ import annotations

import logging

from hookd import Event, PermanentError

log = logging.getLogger(__name__)


async def log_event(event: Event) -> None:
    """Log that the event arrived; refuse a body that is not JSON for good."""
    try:
        payload = event.json()
    except ValueError as exc:
        # Retrying cannot make a body JSON: dead at once, replayable after a fix.
        raise PermanentError("not_json", "the body is not JSON") from exc
    log.info(
        "example handler saw an event",
        # The event's ids are added by hookd; only what they do not say is passed.
        extra={
            "origin": event.origin,
            "keys": len(payload) if isinstance(payload, dict) else 0,
            "idempotency_key": event.idempotency_key,
        },
    )
