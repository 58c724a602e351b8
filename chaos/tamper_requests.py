"""The tampered requests of ``chaos.tamper``: each starts as a genuine one (signed by
``tests.support.signing``, by hand from the provider's documented scheme, at the current
time) and is then tampered with in one way, its category; a seeded random generator
picks the details (which bit, which header, how far off the clock)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from chaos.harness import SECRETS
from tests.support import signing

PROVIDERS = ("github", "stripe", "slack", "standard")
TIMED = ("stripe", "slack", "standard")
TOLERANCE_S = 300  # the sources' default tolerance_s
SIGNATURE_HEADER = signing.SIGNATURE_HEADER
TIMESTAMP_HEADER = signing.TIMESTAMP_HEADER
# Headers a request of each provider cannot do without (besides the body).
REQUIRED = {
    "github": ["x-hub-signature-256"],
    "stripe": ["stripe-signature"],
    "slack": ["x-slack-signature", "x-slack-request-timestamp"],
    "standard": ["webhook-signature", "webhook-timestamp", "webhook-id"],
}
# Secrets that are not configured: a request signed with one is a forgery.
WRONG_SECRETS = {
    "github": "gh-attacker-secret",
    "stripe": "whsec_attacker_stripe",
    "slack": "slack-attacker-secret",
    "standard": "whsec_" + base64.b64encode(b"attacker-standard-secret-32bytes").decode(),
}
# A Standard Webhooks v1a (ed25519) signing key; the source has only a whsec_ secret.
V1A_SIGNING = "whsk_" + base64.b64encode(hashlib.sha256(b"hookd-tamper-v1a").digest()).decode()
# What h11 (and HTTP/1.1) lets through as a header value: visible bytes, inner spaces/tabs.
SENDABLE = re.compile(rb"([\x21-\x7e\x80-\xff]+([ \t]+[\x21-\x7e\x80-\xff]+)*)?")
MALFORMED_TIMESTAMPS = [
    "1e9",
    "-5",
    "+{now}",
    "0x{hex}",
    "{now}.5",
    "{now}0000",  # too far ahead and 14 digits
    "0000{now}",  # 14 digits: over the 12-digit limit
    "now",
    "{now}s",
    "1_{now}",
]

Headers = list[tuple[str, bytes]]


@dataclass
class Request:
    provider: str  # the source (named after its provider) it is sent to
    category: str
    headers: Headers
    body: bytes


@dataclass
class Genuine:
    """A correctly signed request and what it was made of."""

    provider: str
    body: bytes
    ts: str
    msg_id: str
    headers: Headers

    def copy(self) -> Headers:
        return list(self.headers)


def signature_value(provider: str, secret: str, body: bytes, ts: str, msg_id: str) -> str:
    """The signature header value ``provider`` sends (``secret`` "v1a": ed25519)."""
    key = V1A_SIGNING if secret == "v1a" else secret
    return signing.signature_value(provider, key, body, ts, msg_id)


def body_for(provider: str, seq: int) -> bytes:
    """A payload the provider's envelope accepts, unique per ``seq``."""
    payload: dict[str, Any]
    if provider == "github":
        payload = {"action": "opened", "issue": {"number": seq}}
    elif provider == "stripe":
        payload = {"id": f"evt_tamper_{seq}", "type": "charge.succeeded", "created": seq}
    elif provider == "slack":
        payload = {
            "type": "event_callback",
            "team_id": "T0TAMPER",
            "event_id": f"EvTAMPER{seq}",
            "event": {"type": "reaction_added", "reaction": "tada"},
        }
    else:
        payload = {"type": "invoice.paid", "data": {"invoice": seq}}
    return json.dumps(payload).encode()


def genuine(
    provider: str,
    seq: int,
    *,
    secret: str | None = None,
    ts: int | str | None = None,
    body: bytes | None = None,
) -> Genuine:
    ts = str(int(time.time()) if ts is None else ts)
    body = body_for(provider, seq) if body is None else body
    msg_id = f"msg_tamper_{seq}"
    secret = SECRETS[provider] if secret is None else secret
    value = signature_value(provider, secret, body, ts, msg_id)
    headers: Headers = [
        ("content-type", b"application/json"),
        (SIGNATURE_HEADER[provider], value.encode()),
    ]
    if provider == "github":
        headers += [
            ("x-github-event", b"issues"),
            ("x-github-delivery", f"tamper-{seq}".encode()),
        ]
    elif provider == "slack":
        headers.append((TIMESTAMP_HEADER["slack"], ts.encode()))
    elif provider == "standard":
        headers += [(TIMESTAMP_HEADER["standard"], ts.encode()), ("webhook-id", msg_id.encode())]
    return Genuine(provider, body, ts, msg_id, headers)


def get(headers: Headers, name: str) -> bytes:
    return next(value for key, value in headers if key == name)


def replace(headers: Headers, name: str, value: bytes) -> Headers:
    return [(key, value if key == name else old) for key, old in headers]


def drop(headers: Headers, name: str) -> Headers:
    return [(key, value) for key, value in headers if key != name]


def sendable(value: bytes) -> bool:
    return SENDABLE.fullmatch(value) is not None


def flip_one_bit(rng: random.Random, value: bytes) -> bytes | None:
    """``value`` with one bit flipped and still sendable; None if no try fits. A flip may
    turn a hex digit's case or an unused base64 bit: both decode to the same signature
    bytes, and both must still be refused (hookd accepts only the canonical spelling)."""
    for _ in range(64):
        bit = rng.randrange(8 * len(value))
        index, mask = bit // 8, 1 << (bit % 8)
        flipped = bytearray(value)
        flipped[index] ^= mask
        out = bytes(flipped)
        if sendable(out):
            return out
    return None


# --- the categories ------------------------------------------------------------------
# Each builds one tampered request from a genuine one, or returns None where the category
# does not apply to the provider (then the next category is used).

Build = Callable[[random.Random, str, int], Request | None]


def body_bit_flip(rng: random.Random, provider: str, seq: int) -> Request | None:
    g = genuine(provider, seq)
    bit = rng.randrange(8 * len(g.body))
    body = bytearray(g.body)
    body[bit // 8] ^= 1 << (bit % 8)
    return Request(provider, "body_bit_flip", g.copy(), bytes(body))


def signature_bit_flip(rng: random.Random, provider: str, seq: int) -> Request | None:
    g = genuine(provider, seq)
    name = SIGNATURE_HEADER[provider]
    value = get(g.headers, name)
    flipped = flip_one_bit(rng, value)
    if flipped is None:
        return None
    return Request(provider, "signature_bit_flip", replace(g.headers, name, flipped), g.body)


def signed_header_bit_flip(rng: random.Random, provider: str, seq: int) -> Request | None:
    """A bit of what is signed besides the body: the timestamp, Standard's webhook-id."""
    if provider == "github":
        return None
    g = genuine(provider, seq)
    if provider == "stripe":
        value = get(g.headers, "stripe-signature")
        start = value.index(b"t=") + 2
        end = value.index(b",")
        for _ in range(64):
            index = rng.randrange(start, end)
            flipped = bytearray(value)
            flipped[index] ^= 1 << rng.randrange(8)
            if sendable(bytes(flipped)):
                headers = replace(g.headers, "stripe-signature", bytes(flipped))
                return Request(provider, "signed_header_bit_flip", headers, g.body)
        return None
    names = [TIMESTAMP_HEADER[provider]] + (["webhook-id"] if provider == "standard" else [])
    name = rng.choice(names)
    flipped_value = flip_one_bit(rng, get(g.headers, name))
    if flipped_value is None:
        return None
    return Request(
        provider, "signed_header_bit_flip", replace(g.headers, name, flipped_value), g.body
    )


def wrong_secret(rng: random.Random, provider: str, seq: int) -> Request | None:
    g = genuine(provider, seq, secret=WRONG_SECRETS[provider])
    return Request(provider, "wrong_secret", g.copy(), g.body)


def missing_header(rng: random.Random, provider: str, seq: int) -> Request | None:
    g = genuine(provider, seq)
    return Request(
        provider, "missing_header", drop(g.headers, rng.choice(REQUIRED[provider])), g.body
    )


def empty_header(rng: random.Random, provider: str, seq: int) -> Request | None:
    g = genuine(provider, seq)
    headers = replace(g.headers, rng.choice(REQUIRED[provider]), b"")
    return Request(provider, "empty_header", headers, g.body)


def doubled_header(rng: random.Random, provider: str, seq: int) -> Request | None:
    """A required header sent twice: the same value, or the genuine one plus another
    genuine-looking one (a stale timestamp, another signature)."""
    g = genuine(provider, seq)
    name = rng.choice(REQUIRED[provider])
    value = get(g.headers, name)
    if rng.random() < 0.5:
        other = value
    else:
        other = get(genuine(provider, seq + 1, ts=int(time.time()) - 3600).headers, name)
    headers = g.copy()
    at = rng.randrange(len(headers) + 1)
    headers.insert(at, (name, other))
    return Request(provider, "doubled_header", headers, g.body)


def truncated_header(rng: random.Random, provider: str, seq: int) -> Request | None:
    """The signature (or, for timestamped schemes, sometimes another signed header) with
    characters cut from its end."""
    g = genuine(provider, seq)
    name = SIGNATURE_HEADER[provider]
    if provider in ("slack", "standard") and rng.random() < 0.25:
        name = rng.choice([n for n in REQUIRED[provider] if n != name])
    value = get(g.headers, name)
    for _ in range(16):
        cut = value[: len(value) - rng.randint(1, min(len(value), 60))]
        if sendable(cut) and cut:
            return Request(provider, "truncated_header", replace(g.headers, name, cut), g.body)
    return None


def other_provider(rng: random.Random, provider: str, seq: int) -> Request | None:
    """A genuine request of another provider, with its own headers, sent to this source; or
    this request with the other provider's signature value under this header name."""
    other = rng.choice([p for p in PROVIDERS if p != provider])
    foreign = genuine(other, seq)
    if rng.random() < 0.5:
        return Request(provider, "other_provider", foreign.copy(), foreign.body)
    g = genuine(provider, seq, body=foreign.body)
    value = get(foreign.headers, SIGNATURE_HEADER[other])
    headers = replace(g.headers, SIGNATURE_HEADER[provider], value)
    return Request(provider, "other_provider", headers, g.body)


def wrong_scheme(rng: random.Random, provider: str, seq: int) -> Request | None:
    """A genuine signature under a scheme the source does not accept. Standard Webhooks:
    a v1a (ed25519) signature only, where the source has only a whsec_ (v1) secret."""
    g = genuine(provider, seq)
    secret = SECRETS[provider]
    if provider == "standard":
        v1a = genuine(provider, seq, secret="v1a", ts=g.ts, body=g.body)
        return Request(provider, "wrong_scheme", v1a.copy(), g.body)
    if provider == "github":  # the legacy SHA-1 header only, or sha1= in the SHA-256 header
        sha1 = "sha1=" + hmac.new(secret.encode(), g.body, hashlib.sha1).hexdigest()
        if rng.random() < 0.5:
            headers = [*drop(g.headers, "x-hub-signature-256"), ("x-hub-signature", sha1.encode())]
        else:
            headers = replace(g.headers, "x-hub-signature-256", sha1.encode())
        return Request(provider, "wrong_scheme", headers, g.body)
    if provider == "stripe":  # a v0 entry (test-mode scheme) and no v1
        v0 = signing.hex_hmac(secret, f"{g.ts}.".encode() + g.body)
        headers = replace(g.headers, "stripe-signature", f"t={g.ts},v0={v0}".encode())
        return Request(provider, "wrong_scheme", headers, g.body)
    # Slack: another version label.
    v1 = "v1=" + signing.hex_hmac(secret, f"v1:{g.ts}:".encode() + g.body)
    return Request(
        provider, "wrong_scheme", replace(g.headers, "x-slack-signature", v1.encode()), g.body
    )


def beyond_window(rng: random.Random) -> int:
    """Seconds past the tolerance: just past it (10-60 s, clear of request latency) or far."""
    return TOLERANCE_S + (rng.randint(10, 60) if rng.random() < 0.5 else rng.randint(61, 7_776_000))


def stale_timestamp(rng: random.Random, provider: str, seq: int) -> Request | None:
    if provider not in TIMED:
        return None
    g = genuine(provider, seq, ts=int(time.time()) - beyond_window(rng))
    return Request(provider, "stale_timestamp", g.copy(), g.body)


def future_timestamp(rng: random.Random, provider: str, seq: int) -> Request | None:
    if provider not in TIMED:
        return None
    g = genuine(provider, seq, ts=int(time.time()) + beyond_window(rng))
    return Request(provider, "future_timestamp", g.copy(), g.body)


def refreshed_timestamp(rng: random.Random, provider: str, seq: int) -> Request | None:
    """A replay: a request signed an hour or more ago, its timestamp set to now."""
    if provider not in TIMED:
        return None
    now = int(time.time())
    old = genuine(provider, seq, ts=now - rng.randint(3600, 30 * 86_400))
    if provider == "stripe":
        value = get(old.headers, "stripe-signature").replace(
            f"t={old.ts},".encode(), f"t={now},".encode()
        )
        headers = replace(old.headers, "stripe-signature", value)
    else:
        headers = replace(old.headers, TIMESTAMP_HEADER[provider], str(now).encode())
    return Request(provider, "refreshed_timestamp", headers, old.body)


def malformed_timestamp(rng: random.Random, provider: str, seq: int) -> Request | None:
    """Correctly signed over a timestamp that is not 1-12 ASCII digits."""
    if provider not in TIMED:
        return None
    now = int(time.time())
    raw = rng.choice(MALFORMED_TIMESTAMPS).format(now=now, hex=f"{now:x}")
    g = genuine(provider, seq, ts=raw)
    return Request(provider, "malformed_timestamp", g.copy(), g.body)


def replayed_signature(rng: random.Random, provider: str, seq: int) -> Request | None:
    """The signed headers of another genuine request, with this body."""
    g = genuine(provider, seq)
    donor = genuine(provider, seq + rng.randint(1, 1_000_000))
    return Request(provider, "replayed_signature", donor.copy(), g.body)


JUNK = b"!#$%&*+-.^_|~=,:;/ 0123456789abcdefABCDEFghijkvxyz"


def fake_entry(rng: random.Random, provider: str) -> bytes:
    """A signature entry of the right shape over nothing: random bytes."""
    fake = rng.randbytes(32)
    if provider == "standard":
        return b"v1," + base64.b64encode(fake)
    prefix = {"github": b"sha256=", "stripe": b"v1=", "slack": b"v0="}[provider]
    return prefix + fake.hex().encode()


def junk_signature(rng: random.Random, provider: str, seq: int) -> Request | None:
    """Random visible bytes, format-shaped digests of random bytes, or too many entries."""
    g = genuine(provider, seq)
    name = SIGNATURE_HEADER[provider]
    kind = rng.randrange(3)
    if kind == 0:
        size = rng.randint(1, 200)
        value = bytes(rng.choice(JUNK) for _ in range(size)).strip()
    elif kind == 1:
        value = fake_entry(rng, provider)
        if provider == "stripe":
            value = f"t={g.ts},".encode() + value
    else:  # entries piled up: 17 or more (hostile), with the genuine one among them
        separator = b"," if provider == "stripe" else b" "
        extra = [fake_entry(rng, provider) for _ in range(rng.randint(16, 40))]
        value = separator.join([get(g.headers, name), *extra])
    if not value or not sendable(value):
        value = b"x"
    return Request(provider, "junk_signature", replace(g.headers, name, value), g.body)


def signed_bad_payload(rng: random.Random, provider: str, seq: int) -> Request | None:
    """Not tampered with but hostile: authentic signatures over bodies the envelope refuses
    (400), e.g. not JSON, not an object, a Stripe id that is not evt_, no delivery id."""
    bodies = [b"", b"not json", b"[]", b'"x"', b"{", b"\xff\xfe{}", b"[" * 50_000]
    if provider == "stripe":
        bodies.append(json.dumps({"id": f"ch_{seq}", "type": "charge.succeeded"}).encode())
    if provider == "slack":
        bodies.append(json.dumps({"type": "block_actions"}).encode())
    body = rng.choice(bodies)
    g = genuine(provider, seq, body=body)
    headers = g.copy()
    if provider == "github" and rng.random() < 0.3:
        g = genuine(provider, seq)
        body, headers = g.body, drop(g.headers, "x-github-delivery")
    return Request(provider, "signed_bad_payload", headers, body)


CATEGORIES: dict[str, Build] = {
    "body_bit_flip": body_bit_flip,
    "signature_bit_flip": signature_bit_flip,
    "signed_header_bit_flip": signed_header_bit_flip,
    "wrong_secret": wrong_secret,
    "missing_header": missing_header,
    "empty_header": empty_header,
    "doubled_header": doubled_header,
    "truncated_header": truncated_header,
    "other_provider": other_provider,
    "wrong_scheme": wrong_scheme,
    "stale_timestamp": stale_timestamp,
    "future_timestamp": future_timestamp,
    "refreshed_timestamp": refreshed_timestamp,
    "malformed_timestamp": malformed_timestamp,
    "replayed_signature": replayed_signature,
    "junk_signature": junk_signature,
    "signed_bad_payload": signed_bad_payload,
}
APPLIES = {
    provider: [
        name
        for name in CATEGORIES
        if not (
            provider == "github"
            and name
            in {
                "signed_header_bit_flip",
                "stale_timestamp",
                "future_timestamp",
                "refreshed_timestamp",
                "malformed_timestamp",
            }
        )
    ]
    for provider in PROVIDERS
}


def requests(per_provider: int, seed: int) -> Iterator[Request]:
    """``per_provider`` tampered requests per provider, interleaved, each category in turn;
    built lazily so that every timestamp is fresh when it is sent."""
    rng = random.Random(seed)
    for i in range(per_provider):
        for provider in PROVIDERS:
            categories = APPLIES[provider]
            seq = i * len(PROVIDERS) + PROVIDERS.index(provider)
            for attempt in range(len(categories)):
                name = categories[(i + attempt) % len(categories)]
                request = CATEGORIES[name](rng, provider, seq)
                if request is not None:
                    yield request
                    break
