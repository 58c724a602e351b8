"""The replay window of the timestamped schemes, and secret rotation.

``test_tampering.py`` has the default window's edges (±tolerance accepted, ±(tolerance + 1 s)
refused) and ``test_vectors.py`` the rotation of a configured key list ([old, new]: either
signs, ``key_index`` names it; GitHub and Slack carry one signature, so that is all their
rotation is). Here: one second inside the window is accepted and one second outside refused
for other tolerances too, in both directions; the same through the real receiver with a
clock stopped between two seconds and the tolerance read from the sources file; and headers
carrying two signatures (old and new secret, as Stripe and Standard Webhooks send while a
secret is rolled) verify whichever one of the two secrets is configured.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from hookd.errors import SignatureError
from hookd.providers import PROVIDERS
from hookd.sources import Sources, parse_sources
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.data import engine_of
from tests.unit.webhook_requests import (
    NOW,
    OTHER_SECRETS,
    SECRETS,
    SIGNATURE_HEADER,
    TIMED,
    TIMESTAMP_HEADER,
    TOLERANCE_S,
    hex_hmac,
    keys_for,
    signed_request,
)

BODY = b'{"id": "evt_window", "type": "charge.succeeded"}'
OLD, NEW = "old", "new"
ROTATING = {provider: {OLD: SECRETS[provider], NEW: OTHER_SECRETS[provider]} for provider in TIMED}


def check(
    provider: str,
    headers: dict[str, list[str]],
    body: bytes,
    tolerance_s: int,
    *secrets: str,
    now: int = NOW,
) -> int:
    """The verified timestamp; SignatureError if refused."""
    keys = keys_for(provider, *secrets)
    verified = PROVIDERS[provider].verify_request(headers, body, keys, now, tolerance_s)
    assert verified.timestamp is not None
    return verified.timestamp


def refused(provider: str, headers: dict[str, list[str]], tolerance_s: int, *secrets: str) -> str:
    with pytest.raises(SignatureError) as info:
        check(provider, headers, BODY, tolerance_s, *secrets)
    return info.value.reason


# --- the window ---------------------------------------------------------------------


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize("direction", [-1, 1], ids=["past", "future"])
@pytest.mark.parametrize("tolerance_s", [1, 60, TOLERANCE_S, 86_400])
def test_one_second_inside_the_window_is_accepted(
    provider: str, direction: int, tolerance_s: int
) -> None:
    """Signed (tolerance - 1) s before or after now: accepted, with that timestamp."""
    ts = NOW + direction * (tolerance_s - 1)
    headers = signed_request(provider, BODY, timestamp=ts)
    assert check(provider, headers, BODY, tolerance_s) == ts


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize(
    ("direction", "reason"),
    [(-1, "timestamp_too_old"), (1, "timestamp_in_future")],
    ids=["past", "future"],
)
@pytest.mark.parametrize("tolerance_s", [1, 60, 86_400])
def test_one_second_outside_the_window_is_refused(
    provider: str, direction: int, reason: str, tolerance_s: int
) -> None:
    """Signed (tolerance + 1) s before or after now: refused whatever the tolerance.
    (The default tolerance's case is in test_tampering.py.)"""
    headers = signed_request(provider, BODY, timestamp=NOW + direction * (tolerance_s + 1))
    assert refused(provider, headers, tolerance_s) == reason


@pytest.mark.parametrize("provider", TIMED)
def test_window_moves_with_now(provider: str) -> None:
    """The same request is inside the window at one moment and outside it later: a capture
    can be replayed for at most the tolerance."""
    headers = signed_request(provider, BODY, timestamp=NOW)
    assert check(provider, headers, BODY, TOLERANCE_S, now=NOW + TOLERANCE_S - 1) == NOW
    with pytest.raises(SignatureError) as info:
        check(provider, headers, BODY, TOLERANCE_S, now=NOW + TOLERANCE_S + 1)
    assert info.value.reason == "timestamp_too_old"


# --- the window through the receiver -------------------------------------------------

RECEIVER_TOLERANCE_S = 120
SCHEME = {"stripe": "stripe-v1", "slack": "slack-v0", "standard": "standard-v1"}


def window_sources(tmp_path: Path) -> Sources:
    """One source per timestamped provider, tolerance_s 120, secrets [old, new]."""
    blocks = [
        f'[[sources]]\nname = "{p}"\nprovider = "{p}"\n'
        f'secrets = ["{ROTATING[p][OLD]}", "{ROTATING[p][NEW]}"]\n'
        f"tolerance_s = {RECEIVER_TOLERANCE_S}\n"
        for p in TIMED
    ]
    path = tmp_path / "hookd.toml"
    path.write_text("\n".join(blocks))
    return parse_sources(path.read_text(), path, env={})


def flat(headers: dict[str, list[str]]) -> dict[str, str]:
    return {name: values[0] for name, values in headers.items()}


def unique_body(provider: str, n: int) -> bytes:
    if provider == "stripe":
        return json.dumps({"id": f"evt_window_{n}", "type": "charge.succeeded"}).encode()
    if provider == "slack":
        event = {"type": "reaction_added", "reaction": "tada"}
        return json.dumps({"type": "event_callback", "event_id": f"Ev{n}", "event": event}).encode()
    return json.dumps({"type": "invoice.paid", "n": n}).encode()


@pytest.mark.anyio
@pytest.mark.parametrize("provider", TIMED)
async def test_receiver_window_edges_with_a_clock_between_seconds(
    provider: str, tmp_path: Path, sqlite_url: str
) -> None:
    """Through the receiver, its clock stopped half a second past NOW, tolerance_s from the
    sources file: ±(tolerance - 1) s → 202, ±(tolerance + 1) s → 401 with the reason; either
    rotated secret signs, and the stored event names the key that verified it."""
    sources = window_sources(tmp_path)
    tol = RECEIVER_TOLERANCE_S
    cases = [
        (-(tol - 1), OLD, 202, None),
        (tol - 1, NEW, 202, None),
        (-(tol + 1), OLD, 401, "timestamp_too_old"),
        (tol + 1, NEW, 401, "timestamp_in_future"),
    ]
    answers = []
    async with running_app(sources, sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        for n, (offset, which, _, _) in enumerate(cases):
            body = unique_body(provider, n)
            secret = ROTATING[provider][which]
            headers = signed_request(
                provider, body, secret=secret, timestamp=NOW + offset, msg_id=f"msg_window_{n}"
            )
            answer = await client.post(f"/hooks/{provider}", content=body, headers=flat(headers))
            answers.append(answer)
    for answer, (offset, _, status, reason) in zip(answers, cases, strict=True):
        assert answer.status_code == status, (offset, answer.text)
        if reason is not None:
            assert answer.json()["error"] == reason
    async with engine_of(sqlite_url) as engine, engine.connect() as conn:
        stored = (await conn.execute(sa.select(EVENTS.c.verified_with))).scalars().all()
    scheme = SCHEME[provider]
    assert sorted(stored) == [
        f"{scheme};key=0;t={NOW - tol + 1}",
        f"{scheme};key=1;t={NOW + tol - 1}",
    ]


# --- two signatures in one header ------------------------------------------------------


def stripe_header(ts: int, *secrets: str) -> dict[str, list[str]]:
    entries = [f"v1={hex_hmac(secret, f'{ts}.'.encode() + BODY)}" for secret in secrets]
    return {"stripe-signature": [",".join([f"t={ts}", *entries])]}


def standard_v1(secret: str, ts: int, msg_id: str = "msg_rotation") -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + BODY, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def standard_header(ts: int, *secrets: str) -> dict[str, list[str]]:
    return {
        "webhook-id": ["msg_rotation"],
        "webhook-timestamp": [str(ts)],
        "webhook-signature": [" ".join(standard_v1(secret, ts) for secret in secrets)],
    }


TWO_SIGNATURES = {"stripe": stripe_header, "standard": standard_header}
CONFIGURED = {
    "old only": (OLD,),
    "new only": (NEW,),
    "old and new": (OLD, NEW),
    "new and old": (NEW, OLD),
}


@pytest.mark.parametrize("provider", sorted(TWO_SIGNATURES))
@pytest.mark.parametrize("order", [(OLD, NEW), (NEW, OLD)], ids=["old-first", "new-first"])
@pytest.mark.parametrize("configured", list(CONFIGURED), ids=list(CONFIGURED))
def test_header_with_old_and_new_signatures_verifies_under_either_secret(
    provider: str, order: tuple[str, str], configured: str
) -> None:
    """While a secret is rolled the header carries a signature by each; with only the old,
    only the new, or both configured, in any order, the request verifies, and key_index is
    the first configured secret that one of the entries matches."""
    secrets = ROTATING[provider]
    headers = TWO_SIGNATURES[provider](NOW, *(secrets[which] for which in order))
    configured_secrets = [secrets[which] for which in CONFIGURED[configured]]
    keys = keys_for(provider, *configured_secrets)
    verified = PROVIDERS[provider].verify_request(headers, BODY, keys, NOW, TOLERANCE_S)
    assert verified.key_index == 0
    assert verified.scheme == f"{provider}-v1"


@pytest.mark.parametrize("provider", sorted(TWO_SIGNATURES))
def test_header_with_two_signatures_by_unconfigured_secrets_is_bad_signature(
    provider: str,
) -> None:
    """Two entries prove nothing when neither secret is configured."""
    wrong = {
        "stripe": ("whsec_not_configured_1", "whsec_not_configured_2"),
        "standard": (
            "whsec_" + base64.b64encode(b"not-configured-standard-secret-1").decode(),
            "whsec_" + base64.b64encode(b"not-configured-standard-secret-2").decode(),
        ),
    }[provider]
    headers = TWO_SIGNATURES[provider](NOW, *wrong)
    assert refused(provider, headers, TOLERANCE_S, *ROTATING[provider].values()) == (
        "bad_signature"
    )


@pytest.mark.parametrize("provider", sorted(TWO_SIGNATURES))
@pytest.mark.parametrize("which", [OLD, NEW])
@pytest.mark.parametrize(
    ("offset", "reason"),
    [
        (-(TOLERANCE_S - 1), None),
        (TOLERANCE_S - 1, None),
        (-(TOLERANCE_S + 1), "timestamp_too_old"),
        (TOLERANCE_S + 1, "timestamp_in_future"),
    ],
    ids=["-tol+1", "+tol-1", "-tol-1", "+tol+1"],
)
def test_two_signature_header_obeys_the_window_under_either_secret(
    provider: str, which: str, offset: int, reason: str | None
) -> None:
    """A genuine signature by the configured secret does not widen the window."""
    secrets = ROTATING[provider]
    headers = TWO_SIGNATURES[provider](NOW + offset, secrets[OLD], secrets[NEW])
    if reason is None:
        assert check(provider, headers, BODY, TOLERANCE_S, secrets[which]) == NOW + offset
    else:
        assert refused(provider, headers, TOLERANCE_S, secrets[which]) == reason


@pytest.mark.parametrize("provider", TIMED)
def test_rotated_secret_cannot_refresh_an_old_signature(provider: str) -> None:
    """A capture signed by the old secret an hour ago, its timestamp set to now, fails under
    both secrets: the timestamp is signed."""
    secrets = ROTATING[provider]
    headers = signed_request(provider, BODY, secret=secrets[OLD], timestamp=NOW - 3600)
    if provider == "stripe":
        value = headers["stripe-signature"][0].replace(f"t={NOW - 3600}", f"t={NOW}")
        headers[SIGNATURE_HEADER["stripe"]] = [value]
    else:
        headers[TIMESTAMP_HEADER[provider]] = [str(NOW)]
    assert refused(provider, headers, TOLERANCE_S, secrets[OLD], secrets[NEW]) == "bad_signature"
