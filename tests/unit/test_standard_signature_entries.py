"""Standard Webhooks: an entry of ``webhook-signature`` that is no signature is passed
over when another entry verifies, as the specification's libraries do (they compare
each entry with the expected signature and go on to the next); hookd did the same for
Stripe, Paddle and PagerDuty already. Alone, such an entry is still
``malformed_signature`` (tests/unit/test_tampering.py), and it never verifies.
"""

from __future__ import annotations

import base64
import time

import pytest
import standardwebhooks.webhooks
from svix.webhooks import Webhook as SvixWebhook

from hookd.errors import SignatureError
from tests.unit.webhook_requests import (
    NOW,
    OTHER_SECRETS,
    SECRETS,
    V1A_PUBLIC,
    V1A_SIGNING,
    signed_request,
    verify,
)

BODY = b'{"type": "invoice.paid", "data": {"n": 1}}'
GENUINE = signed_request("standard", BODY)["webhook-signature"][0]
RAW = base64.b64decode(GENUINE.split(",", 1)[1])
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def non_canonical(encoded: str) -> str:
    """``encoded`` with an unused low bit of its last character set: the same bytes."""
    data = encoded.rstrip("=")
    other = data[:-1] + ALPHABET[ALPHABET.index(data[-1]) ^ 1] + encoded[len(data) :]
    assert other != encoded and base64.b64decode(other) == base64.b64decode(encoded)
    return other


# Entries that are no v1 (or v1a) signature, each in a way of its own.
JUNK = {
    "not-base64": "v1,!!!!",
    "base64-url-alphabet": "v1," + base64.urlsafe_b64encode(b"\xfb" * 32).decode(),
    "bad-padding": "v1,abc",
    "non-canonical": "v1," + non_canonical(GENUINE.split(",", 1)[1]),
    "short": "v1," + base64.b64encode(RAW[:16]).decode(),
    "long": "v1," + base64.b64encode(RAW + b"\0").decode(),
    "empty": "v1,",
    "v1a-not-base64": "v1a,%%%%",
    "v1a-short": "v1a," + base64.b64encode(b"\1" * 32).decode(),
    "unknown-version": "v9,%%%%",
    "no-version": "junk",
}


def header_with(
    entries: list[str], *, svix: bool = False, timestamp: int = NOW
) -> dict[str, list[str]]:
    headers = signed_request("standard", BODY, timestamp=timestamp)
    name = "svix-signature" if svix else "webhook-signature"
    if svix:
        headers = {k.replace("webhook-", "svix-", 1): v for k, v in headers.items()}
    headers[name] = [" ".join(entries)]
    return headers


@pytest.mark.parametrize("junk", JUNK.values(), ids=JUNK.keys())
@pytest.mark.parametrize("valid_first", [True, False], ids=["valid-junk", "junk-valid"])
@pytest.mark.parametrize("svix", [False, True], ids=["webhook", "svix"])
def test_an_undecodable_entry_beside_a_valid_one_verifies(
    junk: str, valid_first: bool, svix: bool
) -> None:
    entries = [GENUINE, junk] if valid_first else [junk, GENUINE]
    headers = header_with(entries, svix=svix)
    verified = verify("standard", headers, BODY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("standard-v1", 0, NOW)


@pytest.mark.parametrize("junk", JUNK.values(), ids=JUNK.keys())
def test_an_undecodable_entry_beside_a_valid_v1a_one_verifies(junk: str) -> None:
    v1a = signed_request("standard", BODY, secret=V1A_SIGNING)["webhook-signature"][0]
    headers = signed_request("standard", BODY, secret=V1A_SIGNING)
    headers["webhook-signature"] = [f"{junk} {v1a}"]
    assert verify("standard", headers, BODY, V1A_PUBLIC).scheme == "standard-v1a"


@pytest.mark.parametrize("junk", JUNK.values(), ids=JUNK.keys())
def test_the_entry_alone_is_still_refused(junk: str) -> None:
    with pytest.raises(SignatureError) as info:
        verify("standard", header_with([junk]), BODY)
    expected = "missing_signature" if junk.startswith("v9,") else "malformed_signature"
    assert info.value.reason == expected


def test_junk_never_verifies_nor_makes_a_wrong_signature_pass() -> None:
    wrong = signed_request("standard", BODY, secret=OTHER_SECRETS["standard"])
    wrong_entry = wrong["webhook-signature"][0]
    headers = header_with([wrong_entry, *JUNK.values()][:16])
    with pytest.raises(SignatureError) as info:
        verify("standard", headers, BODY)
    assert info.value.reason == "bad_signature"


@pytest.mark.parametrize("junk", ["v1,!!!!", "v1,AAAA", "v9,%%%%"])
def test_the_reference_libraries_agree(junk: str) -> None:
    """standardwebhooks' and Svix's verifiers pass over these entries too (they check
    the timestamp against the clock: the request is signed now)."""
    now = int(time.time())
    genuine = signed_request("standard", BODY, timestamp=now)["webhook-signature"][0]
    signed = header_with([junk, genuine], timestamp=now)
    headers = {name: values[0] for name, values in signed.items()}
    standardwebhooks.webhooks.Webhook(SECRETS["standard"]).verify(BODY, headers)
    svix_headers = {name.replace("webhook-", "svix-", 1): v for name, v in headers.items()}
    SvixWebhook(SECRETS["standard"]).verify(BODY, svix_headers)
    assert verify("standard", signed, BODY, now=now).scheme == "standard-v1"
