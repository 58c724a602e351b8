"""The requests ``chaos.fuzz``'s webhook targets start from: genuine ones, signed by
``tests.support.signing`` (by hand, from each provider's documented scheme), and what
the fuzzer builds from its bytes: header values shaped like the real ones, and
mutations of a signed request. ``fdp`` is atheris' ``FuzzedDataProvider``."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from tests.support import signing

PROVIDERS = ("github", "stripe", "slack", "standard")
# A request's headers as the fuzzer builds them, and the genuine signatures it carries:
# (signing key, the bytes the signature covers).
Headers = dict[str, list[str]]
Signed = list[tuple[str, bytes]]


NOW = 1_700_000_000
TOLERANCE_S = 300


def _whsec(raw: bytes) -> str:
    return "whsec_" + base64.b64encode(raw).decode()


def _seed_key(seed: int) -> bytes:
    return hashlib.sha256(f"hookd-fuzz-{seed}".encode()).digest()


SECRET = {
    "github": "gh-fuzz-secret",
    "stripe": "whsec_fuzz_stripe_secret",
    "slack": "slack-fuzz-secret",
    "standard": _whsec(_seed_key(1)),
}
OLD_SECRET = {
    "github": "gh-fuzz-old-secret",
    "stripe": "whsec_fuzz_stripe_old",
    "slack": "slack-fuzz-old-secret",
    "standard": _whsec(_seed_key(2)),
}
WRONG_SECRET = {
    "github": "gh-fuzz-wrong",
    "stripe": "whsec_fuzz_stripe_wrong",
    "slack": "slack-fuzz-wrong",
    "standard": _whsec(_seed_key(3)),
}
# Standard Webhooks v1a: an ed25519 signing seed (whsk_) whose public key (whpk_) is
# configured only in some key sets, so that a v1a signature must fail where only whsec_ is.
V1A_SEED = _seed_key(4)
V1A_SIGNING = "whsk_" + base64.b64encode(V1A_SEED).decode()

SIGNATURE_HEADER = signing.SIGNATURE_HEADER
TIMESTAMP_HEADER = signing.TIMESTAMP_HEADER
HEADERS_READ = {
    "github": ["x-hub-signature-256", "x-github-delivery", "x-github-event", "content-type"],
    "stripe": ["stripe-signature", "content-type"],
    "slack": ["x-slack-request-timestamp", "x-slack-signature", "content-type"],
    "standard": ["webhook-id", "webhook-timestamp", "webhook-signature", "content-type"],
}
ALL_HEADERS = sorted({name for names in HEADERS_READ.values() for name in names})
CONTENT_TYPES = [
    "application/json",
    "application/x-www-form-urlencoded",
    "Application/X-WWW-Form-Urlencoded; charset=utf-8",
    "text/plain",
    "",
]


def _v1a_private() -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(V1A_SEED)


def v1a_public_secret() -> str:
    public = _v1a_private().public_key().public_bytes_raw()
    return "whpk_" + base64.b64encode(public).decode()


signed_prefix = signing.signed_prefix


def signature_entry(provider: str, secret: str, message: bytes) -> str:
    """One signature as the provider writes it (without Stripe's ``t=``); ``secret``
    "v1a" signs with the ed25519 seed ``V1A_SEED``."""
    key = V1A_SIGNING if secret == "v1a" else secret
    return signing.signature_entry(provider, key, message)


def sign(
    provider: str, secret: str, body: bytes, ts: str, msg_id: str = "msg_fuzz"
) -> tuple[dict[str, list[str]], bytes]:
    """A real request's headers and the exact bytes its signature covers."""
    message = signed_prefix(provider, ts, msg_id) + body
    entry = signature_entry(provider, secret, message)
    headers: dict[str, list[str]] = {"content-type": ["application/json"]}
    if provider == "github":
        headers[SIGNATURE_HEADER["github"]] = [entry]
        headers["x-github-delivery"] = ["72d3162e-cc78-11e3-81ab-4c9367dc0958"]
        headers["x-github-event"] = ["issues"]
    elif provider == "stripe":
        headers[SIGNATURE_HEADER["stripe"]] = [f"t={ts},{entry}"]
    elif provider == "slack":
        headers[SIGNATURE_HEADER["slack"]] = [entry]
        headers[TIMESTAMP_HEADER["slack"]] = [ts]
    else:
        headers[SIGNATURE_HEADER["standard"]] = [entry]
        headers[TIMESTAMP_HEADER["standard"]] = [ts]
        headers["webhook-id"] = [msg_id]
    return headers, message


def latin1(fdp: Any, max_len: int) -> str:
    """Header values arrive as latin-1 decoded bytes: any of the 256 code points."""
    raw: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, max_len))
    return raw.decode("latin-1")


def fuzz_hex(fdp: Any) -> str:
    if fdp.ConsumeBool():
        raw: bytes = fdp.ConsumeBytes(32)
        return raw.hex()
    return latin1(fdp, 70)


def near_valid_value(fdp: Any, name: str) -> str:
    """A value shaped like the real one, so that checks past the format are reached."""
    ts = str(NOW + offset(fdp))
    if name == "x-hub-signature-256":
        return "sha256=" + fuzz_hex(fdp)
    if name == "stripe-signature":
        entries = [f"t={ts}"] + [f"v1={fuzz_hex(fdp)}" for _ in range(fdp.ConsumeIntInRange(0, 3))]
        if fdp.ConsumeBool():
            entries.append(latin1(fdp, 20))
        return ",".join(entries)
    if name == "x-slack-signature":
        return "v0=" + fuzz_hex(fdp)
    if name in ("x-slack-request-timestamp", "webhook-timestamp"):
        return ts
    if name == "webhook-id":
        return "msg_" + latin1(fdp, 30)
    if name == "webhook-signature":
        entries = []
        for _ in range(fdp.ConsumeIntInRange(0, 4)):
            version = fdp.PickValueInList(["v1", "v1a", "v2", ""])
            size = {"v1": 32, "v1a": 64}.get(version, fdp.ConsumeIntInRange(0, 80))
            raw: bytes = fdp.ConsumeBytes(size)
            entries.append(f"{version},{base64.b64encode(raw).decode()}")
        return " ".join(entries)
    return str(fdp.PickValueInList(CONTENT_TYPES))


def random_headers(fdp: Any, provider: str) -> dict[str, list[str]]:
    """The headers ``provider`` reads (and others) with values that carry no real signature."""
    headers: dict[str, list[str]] = {}
    for name in [*HEADERS_READ[provider], *ALL_HEADERS]:
        how = fdp.ConsumeIntInRange(0, 5)
        if how == 0 or (name not in HEADERS_READ[provider] and how < 4):
            continue
        if how in (1, 2, 4):
            headers[name] = [near_valid_value(fdp, name)]
        elif how == 3:
            headers[name] = [latin1(fdp, 100)]
        else:
            headers[name] = [
                near_valid_value(fdp, name) if fdp.ConsumeBool() else latin1(fdp, 60)
                for _ in range(fdp.ConsumeIntInRange(0, 3))
            ]
    return headers


def offset(fdp: Any) -> int:
    """Seconds from ``NOW`` within twice the tolerance; 0 when the input has run out."""
    raw: int = fdp.ConsumeIntInRange(0, 4 * TOLERANCE_S)
    return raw if raw <= 2 * TOLERANCE_S else 2 * TOLERANCE_S - raw


def flip_bit(fdp: Any, data: bytes) -> bytes:
    if not data:
        return data
    bit = fdp.ConsumeIntInRange(0, 8 * len(data) - 1)
    flipped = bytearray(data)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


def mutate(fdp: Any, provider: str, headers: Headers, body: bytes, genuine: Signed) -> bytes:
    """One change to a signed request; returns the (maybe changed) body. A genuine signature
    by another key over the request as it now is may be added: (key, signed bytes) joins
    ``genuine``."""
    op = fdp.ConsumeIntInRange(0, 11)
    names = sorted(headers)
    name = fdp.PickValueInList(names) if names else SIGNATURE_HEADER[provider]
    values = headers.get(name, [])
    index = fdp.ConsumeIntInRange(0, max(0, len(values) - 1))
    if op == 0:
        return flip_bit(fdp, body)
    if op == 10:
        return _resized(fdp, body)
    if op == 3:
        headers.pop(name, None)
    elif op == 7:
        _add_foreign(fdp, provider, headers, body)
    elif op == 8 and provider != "github":
        _move_timestamp(fdp, provider, headers)
    elif op == 9 and provider in ("stripe", "standard"):
        _add_entry(fdp, provider, headers, body, genuine)
    elif values:
        _change_value(fdp, op, values, index)
    return body


def _resized(fdp: Any, body: bytes) -> bytes:
    """The body appended to or cut."""
    if fdp.ConsumeBool():
        more: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
        return body + more
    return body[: fdp.ConsumeIntInRange(0, max(0, len(body) - 1))]


def _change_value(fdp: Any, op: int, values: list[str], index: int) -> None:
    """One header value changed (or doubled) in place; ``op`` says how."""
    value = values[index]
    if op == 1:
        values[index] = flip_bit(fdp, value.encode("latin-1")).decode("latin-1")
    elif op == 2:  # truncate from the end or the start
        cut = fdp.ConsumeIntInRange(1, max(1, len(value)))
        values[index] = value[:-cut] if fdp.ConsumeBool() else value[cut:]
    elif op == 4:  # doubled, the same or another value
        values.append(value if fdp.ConsumeBool() else latin1(fdp, 40))
    elif op == 5:
        values[index] = fdp.PickValueInList(["", " ", "\t", "  \t "])
    elif op == 6:  # insert arbitrary text
        at = fdp.ConsumeIntInRange(0, len(value))
        values[index] = value[:at] + latin1(fdp, 24) + value[at:]
    else:  # upper-case, or the value replaced outright
        upper = value.encode("latin-1").upper().decode("latin-1")
        values[index] = upper if fdp.ConsumeBool() else latin1(fdp, 80)


def _add_foreign(fdp: Any, provider: str, headers: Headers, body: bytes) -> None:
    """Another provider's genuine headers, for the same body."""
    other = fdp.PickValueInList([p for p in PROVIDERS if p != provider])
    foreign, _ = sign(other, SECRET[other], body, str(NOW))
    for key, vals in foreign.items():
        if key == "content-type":
            continue
        if fdp.ConsumeBool():
            headers[key] = vals
        else:  # the foreign signature value under this provider's header name
            headers[SIGNATURE_HEADER[provider]] = vals


def _move_timestamp(fdp: Any, provider: str, headers: Headers) -> None:
    """The timestamp moved, not re-signed."""
    moved = str(NOW + offset(fdp))
    if provider == "stripe":
        sig = headers.get(SIGNATURE_HEADER["stripe"], [""])
        headers[SIGNATURE_HEADER["stripe"]] = [re.sub(r"t=[^,]*", f"t={moved}", v) for v in sig]
    else:
        headers[TIMESTAMP_HEADER[provider]] = [moved]


def _add_entry(fdp: Any, provider: str, headers: Headers, body: bytes, genuine: Signed) -> None:
    """Another signature entry (Stripe, Standard Webhooks), before or after the others."""
    sig_name = SIGNATURE_HEADER[provider]
    current = headers.get(sig_name, [""])
    kind = fdp.ConsumeIntInRange(0, 2)
    if kind == 0:  # a genuine signature by the old secret over the same message
        ts = headers.get(TIMESTAMP_HEADER.get(provider, ""), [str(NOW)])
        raw_ts = ts[0] if provider == "standard" else _stripe_ts(current)
        msg_id = headers.get("webhook-id", ["msg_fuzz"])[0]
        message = signed_prefix(provider, raw_ts, msg_id) + body
        secret = OLD_SECRET[provider] if fdp.ConsumeBool() else "v1a"
        if provider == "stripe":
            secret = OLD_SECRET[provider]
        entry = signature_entry(provider, secret, message)
        genuine.append((secret, message))
    elif kind == 1:
        entry = near_valid_value(fdp, sig_name).removeprefix(f"t={NOW}")
    else:
        entry = latin1(fdp, 90)
    joiner = "," if provider == "stripe" else " "
    repeat = fdp.ConsumeIntInRange(1, 20)
    headers[sig_name] = [
        joiner.join([v, *[entry] * repeat]) if fdp.ConsumeBool() else joiner.join([entry, v])
        for v in current
    ]


def _stripe_ts(values: list[str]) -> str:
    match = re.search(r"t=([^,]*)", values[0] if values else "")
    return match.group(1) if match else str(NOW)


def key_sets(provider: str) -> list[list[str]]:
    """Configured secrets: the current one, old + current (rotation), and for Standard
    Webhooks a whpk_ key beside the whsec_ one (or alone)."""
    sets = [[SECRET[provider]], [OLD_SECRET[provider], SECRET[provider]]]
    if provider == "standard":
        sets += [[SECRET[provider], v1a_public_secret()], [v1a_public_secret()]]
    return sets
