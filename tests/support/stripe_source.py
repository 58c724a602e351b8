"""The one Stripe source of the retention and partition tests: its sources file
(reconciled against an emulator, or not), and a delivery of an event signed now."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.support.constants import STRIPE_SECRET
from tests.support.signing import signed_request

STRIPE_KEY = "sk_test_hookd"


def stripe_source(api_url: str | None = None, handler: bool = True, extra: str = "") -> str:
    reconcile = (
        f'[sources.reconcile]\napi_url = "{api_url}"\nallow_insecure = true\n'
        f'token = "{STRIPE_KEY}"\n'
        "lookback_s = 86400\noverlap_s = 120\n"
        if api_url
        else ""
    )
    chain = 'handlers = ["tests.support.handlers:effect_strict"]\n' if handler else ""
    return (
        f'[[sources]]\nname = "stripe"\nprovider = "stripe"\nsecrets = ["{STRIPE_SECRET}"]\n'
        f"{chain}{reconcile}{extra}"
    )


def webhook(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A Stripe delivery of ``event``, signed by hand (tests.support.signing) now."""
    body = json.dumps({**event, "pending_webhooks": 1}, separators=(",", ":")).encode()
    headers, body = signed_request("stripe", STRIPE_SECRET, body, ts=str(int(time.time())))
    return body, {name: values[0] for name, values in headers.items()}


async def deliver(client: httpx.AsyncClient, event: dict[str, Any]) -> httpx.Response:
    body, headers = webhook(event)
    return await client.post("/hooks/stripe", content=body, headers=headers)
