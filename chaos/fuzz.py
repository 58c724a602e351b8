"""Coverage-guided fuzzing (atheris/libFuzzer) of every verifier, envelope and the config loader.

Each target runs in its own process (``python -c "...fuzz_target_main()" TARGET -runs=N``):
atheris instruments ``ingest`` before importing it (coverage counts edges there only: the
stdlib's TOML parser, pydantic and cryptography are not instrumented, which keeps the config
targets several times faster), then libFuzzer feeds the target ``N`` inputs. A target raises
only what it documents:

- ``verify-PROVIDER``: ``check_headers`` + ``verify`` on headers, body and timestamps built
  from the input, half of them near-valid (a correctly signed request, then mutated: bits
  flipped, headers dropped, doubled, emptied, truncated, another provider's added, timestamps
  moved, signatures by other or old keys added). Only ``SignatureError`` may escape, and a
  request that verifies must carry a genuine signature, by a configured key, over exactly the
  bytes it verified (``prefix + body``), inside the time window; then ``envelope`` may raise
  only ``PayloadError``.
- ``envelope-PROVIDER``: an authentic signature over a fuzzed body (raw bytes, JSON, a real
  payload with one field off, form-encoded, deeply nested) and fuzzed unsigned headers: it
  must verify, and ``envelope`` may raise only ``PayloadError`` or give a usable envelope.
- ``registry``: every other registered provider (the named senders, and ``hmac`` and
  ``token`` under fuzzed ``[sources.verify]`` settings), picked by the input: its own
  sample, signed by the configured or another sender's key, then mutated (a body bit
  flipped, the body replaced, headers dropped, doubled, emptied, truncated or replaced,
  the clock moved). Only ``SignatureError``/``PayloadError`` may escape; a request that
  verifies was signed with the configured key, and over an unchanged body wherever the
  provider's scheme covers the body (``tests.support.provider_matrix`` says where not).
- ``config-toml``: ``parse_sources`` on fuzzed text (raw, and valid configurations with one
  or two keys made odd, dropped or unknown, ``${VAR}`` references to fuzzed environment
  values, deep nesting, byte-level edits) and ``load_sources`` on raw bytes: only
  ``ConfigError``, and loaded sources are usable.
- ``config-env``: ``Settings.from_env`` on fuzzed ``HOOKD_*`` values and ``.env`` files:
  only ``ConfigError``.

Anything else is an uncaught exception: atheris prints it, libFuzzer writes the input as a
``crash-*`` file and the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support import signing

if TYPE_CHECKING:  # imported inside the target process only after instrumentation
    from hookd.providers.base import Envelope, HeaderMap, Key

TITLE = "Fuzzing: verifiers, envelopes and the config loader"
QUICK: dict[str, Any] = {"inputs_per_target": 10_000}
FULL: dict[str, Any] = {"inputs_per_target": 1_000_000}

ROOT = Path(__file__).resolve().parents[1]
PROVIDERS = ("github", "stripe", "slack", "standard")
TARGETS = (
    *(f"verify-{p}" for p in PROVIDERS),
    *(f"envelope-{p}" for p in PROVIDERS),
    "registry",
    "config-toml",
    "config-env",
)
INSTRUMENTED = ["hookd"]

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
SIGNATURE_REASONS = frozenset(
    {
        "missing_header",
        "duplicate_header",
        "empty_header",
        "malformed_id",
        "malformed_signature",
        "missing_signature",
        "malformed_timestamp",
        "timestamp_too_old",
        "timestamp_in_future",
        "bad_signature",
    }
)


# --- signing (tests.support.signing: by hand, from each provider's documented scheme) ---


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


# --- what the fuzzer builds from its bytes ------------------------------------------


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


def mutate(
    fdp: Any,
    provider: str,
    headers: dict[str, list[str]],
    body: bytes,
    genuine: list[tuple[str, bytes]],
) -> bytes:
    """One change to a signed request; returns the (maybe changed) body. A genuine signature
    by another key over the request as it now is may be added: (key, signed bytes) joins
    ``genuine``."""
    op = fdp.ConsumeIntInRange(0, 11)
    names = sorted(headers)
    name = fdp.PickValueInList(names) if names else SIGNATURE_HEADER[provider]
    values = headers.get(name, [])
    index = fdp.ConsumeIntInRange(0, max(0, len(values) - 1))
    value = values[index] if values else ""
    if op == 0:
        body = flip_bit(fdp, body)
    elif op == 1 and values:
        values[index] = flip_bit(fdp, value.encode("latin-1")).decode("latin-1")
    elif op == 2 and values:  # truncate from the end or the start
        cut = fdp.ConsumeIntInRange(1, max(1, len(value)))
        values[index] = value[:-cut] if fdp.ConsumeBool() else value[cut:]
    elif op == 3:
        headers.pop(name, None)
    elif op == 4 and values:  # doubled, the same or another value
        values.append(value if fdp.ConsumeBool() else latin1(fdp, 40))
    elif op == 5 and values:
        values[index] = fdp.PickValueInList(["", " ", "\t", "  \t "])
    elif op == 6 and values:  # insert arbitrary text
        at = fdp.ConsumeIntInRange(0, len(value))
        values[index] = value[:at] + latin1(fdp, 24) + value[at:]
    elif op == 7:  # another provider's genuine headers, for the same body
        other = fdp.PickValueInList([p for p in PROVIDERS if p != provider])
        foreign, _ = sign(other, SECRET[other], body, str(NOW))
        for key, vals in foreign.items():
            if key == "content-type":
                continue
            if fdp.ConsumeBool():
                headers[key] = vals
            else:  # the foreign signature value under this provider's header name
                headers[SIGNATURE_HEADER[provider]] = vals
    elif op == 8 and provider != "github":  # the timestamp moved, not re-signed
        moved = str(NOW + offset(fdp))
        if provider == "stripe":
            sig = headers.get(SIGNATURE_HEADER["stripe"], [""])
            headers[SIGNATURE_HEADER["stripe"]] = [re.sub(r"t=[^,]*", f"t={moved}", v) for v in sig]
        else:
            headers[TIMESTAMP_HEADER[provider]] = [moved]
    elif op == 9 and provider in ("stripe", "standard"):  # another signature entry
        sig_name = SIGNATURE_HEADER[provider]
        current = headers.get(sig_name, [""])
        ts = headers.get(TIMESTAMP_HEADER.get(provider, ""), [str(NOW)])
        kind = fdp.ConsumeIntInRange(0, 2)
        if kind == 0:  # a genuine signature by the old secret over the same message
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
    elif op == 10:  # body appended to or cut
        if fdp.ConsumeBool():
            body += fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
        else:
            body = body[: fdp.ConsumeIntInRange(0, max(0, len(body) - 1))]
    elif values:  # upper-case, or the value replaced outright
        upper = value.encode("latin-1").upper().decode("latin-1")
        values[index] = upper if fdp.ConsumeBool() else latin1(fdp, 80)
    return body


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


def check_envelope(env: Envelope) -> None:
    from datetime import datetime

    from hookd.providers.base import MAX_DEDUPE_KEY_CHARS, Envelope

    assert isinstance(env, Envelope)
    assert isinstance(env.dedupe_key, str)
    assert len(env.dedupe_key) <= MAX_DEDUPE_KEY_CHARS
    assert env.dedupe_key or env.reply is not None, "stored event without a dedupe key"
    assert env.dedupe_key.isprintable()
    assert env.type is None or isinstance(env.type, str)
    assert env.occurred_at is None or (
        isinstance(env.occurred_at, datetime) and env.occurred_at.tzinfo is not None
    )
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.headers.items())
    for answer in (env.reply, env.ack):
        if answer is not None:
            assert isinstance(answer.body, bytes)
            assert 200 <= answer.status < 300


def verify_target(provider: str) -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import PayloadError, SignatureError
    from hookd.providers import PROVIDERS as ADAPTERS

    adapter = ADAPTERS[provider]
    configured = key_sets(provider)
    parsed: list[list[Key]] = [[adapter.parse_secret(s) for s in keys] for keys in configured]
    signing_choices = [SECRET[provider], OLD_SECRET[provider], WRONG_SECRET[provider]]
    if provider == "standard":
        signing_choices.append("v1a")

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        which = fdp.ConsumeIntInRange(0, len(configured) - 1)
        body: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300))
        # Every genuine signature the request carries: (signing key, the bytes it covers).
        genuine: list[tuple[str, bytes]] = []
        headers: HeaderMap
        if fdp.ConsumeBool():
            headers = random_headers(fdp, provider)
        else:
            secret = fdp.PickValueInList(signing_choices)
            ts = str(NOW + offset(fdp))
            msg_id = "msg_" + str(fdp.ConsumeIntInRange(0, 2**32))
            request, message = sign(provider, secret, body, ts, msg_id)
            genuine.append((secret, message))
            for _ in range(fdp.ConsumeIntInRange(0, 3)):
                body = mutate(fdp, provider, request, body, genuine)
            headers = request
        try:
            signed = adapter.check_headers(headers, NOW, TOLERANCE_S)
            verified = adapter.verify(signed, body, parsed[which])
        except SignatureError as exc:
            if exc.reason not in SIGNATURE_REASONS:
                raise AssertionError(f"undocumented reason {exc.reason!r}") from exc
            return
        # Verified: a genuine signature by the configured key it names over exactly these bytes.
        key = configured[which][verified.key_index]
        signer = "v1a" if key.startswith("whpk_") else key
        assert (signer, signed.prefix + body) in genuine, "verified without a genuine signature"
        if verified.timestamp is not None:
            assert abs(verified.timestamp - NOW) <= TOLERANCE_S
        try:
            env = adapter.envelope(headers, body, verified)
        except PayloadError:
            return
        check_envelope(env)

    return one


def fuzzed_settings(fdp: Any, name: str) -> Any:
    """A ``[sources.verify]`` table of a configurable provider, built from the input; None
    for a provider that takes none. Invalid combinations are not fuzzed here (the
    ``config-toml`` target does that): the input picks among valid ones."""
    from hookd.providers.custom_hmac import HmacSettings
    from hookd.providers.shared_token import TokenSettings

    if name not in ("hmac", "token"):
        return None
    table: dict[str, Any] = {
        "dedupe": fdp.PickValueInList(["body_sha256", "json:id", "header:X-Event-Id"]),
    }
    kind = fdp.ConsumeIntInRange(0, 2)
    if kind == 1:
        table["type_json"] = "type"
    elif kind == 2:
        table["type_header"] = "X-Event-Type"
    if fdp.ConsumeBool():
        table["handshake"] = fdp.PickValueInList(["dropbox", "graph"])
    if name == "token":
        table["header"] = fdp.PickValueInList(["X-Gitlab-Token", "Authorization"])
        return TokenSettings.model_validate(table)
    signed = fdp.PickValueInList(["body", "timestamp_body", "method_url_body_timestamp"])
    table |= {
        "header": "X-Signature",
        "prefix": fdp.PickValueInList(["", "sha256=", "v1,"]),
        "algorithm": fdp.PickValueInList(["sha1", "sha256", "sha512"]),
        "encoding": fdp.PickValueInList(["hex", "base64"]),
        "signed": signed,
        "separator": fdp.PickValueInList([".", ":", ""]),
    }
    if signed != "body":
        table["timestamp_header"] = "X-Timestamp"
    if signed == "method_url_body_timestamp":
        table["public_url"] = "https://hooks.example.com/hooks/fuzz"
    return HmacSettings.model_validate(table)


def registry_target() -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import PayloadError, SignatureError
    from hookd.providers import PROVIDERS as ADAPTERS
    from tests.support import provider_matrix as matrix

    names = [name for name in ADAPTERS if name not in PROVIDERS]

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        name = fdp.PickValueInList(names)
        provider = matrix.bound(name, fuzzed_settings(fdp, name))
        good, other = matrix.pairs(name)
        by_good = fdp.ConsumeBool()
        sample_headers, body = provider.sample_event(
            (good if by_good else other).signing, fdp.ConsumeIntInRange(1, 2**20), NOW
        )
        original = body
        headers: dict[str, list[str]] = {k.lower(): [v] for k, v in sample_headers.items()}
        for _ in range(fdp.ConsumeIntInRange(0, 3)):
            op = fdp.ConsumeIntInRange(0, 6)
            header = fdp.PickValueInList(sorted(headers)) if headers else "x-any"
            if op == 0 and body:
                body = flip_bit(fdp, body)
            elif op == 1:
                body = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300))
            elif op == 2:
                headers.pop(header, None)
            elif op == 3:
                headers[header] = [*headers.get(header, []), latin1(fdp, 80)]
            elif op == 4:
                headers[header] = [latin1(fdp, 120)]
            elif op == 5 and headers.get(header):
                value = headers[header][0]
                headers[header] = [value[: fdp.ConsumeIntInRange(0, len(value))]]
            else:
                headers[header] = [""]
        now = NOW + fdp.ConsumeIntInRange(-2 * TOLERANCE_S, 2 * TOLERANCE_S)
        try:
            verified = provider.verify_request(
                headers, body, matrix.keys(name, good), now, TOLERANCE_S
            )
        except SignatureError as exc:
            if exc.reason not in SIGNATURE_REASONS:
                raise AssertionError(f"{name}: undocumented reason {exc.reason!r}") from exc
            return
        except PayloadError:
            return
        assert by_good, f"{name}: verified a request signed by another sender"
        covered = name not in matrix.BODY_UNSIGNED | matrix.SIGNS_DECODED_FORM
        assert body == original or not covered, f"{name}: verified a changed body"
        try:
            env = provider.envelope(headers, body, verified)
        except PayloadError:
            return
        check_envelope(env)

    return one


# Real payloads; the envelope target corrupts one field of one of them.
TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "github": [
        {"action": "opened", "issue": {"number": 1}},
        {"ref": "refs/heads/main", "commits": []},
    ],
    "stripe": [
        {"id": "evt_1", "type": "charge.succeeded", "created": NOW, "data": {"object": {}}},
    ],
    "slack": [
        {
            "type": "event_callback",
            "team_id": "T1",
            "event_id": "Ev1",
            "event": {
                "type": "message",
                "subtype": "bot_message",
                "channel": "C1",
                "ts": "1700000000.000100",
                "team": "T1",
            },
        },
        {"type": "event_callback", "event_id": "Ev2", "event": {"type": "reaction_added"}},
        {"type": "url_verification", "challenge": "c"},
        {"type": "app_rate_limited", "team_id": "T1", "minute_rate_limited": NOW},
        {"type": "block_actions", "trigger_id": "1.2.ab", "action_ts": "1.2"},
    ],
    "standard": [{"type": "invoice.paid", "data": {"invoice": 1}}],
}
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    1e300,
    float("nan"),
    float("inf"),
    "",
    "\x00",
    "x" * 300,
    "evt_",
    "message",
    [],
    ["x"],
    {},
    {"a": 1},
]


def fuzz_json(fdp: Any, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 7 if depth < 4 else 4)
    if kind == 0:
        return fdp.PickValueInList(ODD_VALUES)
    if kind == 1:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 12))
    if kind == 2:
        return fdp.ConsumeFloat()
    if kind in (3, 4):
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
    if kind == 5:
        return [fuzz_json(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return {
        fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 10)): fuzz_json(fdp, depth + 1)
        for _ in range(fdp.ConsumeIntInRange(0, 4))
    }


def paths(payload: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, value in payload.items():
        found.append((*prefix, name))
        if isinstance(value, dict):
            found.extend(paths(value, (*prefix, name)))
    return found


def fuzz_body(fdp: Any, provider: str) -> bytes:
    from urllib.parse import urlencode

    kind = fdp.ConsumeIntInRange(0, 6)
    if kind == 6:
        raw: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512))
        return raw
    if kind == 5:  # deep nesting, which recursive parsers choke on
        depth = fdp.ConsumeIntInRange(1, 20_000)
        opener = fdp.PickValueInList(["[", '{"a":', '{"event":'])
        return str(opener * depth).encode()
    if kind == 4:
        document = fuzz_json(fdp)
    else:  # a real payload with one field, at any depth, removed or changed
        payload = json.loads(json.dumps(fdp.PickValueInList(TEMPLATES[provider])))
        for _ in range(fdp.ConsumeIntInRange(0, 2)):
            *parents, name = fdp.PickValueInList(paths(payload) or [("x",)])
            target = payload
            for parent in parents:
                target = target.get(parent, {}) if isinstance(target, dict) else {}
            if isinstance(target, dict):
                if fdp.ConsumeIntInRange(0, 3) == 0:
                    target.pop(name, None)
                else:
                    target[name] = fuzz_json(fdp)
        document = payload
    text = json.dumps(document)
    if fdp.ConsumeIntInRange(0, 5) == 5:  # form-encoded
        fields: list[tuple[str, str]] = [("payload", text)]
        for _ in range(fdp.ConsumeIntInRange(0, 2)):
            key = fdp.PickValueInList(["payload", "command", "trigger_id", "x"])
            fields.append((key, fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 20))))
        return urlencode(fields).encode()
    return text.encode()


def envelope_target(provider: str) -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import PayloadError, SignatureError
    from hookd.providers import PROVIDERS as ADAPTERS

    adapter = ADAPTERS[provider]
    keys = [adapter.parse_secret(SECRET[provider])]

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        content_type = fdp.PickValueInList(CONTENT_TYPES) if fdp.ConsumeBool() else latin1(fdp, 60)
        # The id is signed by Standard Webhooks; HTTP strips a header value's outer whitespace.
        msg_id = latin1(fdp, 40).strip() if fdp.ConsumeBool() else "msg_fuzz"
        body = fuzz_body(fdp, provider)
        headers, _ = sign(provider, SECRET[provider], body, str(NOW), msg_id)
        headers["content-type"] = [content_type]
        for name in ("x-github-delivery", "x-github-event", "x-slack-retry-num", "user-agent"):
            if fdp.ConsumeIntInRange(0, 3) == 3:
                headers[name] = [latin1(fdp, 40) for _ in range(fdp.ConsumeIntInRange(0, 2))]
        try:
            verified = adapter.verify_request(headers, body, keys, NOW, TOLERANCE_S)
        except SignatureError as exc:
            # Only a webhook-id that no real sender may use is refused.
            if provider != "standard" or exc.reason not in ("malformed_id", "empty_header"):
                raise AssertionError(f"an authentic request was refused: {exc.reason}") from exc
            return
        try:
            env = adapter.envelope(headers, body, verified)
        except PayloadError as exc:
            if exc.reason != "malformed_payload":
                raise AssertionError(f"undocumented reason {exc.reason!r}") from exc
            return
        check_envelope(env)

    return one


# --- the config loader ---------------------------------------------------------------


def toml_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("?")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


WHPK = "whpk_" + base64.b64encode(bytes(range(32))).decode()
VALID_SECRETS: dict[str, list[list[str]]] = {
    "github": [["s"], ["old", "new"], ["${SECRET}"], ["a-${SECRET}-b"]],
    "stripe": [["whsec_abc"], ["whsec_old", "whsec_new"], ["${SECRET}"]],
    "slack": [["s"], ["${SECRET}", "x"]],
    "standard": [["whsec_dGVzdA=="], ["whsec_dGVzdA", WHPK], [WHPK], ["${SECRET}"]],
}
VALID_RECONCILE: dict[str, list[dict[str, Any]]] = {
    "github": [
        {"token": "t", "hook": "repos/o/r/hooks/1"},
        {"token": "${TOKEN}", "hook": "orgs/o/hooks/2", "repair": "redeliver"},
        {"hook": "app", "app_id": 1, "private_key": "-----BEGIN KEY-----"},
    ],
    "stripe": [{"token": "t", "every_s": 900, "min_every_s": 60, "max_every_s": 3600}],
    "slack": [{"token": "t", "channels": ["C1"], "requests_per_minute": 20}],
    "standard": [{"token": "t"}],  # standard has no API to reconcile: always refused
}
# Odd values for any key: wrong types, edges, out of range, references, empty.
ODD_TOML: list[Any] = [
    "",
    " ",
    "${MISSING}",
    "${BAD}",
    "${NAME}",
    "$",
    "${",
    "x" * 65,
    "Bad",
    "-a",
    "gitlab",
    "whsec_",
    "whpk_AAAA",
    "whsk_" + "A" * 43 + "=",
    "ftp://x",
    "repos/o/hooks/x",
    "bad",
    "1x:y",
    0,
    -1,
    1,
    2**63 - 1,
    86_401,
    64 * 1024 * 1024 + 1,
    1.5,
    0.0,
    -0.5,
    1e308,
    True,
    False,
    [],
    [""],
    ["s", 1],
    [[]],
    {"x": 1},
]
SOURCE_KEYS = ["name", "provider", "secrets", "tolerance_s", "max_body_bytes", "handlers"]
FORWARD_KEYS = ["url", "secret", "timeout_s"]
RECONCILE_KEYS = [
    "api_url",
    "token",
    "hook",
    "app_id",
    "private_key",
    "repair",
    "channels",
    "requests_per_minute",
    "every_s",
    "min_every_s",
    "max_every_s",
    "lookback_s",
    "overlap_s",
    "disable_after_auth_failures",
]


def valid_source(fdp: Any, index: int) -> dict[str, Any]:
    """A source that loads (Standard Webhooks' reconcile table aside)."""
    provider = fdp.PickValueInList(list(PROVIDERS))
    source: dict[str, Any] = {
        "name": fdp.PickValueInList([f"s{index}", f"{provider}-{index}", "${NAME}"]),
        "provider": provider,
        "secrets": fdp.PickValueInList(VALID_SECRETS[provider]),
    }
    for key, choices in (
        ("tolerance_s", [1, 300, 86_400]),
        ("max_body_bytes", [1, 4096, 64 * 1024 * 1024]),
        ("handlers", [[], ["mod:fn"], ["a.b:c", "d:e"]]),
        ("max_attempts", [1, 8, 100]),
    ):
        if fdp.ConsumeBool():
            source[key] = fdp.PickValueInList(choices)
    if fdp.ConsumeIntInRange(0, 3) == 3:
        source["forward"] = {"url": "https://example.invalid/hook", "secret": "whsec_dGVzdA=="}
    if fdp.ConsumeIntInRange(0, 2) == 2:
        source["reconcile"] = dict(fdp.PickValueInList(VALID_RECONCILE[provider]))
    return source


def corrupt(fdp: Any, sources: list[dict[str, Any]]) -> None:
    """One change to a valid configuration: a value made odd, a key dropped or unknown."""
    source = fdp.PickValueInList(sources)
    table = source
    keys = SOURCE_KEYS
    where = fdp.ConsumeIntInRange(0, 3)
    if where == 1 and isinstance(source.get("forward"), dict):
        table, keys = source["forward"], FORWARD_KEYS
    elif where == 2 and isinstance(source.get("reconcile"), dict):
        table, keys = source["reconcile"], RECONCILE_KEYS
    key = fdp.PickValueInList(keys)
    op = fdp.ConsumeIntInRange(0, 7)
    if op == 0:
        table.pop(key, None)
    elif op == 1:
        table[fdp.PickValueInList(["retries", "Name", "secret", "x"])] = 1
    elif op == 2:
        table[key] = fuzz_toml_value(fdp)
    elif op == 3 and len(sources) > 1:
        sources[-1]["name"] = sources[0].get("name", "dup")
    elif op == 4:  # another provider's secret or reconcile table
        other = fdp.PickValueInList(list(PROVIDERS))
        source["secrets"] = fdp.PickValueInList(VALID_SECRETS[other])
        if fdp.ConsumeBool():
            source["reconcile"] = dict(fdp.PickValueInList(VALID_RECONCILE[other]))
    else:
        table[key] = fdp.PickValueInList(ODD_TOML)


def fuzz_toml_value(fdp: Any, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 6 if depth < 3 else 3)
    if kind == 0:
        return fdp.PickValueInList(ODD_TOML)
    if kind == 1:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 30))
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 9))
    if kind == 3:
        return fdp.ConsumeFloat()
    if kind in (4, 5):
        return [fuzz_toml_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return {"x": fuzz_toml_value(fdp, depth + 1)}


def render(value: Any) -> str:
    """A TOML value (inline); floats TOML has no literal for become strings of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {render(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(render(v) for v in value) + "]"


def nested(fdp: Any, depth: int) -> str:
    opener, closer = fdp.PickValueInList([("[", "]"), ("{a=", "}"), ("{a=[", "]}")])
    return str(opener * depth + "1" + closer * depth)


def fuzz_toml(fdp: Any) -> str:
    """A valid configuration, then a few corruptions, rendered as TOML, maybe then edited."""
    sources = [valid_source(fdp, i) for i in range(fdp.ConsumeIntInRange(1, 3))]
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        corrupt(fdp, sources)
    lines: list[str] = []
    for source in sources:
        lines.append("[[sources]]")
        tables = []
        for key, value in source.items():
            if isinstance(value, dict) and fdp.ConsumeIntInRange(0, 3) > 0:
                tables.append((key, value))
            else:
                lines.append(f"{toml_str(key) if fdp.ConsumeBool() else key} = {render(value)}")
        for key, value in tables:
            lines.append(f"[sources.{key}]")
            lines.extend(f"{toml_str(k)} = {render(v)}" for k, v in value.items())
    # Rare changes are taken on the highest value: an input that has run out gives 0.
    if fdp.ConsumeIntInRange(0, 15) == 15:
        lines.insert(0, f"{fdp.PickValueInList(['top', 'sources', 'a.b'])} = 1")
    if fdp.ConsumeIntInRange(0, 15) == 15:  # nesting deep enough to exhaust a stack
        at = fdp.ConsumeIntInRange(0, len(lines))
        key = fdp.PickValueInList([*SOURCE_KEYS, "x"])
        lines.insert(at, f"{key} = {nested(fdp, fdp.ConsumeIntInRange(1, 1500))}")
    text = "\n".join(lines) + "\n"
    if fdp.ConsumeIntInRange(0, 3) == 3:  # byte-level edits of the text
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            at = fdp.ConsumeIntInRange(0, len(text))
            cut = fdp.ConsumeIntInRange(0, 4)
            text = text[:at] + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 4)) + text[at + cut :]
    return text


def fuzz_env(fdp: Any) -> dict[str, str]:
    env = {
        "NAME": "gh",
        "PROVIDER": "github",
        "SECRET": "whsec_dGVzdA==",
        "TOKEN": "t",
        "URL": "https://example.invalid/",
    }
    for key in ("NAME", "SECRET", "BAD", "TOKEN"):
        if fdp.ConsumeIntInRange(0, 3) == 0:
            env[key] = env_text(fdp, 40)
    return env


def env_text(fdp: Any, max_len: int) -> str:
    """An environment value as Python sees it: any bytes but NUL, surrogate-escaped."""
    raw: bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, max_len))
    return os.fsdecode(raw.replace(b"\x00", b""))


def config_toml_target() -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import ConfigError
    from hookd.sources import NAME_RE, load_sources, parse_sources

    path = Path("hookd.toml")

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        mode = fdp.ConsumeIntInRange(0, 7)
        env = fuzz_env(fdp)
        try:
            if mode == 0:  # the file's raw bytes, through load_sources
                path.write_bytes(fdp.ConsumeBytes(fdp.remaining_bytes()))
                sources = load_sources(path, env)
            elif mode == 1:
                sources = parse_sources(fdp.ConsumeUnicode(fdp.remaining_bytes()), path, env)
            else:
                sources = parse_sources(fuzz_toml(fdp), path, env)
        except ConfigError as exc:
            if "\n" in str(exc):
                raise AssertionError("a config error is not one line") from exc
            return
        assert len(sources) >= 1
        for source in sources:
            assert NAME_RE.fullmatch(source.name)
            assert len(source.keys) == len(source.config.secrets) >= 1

    return one


ENV_VALUES = [
    "1",
    "0",
    "-1",
    "1.5",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "1_000",
    " 5 ",
    "true",
    "false",
    "yes",
    "off",
    "",
    "9" * 40,
    "sqlite+aiosqlite:///./x.db",
    "redis://127.0.0.1:1/0",
    "DEBUG",
    "{}",
    "[]",
]


def config_env_target() -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import ConfigError
    from hookd.settings import Settings

    fields = sorted(Settings.model_fields)
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOOKD_")}
    dotenv = Path(".env")

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        os.environ.clear()
        os.environ.update(base)
        for name in fields:
            how = fdp.ConsumeIntInRange(0, 5)
            if how <= 2:
                continue
            value = fdp.PickValueInList(ENV_VALUES) if how < 5 else env_text(fdp, 40)
            os.environ["HOOKD_" + name.upper()] = value
        kind = fdp.ConsumeIntInRange(0, 3)
        if kind == 3:
            dotenv.write_bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200)))
        elif kind == 2:
            lines = [
                f"HOOKD_{fdp.PickValueInList(fields).upper()}="
                + fdp.PickValueInList(['"', "'", "", "export "])
                + env_text(fdp, 30)
                for _ in range(fdp.ConsumeIntInRange(0, 4))
            ]
            dotenv.write_text("\n".join(lines), encoding="utf-8", errors="surrogateescape")
        elif dotenv.exists():
            dotenv.unlink()
        try:
            Settings.from_env()
        except ConfigError as exc:
            if "\n" in str(exc):
                raise AssertionError("a config error is not one line") from exc

    return one


def build_target(name: str) -> Callable[[bytes], None]:
    kind, _, provider = name.partition("-")
    if kind == "verify":
        return verify_target(provider)
    if kind == "envelope":
        return envelope_target(provider)
    if name == "registry":
        return registry_target()
    if name == "config-toml":
        return config_toml_target()
    if name == "config-env":
        return config_env_target()
    raise ValueError(f"unknown target {name!r}")


def fuzz_target_main() -> None:
    """Entry point of one target's process: ``TARGET [libFuzzer flags...]``."""
    import atheris

    name, *flags = sys.argv[1:]
    with atheris.instrument_imports(include=INSTRUMENTED):
        import hookd.providers
        import hookd.sources  # noqa: F401
    target = build_target(name)
    runs = next((int(f.split("=", 1)[1]) for f in flags if f.startswith("-runs=")), 0)
    calls = 0
    started = 0.0

    def one(data: bytes) -> None:
        # libFuzzer reports whole seconds only: time the inputs here.
        nonlocal calls, started
        if not calls:
            started = time.perf_counter()
        calls += 1
        target(data)
        if calls == runs:
            elapsed = time.perf_counter() - started
            print(f"hookd-fuzz: {calls} inputs in {elapsed:.3f} s", file=sys.stderr, flush=True)

    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()


# --- driving the targets ----------------------------------------------------------------


def seeds(directory: Path, target: str, count: int = 16) -> None:
    """A few random inputs to start from (libFuzzer grows the corpus from there)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{target}-seed")
    for i in range(count):
        size = rng.choice([16, 64, 256, 1024])
        (directory / f"seed-{i}").write_bytes(rng.randbytes(size))


STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.MULTILINE)
TIMED = re.compile(r"^hookd-fuzz: (\d+) inputs in ([\d.]+) s", re.MULTILINE)
DONE = re.compile(r"DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/")


async def fuzz_one(
    target: str, runs: int, work: Path, *, seed: int, max_len: int, timeout_s: int
) -> dict[str, Any]:
    directory = work / target
    corpus = directory / "corpus"
    artifacts = directory / "artifacts"
    seeds(corpus, target)
    artifacts.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOOKD_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from chaos.fuzz import fuzz_target_main; fuzz_target_main()",
        target,
        f"-runs={runs}",
        f"-seed={seed}",
        f"-max_len={max_len}",
        f"-timeout={timeout_s}",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
        str(corpus),
        cwd=directory,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    wall_s = time.monotonic() - started
    text = output.decode(errors="replace")
    (directory / "fuzz.log").write_text(text)
    stats = {name: int(value) for name, value in STAT.findall(text)}
    done = DONE.findall(text)
    crashes = sorted(p.name for p in artifacts.iterdir())
    uncaught = text.count("=== Uncaught Python exception: ===")
    error = ""
    if uncaught or proc.returncode:
        marker = text.find("=== Uncaught Python exception: ===")
        error = text[marker : marker + 3000] if marker >= 0 else text[-3000:]
    executed = stats.get("number_of_executed_units", 0)
    timed = TIMED.findall(text)
    fuzz_s = float(timed[-1][1]) if timed else wall_s
    return {
        "inputs_run": executed,
        "exec_per_s": round(executed / fuzz_s) if fuzz_s > 0 else 0,
        "fuzz_s": round(fuzz_s, 2),
        "wall_s": round(wall_s, 1),
        "coverage": int(done[-1][0]) if done else 0,
        "features": int(done[-1][1]) if done else 0,
        "corpus": int(done[-1][2]) if done else 0,
        "peak_rss_mb": stats.get("peak_rss_mb", 0),
        "uncaught_exceptions": uncaught,
        "crash_files": crashes,
        "exit_code": proc.returncode,
        "error": error,
    }


async def run(
    inputs_per_target: int = 10_000,
    targets: Sequence[str] = TARGETS,
    parallel: int = 2,
    seed: int = 1,
    max_len: int = 4096,
    timeout_s: int = 60,
) -> dict[str, Any]:
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise ValueError(f"unknown targets {unknown}")
    work = Path(tempfile.mkdtemp(prefix="hookd-fuzz-"))
    started = time.monotonic()
    gate = asyncio.Semaphore(parallel)

    async def gated(target: str) -> dict[str, Any]:
        async with gate:
            return await fuzz_one(
                target, inputs_per_target, work, seed=seed, max_len=max_len, timeout_s=timeout_s
            )

    # The config targets are the slowest (pydantic-settings, TOML): start them first.
    order = sorted(targets, key=lambda t: not t.startswith("config-"))
    try:
        outcomes = dict(zip(order, await asyncio.gather(*(gated(t) for t in order)), strict=True))
    finally:
        if os.environ.get("CHAOS_KEEP"):
            print(f"fuzz work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    per_target = {t: outcomes[t] for t in targets}
    checks = {
        "every_target_ran_all_inputs": all(
            t["inputs_run"] >= inputs_per_target for t in per_target.values()
        ),
        "no_uncaught_exception": all(t["uncaught_exceptions"] == 0 for t in per_target.values()),
        "no_crash_file": all(not t["crash_files"] for t in per_target.values()),
        "every_process_exited_0": all(t["exit_code"] == 0 for t in per_target.values()),
    }
    return {
        "inputs_per_target": inputs_per_target,
        "targets": per_target,
        "total_inputs": sum(t["inputs_run"] for t in per_target.values()),
        "wall_s": round(time.monotonic() - started, 1),
        "parallel": parallel,
        "checks": checks,
    }


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"{len(figures['targets'])} targets, {figures['inputs_per_target']:,} inputs each "
        f"(atheris, libFuzzer coverage-guided; {figures['total_inputs']:,} inputs in "
        f"{figures['wall_s']:,} s, {figures['parallel']} at a time). A target may raise only "
        "`SignatureError` (verify), `PayloadError` (envelope) or `ConfigError` (config); "
        "a verified request must carry a genuine signature over exactly the verified bytes.",
        "",
        "| target | inputs run | exec/s | coverage (edges) | corpus | uncaught exceptions "
        "| crash files |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in figures["targets"].items():
        lines.append(
            f"| {name} | {t['inputs_run']:,} | {t['exec_per_s']:,} | {t['coverage']:,} "
            f"| {t['corpus']:,} | {t['uncaught_exceptions']} | {len(t['crash_files'])} |"
        )
    lines.append("")
    lines.append(
        "Checks: " + ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in figures["checks"].items())
    )
    for name, t in figures["targets"].items():
        if t["error"]:
            lines += ["", f"`{name}` failed:", "", "```", t["error"].strip()[:1500], "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from chaos.harness import main

    main(__name__)
