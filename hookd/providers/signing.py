"""Sample events signed the way their provider signs: for ``hookd send-test``, the
chaos scenarios and load generators. Verification never uses this module.

Each provider declares its own signer and sample (``Provider.sample_event``); this
picks the provider by name and the time.
"""

from __future__ import annotations

import time

from hookd.providers import PROVIDERS


def sample_event(
    provider: str, secret: str, seq: int, now: int | None = None
) -> tuple[dict[str, str], bytes]:
    """A realistic, correctly signed sample event: (headers, body)."""
    declared = PROVIDERS.get(provider)
    if declared is None:
        raise ValueError(f"unknown provider {provider!r}")
    return declared.sample_event(secret, seq, int(time.time()) if now is None else now)
