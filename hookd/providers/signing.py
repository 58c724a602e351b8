"""Sample events signed the way their provider signs: for ``hookd send-test``, the
chaos scenarios and load generators. Verification never uses this module.

Each provider declares its own signer and sample (``Provider.sample_event``); this
picks the provider by name and the time.
"""

from __future__ import annotations

import json
import time

from hookd.providers import PROVIDERS
from hookd.providers.base import Provider


def sample_event(
    provider: str, secret: str, seq: int, now: int | None = None
) -> tuple[dict[str, str], bytes]:
    """A realistic, correctly signed sample event: (headers, body)."""
    declared = PROVIDERS.get(provider)
    if declared is None:
        raise ValueError(f"unknown provider {provider!r}")
    return declared.sample_event(secret, seq, int(time.time()) if now is None else now)


def chosen_event(
    provider: Provider,
    secret: str,
    seq: int,
    now: int,
    *,
    event_type: str | None = None,
    body: bytes | None = None,
) -> tuple[dict[str, str], bytes]:
    """The ``seq``-th sample, or ``body``, of type ``event_type`` when given, signed as
    ``provider`` signs it (``hookd send-test --type/--body``). ``ValueError`` says, in
    one line, what cannot be done."""
    if event_type is None and body is None:
        return provider.sample_event(secret, seq, now)
    signer = provider.body_signer
    if signer is None:
        raise ValueError(
            f"{provider.name}: only its built-in sample can be sent (no --type or --body "
            "for this provider yet)"
        )
    if body is None:
        _, body = provider.sample_event(secret, seq, now)
        if event_type is not None and signer.type_path:
            body = _with_type(body, signer.type_path, event_type)
    elif event_type is not None and signer.type_path:
        where = ".".join(signer.type_path)
        if _type_in(body, signer.type_path) != event_type:
            raise ValueError(
                f"{provider.name} takes the event type from the body's {where!r}: set it "
                "there in the --body file, or leave out --type"
            )
    return signer.sign(secret, body, event_type, now), body


def _with_type(body: bytes, path: tuple[str, ...], event_type: str) -> bytes:
    payload = json.loads(body)
    inner = payload
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = event_type
    return json.dumps(payload).encode()


def _type_in(body: bytes, path: tuple[str, ...]) -> object:
    try:
        found: object = json.loads(body)
    except ValueError:
        return None
    for key in path:
        if not isinstance(found, dict):
            return None
        found = found.get(key)
    return found
