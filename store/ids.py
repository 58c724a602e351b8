"""Event ids: 26-character ULIDs, so that ids sort by time of receipt."""

from __future__ import annotations

import os
import socket
import time
import uuid

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _encode_parts(ms, int.from_bytes(os.urandom(10), "big"))


def new_ids(n: int, now_ms: int | None = None) -> list[str]:
    """``n`` ids minted together, as ``new_id`` mints each: one read of the system's
    randomness for all of them instead of one system call per id."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = os.urandom(10 * n)
    return [
        _encode_parts(ms, int.from_bytes(rand[i : i + 10], "big")) for i in range(0, 10 * n, 10)
    ]


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


# Every 10-bit group as its two characters: 13 lookups per id instead of 26 shifts
# and appends (an id is minted for every event the receiver stores).
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_RANDOM_MASK = (1 << 80) - 1


def _encode(value: int) -> str:
    """``value`` (below 2**130) as 26 Crockford base32 characters, most significant first."""
    return _encode_parts(value >> 80, value & _RANDOM_MASK)


def _encode_parts(ms: int, rand: int) -> str:
    """A ULID's 48-bit time (10 characters) and 80 random bits (16), each shifted as a
    small int: cheaper than the shifts of one 128-bit int."""
    p = _PAIRS
    return "".join(
        [
            p[(ms >> 40) & 1023],
            p[(ms >> 30) & 1023],
            p[(ms >> 20) & 1023],
            p[(ms >> 10) & 1023],
            p[ms & 1023],
            p[(rand >> 70) & 1023],
            p[(rand >> 60) & 1023],
            p[(rand >> 50) & 1023],
            p[(rand >> 40) & 1023],
            p[(rand >> 30) & 1023],
            p[(rand >> 20) & 1023],
            p[(rand >> 10) & 1023],
            p[rand & 1023],
        ]
    )
