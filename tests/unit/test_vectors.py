"""Published examples and signatures made by the providers' own SDKs verify.

Also the other way round: what each provider module's signer produces passes each SDK's
verifier, and the envelope of each provider's typical payload is right.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest
import standardwebhooks.webhooks
import stripe
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from slack_sdk.signature import Clock, SignatureVerifier

from hookd.errors import SignatureError
from hookd.providers.base import Envelope
from hookd.providers.github import github_headers
from hookd.providers.slack import slack_headers
from hookd.providers.standard import standard_headers
from hookd.providers.stripe import stripe_headers
from tests.unit.webhook_requests import (
    DELIVERY,
    MSG_ID,
    NOW,
    OTHER_SECRETS,
    PROVIDER_NAMES,
    SECRETS,
    V1A_PUBLIC,
    V1A_SIGNING,
    accept,
    header_map,
    hex_hmac,
    signed_request,
    verify,
)


class FixedClock(Clock):
    """Slack's verifier clock, stopped at ``NOW``."""

    def now(self) -> float:
        return float(NOW)


def to_json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


# --- GitHub ------------------------------------------------------------------

GITHUB_DOC_SECRET = "It's a Secret to Everybody"
GITHUB_DOC_BODY = b"Hello, World!"
GITHUB_DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_documented_vector_is_reproduced_by_signing() -> None:
    """GitHub's docs example: our signer gives exactly the published header."""
    headers = github_headers(GITHUB_DOC_SECRET, GITHUB_DOC_BODY, "ping", DELIVERY)
    assert headers["X-Hub-Signature-256"] == GITHUB_DOC_SIGNATURE


def test_github_documented_vector_verifies() -> None:
    """The published signature of "Hello, World!" verifies with the published secret."""
    headers = {"x-hub-signature-256": [GITHUB_DOC_SIGNATURE]}
    verified = verify("github", headers, GITHUB_DOC_BODY, GITHUB_DOC_SECRET)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("github-sha256", 0, None)


# --- Stripe ------------------------------------------------------------------

STRIPE_EVENT = {
    "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",
    "object": "event",
    "type": "payment_intent.succeeded",
    "created": NOW - 5,
    "data": {"object": {"id": "pi_3NG8Du2eZvKYlo2C0", "amount": 2000}},
}


def test_stripe_sdk_signature_header_verifies() -> None:
    """A header from stripe.WebhookSignature.generate_signature_header verifies."""
    body = to_json(STRIPE_EVENT)
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), SECRETS["stripe"], timestamp=NOW
    )
    verified = verify("stripe", {"stripe-signature": [header]}, body)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("stripe-v1", 0, NOW)


def test_stripe_signing_passes_stripe_sdk_verifier() -> None:
    """stripe_headers output is accepted by stripe.WebhookSignature.verify_header."""
    body = to_json(STRIPE_EVENT)
    header = stripe_headers(SECRETS["stripe"], body, NOW)["Stripe-Signature"]
    # tolerance=None: the SDK then skips its wall-clock check and only checks the HMAC.
    assert stripe.WebhookSignature.verify_header(body, header, SECRETS["stripe"], tolerance=None)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(body + b" ", header, SECRETS["stripe"])


@pytest.mark.parametrize("right_first", [True, False], ids=["right-wrong", "wrong-right"])
def test_stripe_several_v1_entries_verify_if_one_matches(right_first: bool) -> None:
    """While a secret is rolled Stripe sends one v1 per secret; any match verifies."""
    body = to_json(STRIPE_EVENT)
    prefix = f"{NOW}.".encode()
    right = hex_hmac(SECRETS["stripe"], prefix + body)
    wrong = hex_hmac(OTHER_SECRETS["stripe"], prefix + body)
    first, second = (right, wrong) if right_first else (wrong, right)
    header = f"t={NOW},v1={first},v1={second},v0={'0' * 64}"
    assert stripe.WebhookSignature.verify_header(body, header, SECRETS["stripe"])
    verified = verify("stripe", {"stripe-signature": [header]}, body)
    assert verified.scheme == "stripe-v1"


@pytest.mark.parametrize("junk", ["zzz", "", "0" * 63, "G" * 64], ids=["zzz", "empty", "63", "G"])
@pytest.mark.parametrize("valid_first", [True, False], ids=["valid-junk", "junk-valid"])
def test_stripe_unparseable_v1_entry_beside_a_valid_one_verifies(
    junk: str, valid_first: bool
) -> None:
    """Stripe's SDK compares each v1 entry with the expected hex and passes over one that
    is no digest; hookd agrees. Alone, the same entry is still malformed_signature, and the
    upper-case spelling of the valid digest is still refused (test_tampering.py)."""
    body = to_json(STRIPE_EVENT)
    right = hex_hmac(SECRETS["stripe"], f"{NOW}.".encode() + body)
    entries = [f"v1={right}", f"v1={junk}"]
    header = ",".join([f"t={NOW}", *(entries if valid_first else entries[::-1])])
    assert stripe.WebhookSignature.verify_header(body, header, SECRETS["stripe"], tolerance=None)
    assert verify("stripe", {"stripe-signature": [header]}, body).scheme == "stripe-v1"
    alone = {"stripe-signature": [f"t={NOW},v1={junk}"]}
    with pytest.raises(SignatureError) as info:
        verify("stripe", alone, body)
    assert info.value.reason == "malformed_signature"
    upper = {"stripe-signature": [f"t={NOW},v1={right.upper()},v1={junk}"]}
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(
            body, upper["stripe-signature"][0], SECRETS["stripe"], tolerance=None
        )
    with pytest.raises(SignatureError) as info:
        verify("stripe", upper, body)
    assert info.value.reason == "malformed_signature"


# --- Slack -------------------------------------------------------------------

SLACK_BODY = to_json(
    {
        "token": "unused",
        "team_id": "T0001",
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": "Ev0PV52K25",
        "event_time": NOW - 3,
        "event": {"type": "reaction_added", "user": "U0001", "reaction": "tada"},
    }
)


def test_slack_sdk_signature_verifies() -> None:
    """slack_sdk's SignatureVerifier.generate_signature output verifies."""
    signature = SignatureVerifier(SECRETS["slack"]).generate_signature(
        timestamp=str(NOW), body=SLACK_BODY
    )
    assert signature is not None
    headers = {"x-slack-signature": [signature], "x-slack-request-timestamp": [str(NOW)]}
    verified = verify("slack", headers, SLACK_BODY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("slack-v0", 0, NOW)


def test_slack_signing_passes_slack_sdk_verifier() -> None:
    """slack_headers output passes SignatureVerifier.is_valid."""
    headers = slack_headers(SECRETS["slack"], SLACK_BODY, NOW)
    verifier = SignatureVerifier(SECRETS["slack"], clock=FixedClock())
    timestamp, signature = headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
    assert verifier.is_valid(SLACK_BODY, timestamp, signature)
    assert not verifier.is_valid(SLACK_BODY + b" ", timestamp, signature)


# --- Standard Webhooks ---------------------------------------------------------

STANDARD_BODY = to_json({"type": "invoice.paid", "timestamp": NOW, "data": {"invoice": 7}})


def test_standardwebhooks_sdk_signature_verifies() -> None:
    """standardwebhooks' Webhook.sign output verifies with a whsec_ secret."""
    signature = standardwebhooks.webhooks.Webhook(SECRETS["standard"]).sign(
        MSG_ID, datetime.fromtimestamp(NOW, UTC), STANDARD_BODY.decode()
    )
    headers = {
        "webhook-id": [MSG_ID],
        "webhook-timestamp": [str(NOW)],
        "webhook-signature": [signature],
    }
    verified = verify("standard", headers, STANDARD_BODY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("standard-v1", 0, NOW)


def test_standard_signing_passes_standardwebhooks_verifier() -> None:
    """standard_headers output passes standardwebhooks' Webhook.verify."""
    # Webhook.verify reads the wall clock and has no way to pass another.
    now = int(time.time())
    headers = standard_headers(SECRETS["standard"], STANDARD_BODY, MSG_ID, now)
    webhook = standardwebhooks.webhooks.Webhook(SECRETS["standard"])
    assert webhook.verify(STANDARD_BODY, headers) == json.loads(STANDARD_BODY)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        webhook.verify(STANDARD_BODY + b" ", headers)


def test_standard_v1a_ed25519_signature_verifies() -> None:
    """A v1a ed25519 signature over "{id}.{ts}." + body verifies with the whpk_ public key."""
    private = Ed25519PrivateKey.generate()
    public = "whpk_" + base64.b64encode(private.public_key().public_bytes_raw()).decode()
    signature = private.sign(f"{MSG_ID}.{NOW}.".encode() + STANDARD_BODY)
    headers = {
        "webhook-id": [MSG_ID],
        "webhook-timestamp": [str(NOW)],
        "webhook-signature": ["v1a," + base64.b64encode(signature).decode()],
    }
    verified = verify("standard", headers, STANDARD_BODY, public)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("standard-v1a", 0, NOW)


def test_standard_signing_with_whsk_key_verifies_as_v1a() -> None:
    """standard_headers with a whsk_ seed gives a v1a header our verifier accepts."""
    headers = standard_headers(V1A_SIGNING, STANDARD_BODY, MSG_ID, NOW)
    assert headers["webhook-signature"].startswith("v1a,")
    verified = verify("standard", header_map(headers), STANDARD_BODY, V1A_PUBLIC)
    assert verified.scheme == "standard-v1a"


def test_standard_header_with_v1_and_v1a_entries_verifies_by_either_key() -> None:
    """A header carrying both schemes verifies against a whsec_ or a whpk_ key alone."""
    v1 = standard_headers(SECRETS["standard"], STANDARD_BODY, MSG_ID, NOW)
    v1a = standard_headers(V1A_SIGNING, STANDARD_BODY, MSG_ID, NOW)
    headers = header_map(v1)
    headers["webhook-signature"] = [f"{v1['webhook-signature']} {v1a['webhook-signature']}"]
    assert verify("standard", headers, STANDARD_BODY).scheme == "standard-v1"
    assert verify("standard", headers, STANDARD_BODY, V1A_PUBLIC).scheme == "standard-v1a"


# --- Rotation ------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("signed_by", [0, 1], ids=["old", "new"])
def test_rotation_either_secret_verifies_and_key_index_names_it(
    provider: str, signed_by: int
) -> None:
    """With secrets [old, new] configured, either verifies and key_index says which."""
    secrets = [SECRETS[provider], OTHER_SECRETS[provider]]
    body = b'{"id": "evt_rotation"}'
    headers = signed_request(provider, body, secret=secrets[signed_by])
    assert verify(provider, headers, body, *secrets).key_index == signed_by


def test_rotation_from_v1_to_v1a_key_index_counts_every_key() -> None:
    """key_index is the position among all configured keys, whsec_ and whpk_ alike."""
    body = b"{}"
    configured = (SECRETS["standard"], V1A_PUBLIC)
    v1 = signed_request("standard", body)
    v1a = signed_request("standard", body, secret=V1A_SIGNING)
    assert verify("standard", v1, body, *configured).key_index == 0
    assert verify("standard", v1a, body, *configured).key_index == 1


# --- Envelopes -----------------------------------------------------------------

GITHUB_ISSUE = {"action": "opened", "issue": {"number": 1347}, "repository": {"id": 1296269}}


def test_github_json_and_form_bodies_give_the_same_envelope() -> None:
    """A JSON body and its form-encoded twin share the delivery key and issues.opened type."""
    json_body = to_json(GITHUB_ISSUE)
    form_body = urlencode({"payload": json.dumps(GITHUB_ISSUE)}).encode()
    as_json = accept("github", signed_request("github", json_body), json_body)
    form_headers = signed_request(
        "github", form_body, content_type="application/x-www-form-urlencoded"
    )
    as_form = accept("github", form_headers, form_body)
    assert (as_json.dedupe_key, as_json.type) == (DELIVERY, "issues.opened")
    assert (as_form.dedupe_key, as_form.type) == (DELIVERY, "issues.opened")


def test_github_event_without_action_is_typed_by_event_alone() -> None:
    """A payload with no action (e.g. push) is typed by X-GitHub-Event only."""
    body = to_json({"ref": "refs/heads/main"})
    headers = signed_request("github", body)
    headers["x-github-event"] = ["push"]
    assert accept("github", headers, body).type == "push"


def test_stripe_envelope_is_keyed_by_event_id_and_typed_by_type() -> None:
    """Stripe events dedupe on their evt_ id, take `type`, and `created` as occurred_at."""
    body = to_json(STRIPE_EVENT)
    envelope = accept("stripe", signed_request("stripe", body), body)
    assert envelope.dedupe_key == "evt_1NG8Du2eZvKYlo2CUI79vXWy"
    assert envelope.type == "payment_intent.succeeded"
    assert envelope.occurred_at == datetime.fromtimestamp(NOW - 5, UTC)


def test_slack_url_verification_replies_with_the_challenge() -> None:
    """Slack's url_verification handshake is answered with {"challenge": ...}."""
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    body = to_json({"token": "x", "challenge": challenge, "type": "url_verification"})
    envelope = accept("slack", signed_request("slack", body), body)
    assert envelope.reply is not None
    assert json.loads(envelope.reply.body) == {"challenge": challenge}
    assert envelope.type == "url_verification"


def slack_callback(event: dict[str, Any]) -> bytes:
    return to_json(
        {
            "type": "event_callback",
            "team_id": "T061EG9R6",
            "event_id": "Ev08MFMKH6",
            "event_time": NOW,
            "event": event,
        }
    )


def slack_envelope(event: dict[str, Any]) -> Envelope:
    body = slack_callback(event)
    return accept("slack", signed_request("slack", body), body)


MESSAGE = {"type": "message", "channel": "C2147483705", "user": "U2147483697", "text": "hi"}
MESSAGE_KEY = "msg:T061EG9R6:C2147483705:1355517523.000005"


def test_slack_channel_message_is_keyed_by_team_channel_ts() -> None:
    """A plain channel message is keyed msg:{team}:{channel}:{ts}."""
    envelope = slack_envelope({**MESSAGE, "ts": "1355517523.000005"})
    assert (envelope.dedupe_key, envelope.type) == (MESSAGE_KEY, "message")
    assert envelope.occurred_at == datetime.fromtimestamp(NOW, UTC)


def test_slack_bot_message_is_keyed_like_a_message() -> None:
    """A bot_message subtype also appears in history, so it gets the msg: key too."""
    envelope = slack_envelope({**MESSAGE, "subtype": "bot_message", "ts": "1355517523.000005"})
    assert envelope.dedupe_key == MESSAGE_KEY


def test_slack_message_changed_is_keyed_by_event_id() -> None:
    """An edit (message_changed) is an event about a message and keeps its event_id."""
    event = {
        "type": "message",
        "subtype": "message_changed",
        "channel": "C2147483705",
        "ts": "1355517600.000008",
        "message": {"type": "message", "text": "edited", "ts": "1355517523.000005"},
    }
    assert slack_envelope(event).dedupe_key == "Ev08MFMKH6"


def test_slack_non_message_event_is_keyed_by_event_id() -> None:
    """A reaction_added event is keyed by event_id and typed reaction_added."""
    envelope = slack_envelope({"type": "reaction_added", "user": "U2147483697", "reaction": "tada"})
    assert (envelope.dedupe_key, envelope.type) == ("Ev08MFMKH6", "reaction_added")


def test_standard_envelope_is_keyed_by_id_and_typed_by_payload_type() -> None:
    """Standard Webhooks dedupe on webhook-id and take the payload's `type`."""
    headers = header_map(standard_headers(SECRETS["standard"], STANDARD_BODY, MSG_ID, NOW))
    envelope = accept("standard", headers, STANDARD_BODY)
    assert (envelope.dedupe_key, envelope.type) == (MSG_ID, "invoice.paid")
    assert envelope.occurred_at == datetime.fromtimestamp(NOW, UTC)
