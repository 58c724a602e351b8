"""A handler tried on a stored event, as processing would run it, recording nothing.

``hookd try`` is for the developer of a handler: it builds the ``Event`` the handler
would get (the same idempotency key, so an effect the handler applies once per key is
not applied again when the event is processed for real), runs the handler under the
same time limit, and reports what it returned or raised. No ledger row, no status,
no attempt: the event's row is only read.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from hookd import logs
from hookd.errors import PermanentError
from hookd.event import Event, Handler, idempotency_key
from processing.attempt import event_of
from store.rows import EventRow


@dataclass(frozen=True, slots=True)
class Trial:
    """What one run of the handler did: returned ``value`` or raised ``error``."""

    event_id: str
    seconds: float
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    traceback: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out

    @property
    def permanent(self) -> bool:
        return isinstance(self.error, PermanentError)


async def try_handler(
    handler: Handler, name: str, row: EventRow, body: bytes, timeout_s: float
) -> Trial:
    """Run ``handler`` (configured as ``name``) on the event of ``row``, whose opened
    body is ``body``, within ``timeout_s``."""
    event = replace(event_of(row, body), idempotency_key=idempotency_key(row.id, name))
    started = time.perf_counter()
    deadline = asyncio.timeout(timeout_s)
    # Its own log records carry the event's ids, as in processing (no attempt: a try is none).
    context = logs.event_context(event_id=row.id, source=row.source, type=event.type, handler=name)
    try:
        async with deadline:
            with context:
                # A handler is declared to return None; whatever it returns is shown.
                value = await cast(Callable[[Event], Awaitable[object]], handler)(event)
    except Exception as exc:  # the developer's own code: whatever it raised is the answer
        elapsed = time.perf_counter() - started
        if deadline.expired():
            return Trial(row.id, elapsed, timed_out=True)
        shown = "".join(traceback.format_exception(exc))
        return Trial(row.id, elapsed, error=exc, traceback=shown)
    return Trial(row.id, time.perf_counter() - started, value=value)
