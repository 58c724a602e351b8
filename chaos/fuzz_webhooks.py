"""The webhook targets of ``chaos.fuzz``: ``verify-PROVIDER``, ``envelope-PROVIDER`` and
``registry`` (see ``chaos.fuzz`` for what each may raise and must hold)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chaos.fuzz_requests import (
    CONTENT_TYPES,
    NOW,
    OLD_SECRET,
    PROVIDERS,
    SECRET,
    TOLERANCE_S,
    WRONG_SECRET,
    flip_bit,
    key_sets,
    latin1,
    mutate,
    offset,
    random_headers,
    sign,
)

if TYPE_CHECKING:  # imported inside the target process only after instrumentation
    from hookd.providers.base import Envelope, HeaderMap, Key, Provider, Verified

SIGNATURE_REASONS = frozenset(
    {
        "missing_header",
        "duplicate_header",
        "conflicting_headers",
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


def check_envelope_of(
    provider: Provider, headers: HeaderMap, body: bytes, verified: Verified
) -> None:
    """A verified request's envelope: ``PayloadError``, or one that is usable."""
    from hookd.errors import PayloadError

    try:
        env = provider.envelope(headers, body, verified)
    except PayloadError:
        return
    check_envelope(env)


def verify_target(provider: str) -> Callable[[bytes], None]:
    import atheris

    from hookd.errors import SignatureError
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
        check_envelope_of(adapter, headers, body, verified)

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
        check_envelope_of(provider, headers, body, verified)

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
