"""What a handler receives: ``Event``, and its stable idempotency key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """What a handler sees of a stored event."""

    id: str
    source: str
    provider: str
    type: str | None
    dedupe_key: str
    origin: str
    received_at: datetime
    headers: Mapping[str, str]
    body: bytes = field(repr=False)
    idempotency_key: str = ""
    # The provider's own time of the event, where its payload or headers carry one
    # (docs/providers.md says which, per provider); None otherwise.
    occurred_at: datetime | None = None
    # [sources.order]: the object the event is about (None when the source has no
    # ordering or the event names none), and with fetch = true the object as the
    # provider's API shows it when the handlers run (JSON, as decoded).
    object_key: str | None = None
    object: Any = field(default=None, repr=False)

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Event], Awaitable[None]]


def idempotency_key(event_id: str, handler: str) -> str:
    """Stable per (event, handler): the same on every attempt, replay and worker."""
    digest = hashlib.sha256(f"{event_id}\x00{handler}".encode()).hexdigest()[:32]
    return f"hookd_{digest}"
