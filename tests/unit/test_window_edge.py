"""The replay window's edges on a fractional clock, against the providers' own libraries.

hookd compares the signed timestamp with the clock's fractional seconds, as Stripe's,
Standard Webhooks' and Slack's libraries do: a timestamp exactly ``tolerance`` old is
accepted at that instant (their comparisons are strict) and refused a quarter second
later; flooring the clock would have accepted it for up to a second more. In the future
direction Standard Webhooks and Slack refuse more than ``tolerance`` ahead and accept the
exact edge; Stripe's SDK has no future check, where hookd refuses (see
``hookd.providers.stripe``). ``test_replay_window.py`` has ±(tolerance ∓ 1 s).
"""

from __future__ import annotations

import time
from datetime import datetime, tzinfo
from pathlib import Path

import pytest
import standardwebhooks.webhooks
import stripe
from slack_sdk.signature import Clock, SignatureVerifier

from hookd.errors import SignatureError
from hookd.providers import PROVIDERS
from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.unit.test_replay_window import unique_body
from tests.unit.webhook_requests import (
    NOW,
    SECRETS,
    SIGNATURE_HEADER,
    TIMED,
    TIMESTAMP_HEADER,
    keys_for,
    signed_request,
)

# The libraries' own fixed (Standard Webhooks, Slack) or default (Stripe) tolerance.
TOLERANCE_S = 300
BODY = b'{"id": "evt_edge", "type": "charge.succeeded"}'

# (seconds from the signed timestamp to now, hookd's answer): None is accepted.
EDGES = {
    "past, exact": (TOLERANCE_S, None),
    "past, exact + 0.25 s": (TOLERANCE_S + 0.25, "timestamp_too_old"),
    "past, exact - 0.25 s": (TOLERANCE_S - 0.25, None),
    "future, exact": (-TOLERANCE_S, None),
    "future, exact + 0.25 s": (-TOLERANCE_S - 0.25, "timestamp_in_future"),
    "future, exact - 0.25 s": (-TOLERANCE_S + 0.25, None),
}


def hookd_reason(provider: str, headers: dict[str, list[str]], now: float) -> str | None:
    keys = keys_for(provider)
    try:
        PROVIDERS[provider].verify_request(headers, BODY, keys, now, TOLERANCE_S)
    except SignatureError as exc:
        return exc.reason
    return None


class StoppedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def library_accepts(
    provider: str, headers: dict[str, list[str]], now: float, monkeypatch: pytest.MonkeyPatch
) -> bool | None:
    """The provider's own library, its clock stopped at ``now``; None where it does not
    check (Stripe's SDK and a future timestamp)."""
    flat = {name: values[0] for name, values in headers.items()}
    ts = int(flat.get(TIMESTAMP_HEADER.get(provider, ""), NOW))
    if provider == "slack":
        verifier = SignatureVerifier(SECRETS["slack"], clock=StoppedClock(now))
        return verifier.is_valid(BODY, str(ts), flat[SIGNATURE_HEADER["slack"]])
    if provider == "stripe":
        monkeypatch.setattr(time, "time", lambda: now)
        try:
            stripe.WebhookSignature.verify_header(
                BODY, flat[SIGNATURE_HEADER["stripe"]], SECRETS["stripe"], TOLERANCE_S
            )
        except stripe.SignatureVerificationError:
            return False
        return True

    class Stopped(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Stopped:
            return cls.fromtimestamp(now, tz)

    monkeypatch.setattr(standardwebhooks.webhooks, "datetime", Stopped)
    try:
        standardwebhooks.webhooks.Webhook(SECRETS["standard"]).verify(BODY, flat)
    except standardwebhooks.webhooks.WebhookVerificationError:
        return False
    return True


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize(("age", "reason"), list(EDGES.values()), ids=list(EDGES))
def test_window_edge_on_a_fractional_clock_matches_the_provider_library(
    provider: str, age: float, reason: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signed at NOW, checked at NOW + age: hookd's answer, and the library agrees
    (Stripe's SDK only in the past direction: it has no future check)."""
    headers = signed_request(provider, BODY, timestamp=NOW)
    now = NOW + age
    assert hookd_reason(provider, headers, now) == reason
    expected = library_accepts(provider, headers, now, monkeypatch)
    if provider == "stripe" and age < 0:
        assert expected is True
    else:
        assert expected is (reason is None)


@pytest.mark.parametrize("provider", TIMED)
def test_floored_clock_would_have_accepted_the_stale_edge(provider: str) -> None:
    """The case a floored clock got wrong: tolerance old plus a fraction is refused at
    any fraction, not only from the next whole second."""
    headers = signed_request(provider, BODY, timestamp=NOW - TOLERANCE_S)
    assert hookd_reason(provider, headers, float(NOW)) is None
    for fraction in (0.001, 0.5, 0.999):
        assert hookd_reason(provider, headers, NOW + fraction) == "timestamp_too_old"


@pytest.mark.anyio
@pytest.mark.parametrize("provider", TIMED)
async def test_receiver_refuses_the_stale_edge_a_quarter_second_late(
    provider: str, tmp_path: Path, sqlite_url: str
) -> None:
    """Through the receiver (its clock passed on unfloored): signed exactly tolerance
    before a clock at NOW + 0.25 s → 401 timestamp_too_old; exactly tolerance ahead of it
    → 202, as the libraries answer."""
    path = tmp_path / "hookd.toml"
    path.write_text(
        f'[[sources]]\nname = "{provider}"\nprovider = "{provider}"\n'
        f'secrets = ["{SECRETS[provider]}"]\ntolerance_s = {TOLERANCE_S}\n'
    )
    sources = parse_sources(path.read_text(), path, env={})
    answers = []
    async with running_app(sources, sqlite_url, clock=lambda: NOW + 0.25) as (_, client):
        for n, ts in enumerate((NOW - TOLERANCE_S, NOW + TOLERANCE_S)):
            body = unique_body(provider, n)
            headers = signed_request(provider, body, timestamp=ts, msg_id=f"msg_edge_{n}")
            flat = {name: values[0] for name, values in headers.items()}
            answers.append(await client.post(f"/hooks/{provider}", content=body, headers=flat))
    stale, ahead = answers
    assert stale.status_code == 401, stale.text
    assert stale.json()["error"] == "timestamp_too_old"
    assert ahead.status_code == 202, ahead.text
