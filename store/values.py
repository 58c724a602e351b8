"""What an event row may hold: every text hookd takes from a request, checked before it
joins a batch.

A value the database cannot store fails the statement it is in, and a batch is one
statement: one delivery whose ``action`` holds a NUL byte or 300 characters would
fail the acknowledgements of every delivery committed with it. So each text field of
a ``NewEvent`` is checked here, per field, before the receiver enqueues it (and
before reconciliation stores a repair), and either refused on its own or stored in a
safe form:

- ``dedupe_key`` (the provider's event or delivery id): **refused** (``Unstorable``,
  HTTP 400 ``unstorable_value``) when empty, longer than its column, or holding
  control characters or unpaired surrogates. It is the event's identity for dedupe
  and reconciliation: any rewrite would merge two events or split one, and no
  provider sends such an id, so only a broken or forged sender is refused.
- ``type`` and ``verified_with`` (labels: what the event is, which key verified it):
  **stored in a safe form**: each control character or unpaired surrogate becomes
  U+FFFD and an over-long value is cut to its column with a final "…". The event is
  authentic (its signature checked) and its body is kept byte for byte: losing a
  genuine delivery over a label would be worse than a mangled label, and a mangled
  type matches no handler's subscription, as the real one would not either.
- ``object_key`` and ``object_version`` are already bounded where they are read
  (``hookd.ordering``: printable, at most the column; finite).
- ``headers`` come from the HTTP parser, which refuses control characters in them.

PostgreSQL refuses NUL in text and over-long ``varchar``; SQLite stores both, so the
same rules apply on both databases, and the same event is stored the same way.
"""

from __future__ import annotations

import dataclasses
import re

from hookd.errors import HookdError
from store.intake.events import NewEvent

# The events table's columns (store.models.Event).
MAX_KEY_CHARS = 255
MAX_TYPE_CHARS = 255
MAX_VERIFIED_WITH_CHARS = 128

# C0 and C1 controls, DEL, and UTF-16 surrogates (a JSON "\ud800" escape decodes to a
# lone one, which no database encoding can hold).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
REPLACEMENT = "\ufffd"
ELLIPSIS = "\u2026"


class Unstorable(HookdError):
    """A value of an authentic request that no row can hold (HTTP 400)."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__("unstorable_value", f"{field} {detail}")
        self.field = field


def safe_text(value: str, limit: int) -> str:
    """``value`` with control characters and lone surrogates as U+FFFD, cut to
    ``limit`` characters (the last one "…" when cut)."""
    if _UNSAFE.search(value) is not None:
        value = _UNSAFE.sub(REPLACEMENT, value)
    if len(value) > limit:
        value = value[: limit - 1] + ELLIPSIS
    return value


def checked_key(value: str) -> str:
    """The dedupe key as it is, or ``Unstorable`` (see the module)."""
    if not value:
        raise Unstorable("dedupe_key", "is empty")
    if len(value) > MAX_KEY_CHARS:
        raise Unstorable("dedupe_key", f"is longer than {MAX_KEY_CHARS} characters")
    if _UNSAFE.search(value) is not None:
        raise Unstorable("dedupe_key", "holds control characters")
    return value


def storable(event: NewEvent) -> NewEvent:
    """``event`` as a row can hold it: the key checked, the labels in a safe form.
    Costs three regular-expression scans when nothing needs changing."""
    checked_key(event.dedupe_key)
    kind = event.type
    safe_kind = None if kind is None else safe_text(kind, MAX_TYPE_CHARS)
    verified = safe_text(event.verified_with, MAX_VERIFIED_WITH_CHARS)
    if safe_kind is kind and verified is event.verified_with:
        return event
    return dataclasses.replace(event, type=safe_kind, verified_with=verified)
