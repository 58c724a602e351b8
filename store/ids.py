"""Event ids: 26-character ULIDs, so that ids sort by time of receipt."""

from __future__ import annotations

import os
import socket
import time
import uuid

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _encode((ms << 80) | int.from_bytes(os.urandom(10), "big"))


def is_id(value: str) -> bool:
    return len(value) == 26 and all(c in _ALPHABET for c in value)


def worker_id() -> str:
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def id_floor(now_ms: int) -> str:
    """The smallest id minted at ``now_ms``: every id minted before sorts below it."""
    return _encode(max(0, now_ms) << 80)


def id_time_ms(value: str) -> int | None:
    """When an id was minted, in unix milliseconds (its first 10 characters); None
    for a string that is not an id."""
    if not is_id(value):
        return None
    ms = 0
    for c in value[:10]:
        ms = (ms << 5) | _ALPHABET.index(c)
    return ms


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
