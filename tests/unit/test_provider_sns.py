"""``provider = "sns"``: the string SNS signs, both signature versions, the certificate
URL's pin, the topic a source takes, the message's age, and the three message types.

Messages are signed here as SNS signs them, with an RSA key and a self-signed
certificate made for the test (``tests.support.published_keys``); the integration
tests serve that certificate at the https URL the message names."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from hookd.errors import PayloadError, SignatureError
from hookd.providers import sns
from hookd.providers.base import Identity, Key, Provider, RsaKey, SignedHeaders
from tests.support.published_keys import certificate_pem, private_pem, rsa_key
from tests.support.sources_file import error_of, parse

TOPIC = "arn:aws:sns:eu-west-1:123456789012:orders"
CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0123abcd4567ef890123abcd4567ef89.pem"
SUBSCRIBE_URL = (
    "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription"
    f"&TopicArn={TOPIC}&Token=2336412f37f"
)
PUBLISHED = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
NOW = PUBLISHED.timestamp() + 30
TOLERANCE_S = 300


def notification(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": TOPIC,
        "Subject": "My First Message",
        "Message": "Hello world!",
        "Timestamp": "2023-11-14T22:13:20.123Z",
        "SigningCertURL": CERT_URL,
        "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe",
    }
    message.update(changes)
    return {k: v for k, v in message.items() if v is not None}


def confirmation(kind: str = "SubscriptionConfirmation", **changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "Type": kind,
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37f",
        "TopicArn": TOPIC,
        "Message": f"You have chosen to subscribe to the topic {TOPIC}.",
        "SubscribeURL": SUBSCRIBE_URL,
        "Timestamp": "2023-11-14T22:13:20.123Z",
        "SigningCertURL": CERT_URL,
    }
    message.update(changes)
    return message


def signed(message: dict[str, Any], version: str = "1", key: str = "sns") -> bytes:
    return json.dumps(sns.sign_message(private_pem(key), message, version), indent=2).encode()


def headers_for(kind: str = "Notification") -> dict[str, list[str]]:
    return {"x-amz-sns-message-type": [kind], "content-type": ["text/plain; charset=UTF-8"]}


def keys(cert: str = "sns", topic: str = TOPIC) -> list[Key]:
    return [sns.parse_secret(topic), *sns.parse_certificate(certificate_pem(cert))]


def provider(**settings: Any) -> Provider:
    return sns.bind(sns.SnsSettings(**settings))


def refusal(body: bytes, kind: str = "Notification", now: float = NOW, **kw: Any) -> str:
    with pytest.raises(SignatureError) as info:
        provider().verify_request(headers_for(kind), body, kw.get("keys") or keys(), now, 300)
    return info.value.reason


# --- what is signed -------------------------------------------------------------------


def test_string_to_sign_of_a_notification_follows_the_documented_order() -> None:
    assert sns.string_to_sign(notification()) == (
        b"Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n"
        b"Subject\nMy First Message\nTimestamp\n2023-11-14T22:13:20.123Z\n"
        b"TopicArn\narn:aws:sns:eu-west-1:123456789012:orders\nType\nNotification\n"
    )


def test_string_to_sign_leaves_out_an_absent_subject() -> None:
    text = sns.string_to_sign(notification(Subject=None))
    assert b"Subject" not in text
    assert text.startswith(b"Message\nHello world!\nMessageId\n")


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
def test_string_to_sign_of_a_confirmation_has_its_url_and_token(kind: str) -> None:
    message = confirmation(kind)
    assert (
        sns.string_to_sign(message)
        == (
            f"Message\n{message['Message']}\nMessageId\n{message['MessageId']}\n"
            f"SubscribeURL\n{SUBSCRIBE_URL}\nTimestamp\n2023-11-14T22:13:20.123Z\n"
            f"Token\n2336412f37f\nTopicArn\n{TOPIC}\nType\n{kind}\n"
        ).encode()
    )


@pytest.mark.parametrize(("version", "digest"), [("1", hashes.SHA1()), ("2", hashes.SHA256())])
def test_each_signature_version_is_rsa_pkcs1_with_its_hash(
    version: str, digest: hashes.HashAlgorithm
) -> None:
    """Signed here with the key directly (not ``sign_message``): version 1 is SHA-1,
    version 2 SHA-256, and a message signed with one hash does not pass as the other."""
    message = notification()
    raw = rsa_key("sns").sign(sns.string_to_sign(message), padding.PKCS1v15(), digest)
    body = {**message, "SignatureVersion": version, "Signature": base64.b64encode(raw).decode()}
    verified = provider().verify_request(
        headers_for(), json.dumps(body).encode(), keys(), NOW, TOLERANCE_S
    )
    assert verified.scheme == f"sns-v{version}"
    other = "2" if version == "1" else "1"
    swapped = json.dumps({**body, "SignatureVersion": other}).encode()
    assert refusal(swapped) == "bad_signature"


# --- refusals ---------------------------------------------------------------------------


def test_a_changed_signed_field_is_refused() -> None:
    body = json.loads(signed(notification()))
    for field_name, value in [("Message", "Hello world?"), ("MessageId", "x"), ("Subject", "")]:
        changed = json.dumps({**body, field_name: value}).encode()
        assert refusal(changed) == "bad_signature", field_name


def test_another_certificate_is_refused() -> None:
    assert refusal(signed(notification()), keys=keys(cert="sns-other")) == "bad_signature"


def test_a_topic_the_source_does_not_take_is_refused() -> None:
    other = "arn:aws:sns:eu-west-1:123456789012:payments"
    body = signed(notification(TopicArn=other))
    assert refusal(body) == "bad_signature"
    with pytest.raises(SignatureError) as info:
        sns.locate(SignedHeaders(None, b"Notification", ()), body, keys())
    assert info.value.reason == "bad_signature"
    assert "TopicArn" in info.value.detail


def test_a_message_older_than_max_age_is_refused_and_the_window_is_a_setting() -> None:
    body = signed(notification())
    published = PUBLISHED.timestamp()
    limit = sns.DEFAULT_MAX_AGE_S
    assert provider().verify_request(headers_for(), body, keys(), published + limit, 1)
    assert refusal(body, now=published + limit + 1) == "timestamp_too_old"
    with pytest.raises(SignatureError, match="timestamp_too_old"):
        provider(max_age_s=60).verify_request(headers_for(), body, keys(), published + 61, 300)


def test_a_message_from_the_future_is_refused_past_the_tolerance() -> None:
    body = signed(notification())
    published = PUBLISHED.timestamp()
    assert provider().verify_request(headers_for(), body, keys(), published - 300, 300)
    assert refusal(body, now=published - 301) == "timestamp_in_future"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"SignatureVersion": "3"}, "malformed_signature"),
        ({"SignatureVersion": None}, "missing_signature"),
        ({"Signature": None}, "missing_signature"),
        ({"Signature": "not base64!"}, "malformed_signature"),
        ({"Type": "UnsubscribeConfirmation"}, "conflicting_headers"),
    ],
)
def test_malformed_messages_are_refused_with_their_reason(
    changes: dict[str, Any], reason: str
) -> None:
    body = json.loads(signed(notification()))
    body.update(changes)
    body = {k: v for k, v in body.items() if v is not None}
    assert refusal(json.dumps(body).encode()) == reason


@pytest.mark.parametrize("stamp", ["yesterday", "2023-11-14 22:13:20", "2023-11-14T22:13:20+01:00"])
def test_a_signed_timestamp_sns_does_not_write_is_refused(stamp: str) -> None:
    assert refusal(signed(notification(Timestamp=stamp))) == "malformed_timestamp"


def test_the_message_type_header_must_be_one_sns_sends() -> None:
    with pytest.raises(SignatureError, match="missing_header"):
        sns.check_headers({}, NOW, 300)
    with pytest.raises(SignatureError, match="malformed_signature"):
        sns.check_headers({"x-amz-sns-message-type": ["Notice"]}, NOW, 300)


# --- the certificate URL's pin ------------------------------------------------------------

HEX = "f3ecfb7224c7233fe7bb5f59f96de52f"
GOOD_URLS = [
    CERT_URL,
    # AWS's own examples (the SNS developer guide; its SDKs' validator tests).
    f"https://sns.us-west-2.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-d6d679a1d18e95c2f9ffcf11f4f9e198.pem",
    f"https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://sns.ap-southeast-2.amazonaws.com/SimpleNotificationService-{HEX[:16]}.pem",
]
BAD_URLS = [
    # Another host, scheme, user or port.
    f"http://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-{HEX}.pem",
    f"https://evil.example/sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://sns.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://s3.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://user@sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-{HEX}.pem",
    f"https://SNS.US-EAST-1.AMAZONAWS.COM/SimpleNotificationService-{HEX}.pem",
    # SNS's host, any other path: not where SNS serves its certificates.
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.txt",
    "https://sns.us-east-1.amazonaws.com/cert.pem",
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-rotated-0000000000000000.pem",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX.upper()}.pem",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX * 3}.pem",
    f"https://sns.us-east-1.amazonaws.com/x/SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com//SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem/",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService%2D{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com/simplenotificationservice-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com/?Action=x&f=SimpleNotificationService-{HEX}.pem",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem?x=1",
    f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{HEX}.pem#f",
    "https://sns.us-east-1.amazonaws.com/a b.pem",
    "",
    None,
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_a_certificate_url_on_an_sns_host_is_located(url: str) -> None:
    body = signed(notification(SigningCertURL=url))
    assert sns.locate(SignedHeaders(None, b"Notification", ()), body, keys()) == url


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_certificate_url_off_sns_is_refused_before_any_fetch(url: str | None) -> None:
    """``locate`` is what the receiver asks before it fetches: it refuses here."""
    body = signed(notification(SigningCertURL=url))
    with pytest.raises(SignatureError) as info:
        sns.locate(SignedHeaders(None, b"Notification", ()), body, keys())
    assert info.value.reason == "malformed_signature"
    # And verify refuses it too, whatever key it were given.
    assert refusal(body) == "malformed_signature"


# --- envelopes ----------------------------------------------------------------------------


def envelope_of(body: bytes, kind: str = "Notification", **settings: Any) -> Any:
    p = provider(**settings)
    verified = p.verify_request(headers_for(kind), body, keys(), NOW, TOLERANCE_S)
    return p.envelope(headers_for(kind), body, verified)


def test_a_notification_is_keyed_by_message_id_and_typed_by_topic_and_type() -> None:
    env = envelope_of(signed(notification()))
    assert env.dedupe_key == "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"
    assert env.type == "orders.Notification"
    assert env.occurred_at == PUBLISHED
    assert env.reply is None
    assert env.headers["x-amz-sns-message-type"] == "Notification"


def test_a_subscription_confirmation_is_stored_by_default() -> None:
    env = envelope_of(signed(confirmation()), "SubscriptionConfirmation")
    assert env.reply is None and env.visit is None
    assert env.type == "orders.SubscriptionConfirmation"
    assert env.dedupe_key == "165545c9-2a5c-472c-8df2-7ff2be2b3b1b"


def test_confirm_visits_the_subscribe_url_and_stores_nothing() -> None:
    env = envelope_of(signed(confirmation()), "SubscriptionConfirmation", subscription="confirm")
    assert env.reply is not None and env.reply.status == 200
    assert env.visit == SUBSCRIBE_URL
    assert env.dedupe_key == ""


def test_confirm_refuses_a_subscribe_url_off_sns() -> None:
    body = signed(confirmation(SubscribeURL="https://evil.example/?Action=ConfirmSubscription"))
    with pytest.raises(PayloadError):
        envelope_of(body, "SubscriptionConfirmation", subscription="confirm")


def test_an_unsubscribe_confirmation_is_stored_and_never_visited() -> None:
    kind = "UnsubscribeConfirmation"
    env = envelope_of(signed(confirmation(kind)), kind, subscription="confirm")
    assert env.visit is None and env.reply is None
    assert env.type == "orders.UnsubscribeConfirmation"


# --- secrets, certificates and settings ---------------------------------------------------


@pytest.mark.parametrize(
    "raw", ["orders", "arn:aws:sqs:us-east-1:123456789012:q", "arn:aws:sns:us-east-1:1234:t"]
)
def test_a_secret_must_be_a_topic_arn(raw: str) -> None:
    with pytest.raises(ValueError, match="ARN of an SNS topic"):
        sns.parse_secret(raw)


def test_a_secret_is_an_identity_not_a_key() -> None:
    assert sns.parse_secret(f" {TOPIC} ") == Identity(TOPIC)


def test_a_certificate_must_hold_an_rsa_key() -> None:
    assert isinstance(sns.parse_certificate(certificate_pem("sns"))[0], RsaKey)
    with pytest.raises(ValueError):
        sns.parse_certificate(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")


def test_a_source_of_sns_loads_with_or_without_a_verify_table() -> None:
    base = f'[[sources]]\nname = "aws"\nprovider = "sns"\nsecrets = ["{TOPIC}"]\n'
    assert parse(base).get("aws") is not None
    source = parse(base + '[sources.verify]\nsubscription = "confirm"\nmax_age_s = 600\n')
    assert source.get("aws") is not None


def test_a_bad_sns_setting_is_one_line() -> None:
    base = f'[[sources]]\nname = "aws"\nprovider = "sns"\nsecrets = ["{TOPIC}"]\n'
    message = error_of(base + '[sources.verify]\nsubscription = "yes"\n')
    assert "verify.subscription" in message
    message = error_of(base.replace(TOPIC, "orders"))
    assert "secrets.0" in message and "ARN" in message
