"""Poisoned values: one unstorable value never hurts another request.

Concurrent groups of correctly signed deliveries, each group sent at once so that it
lands in one commit group, mixing valid deliveries with hostile values in every field
hookd extracts from a body (the event id, the type, the provider's time, an ordered
object's key and version): NUL and other control characters, C1 controls, DEL, lone
surrogates, over-long text, invalid UTF-8, numbers past every range, deep nesting,
empty and non-ASCII text. Against a real ``hookd serve`` on PostgreSQL and on SQLite.

Every valid delivery must be acknowledged (202) and stored; no request may get a 5xx;
a hostile one is either stored (202, its labels in a safe form; 200 when the same one
came before) or refused on its own (400). ``store.values`` says which, per field.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from chaos import harness
from chaos.tamper_requests import genuine
from store import db, migrate
from tests.support.constants import SECRETS
from tests.support.signing import hex_hmac

TITLE = "Poisoned values never hurt the requests committed with them"
ORIGIN = "Hardening: one bad request never hurts another"
# QUICK sends every (field, hostile value) pair once: 60 groups with 3 hostile each.
QUICK: dict[str, Any] = {"groups": 60, "group_size": 16, "seed": 11}
FULL: dict[str, Any] = {"groups": 400, "group_size": 40, "seed": 11}

DATABASES = ("postgresql", "sqlite")
PROVIDERS = ("github", "stripe", "standard", "hmac")
HMAC_SECRET = "poison-hmac-secret"
# A hostile value as raw JSON text, placed where a field's value goes.
HOSTILE: dict[str, bytes] = {
    "nul": b'"opened\\u0000evil"',
    "escape_sequence": b'"\\u001b[31mred\\u001b[0m"',
    "c1_control": b'"next\\u0085line"',
    "delete": b'"del\\u007f"',
    "newline": b'"two\\nlines"',
    "lone_surrogate": b'"half\\ud800"',
    "over_long_300": b'"' + b"a" * 300 + b'"',
    "over_long_70000": b'"' + b"b" * 70_000 + b'"',
    "invalid_utf8": b'"bad\xff\xfeutf8"',
    "huge_float": b"1e400",
    "huge_negative": b"-1.8e308",
    "huge_integer": b"1" + b"0" * 5000,
    "big_integer": b"18446744073709551617",
    "deep_nesting": b"[" * 5000 + b"]" * 5000,
    "empty": b'""',
    "non_ascii": '"überweisung.erstellt"'.encode(),
    "object": b'{"nested": "\\u0000"}',
}
# The fields a hostile value goes in, per provider: (field name, what hookd reads it as).
FIELDS: dict[str, tuple[str, ...]] = {
    "github": ("action",),
    "stripe": ("id", "type", "created"),
    "standard": ("type", "timestamp"),
    "hmac": ("id", "type", "object", "version"),
}
PLACEHOLDER = "\x01hostile\x01"
HOSTILE_PER_GROUP = 3


@dataclass(frozen=True)
class Sent:
    provider: str
    key: str  # the event id a valid delivery carries
    hostile: str | None  # None: a valid delivery; else "field:value-name"
    headers: list[tuple[str, bytes]]
    body: bytes


@dataclass(frozen=True)
class Answer:
    sent: Sent
    status: int  # 0: no answer
    reason: str


def event_key(provider: str, seq: int) -> str:
    return f"evt_poison_{seq}" if provider == "stripe" else f"{provider}_poison_{seq}"


def payload(provider: str, seq: int, field: str | None) -> dict[str, Any]:
    key = event_key(provider, seq)
    now = int(time.time())
    doc: dict[str, Any]
    if provider == "github":
        doc = {"action": "opened", "issue": {"number": seq}}
    elif provider == "stripe":
        doc = {"id": key, "object": "event", "type": "invoice.paid", "created": now}
    elif provider == "standard":
        doc = {"type": "invoice.paid", "timestamp": "2026-12-03T10:00:00Z", "data": {"n": seq}}
    else:
        data = {"object": f"obj_{seq % 7}", "version": seq}
        doc = {"id": key, "type": "thing.done", "data": data}
    if field is not None:
        target = doc["data"] if field in ("object", "version") else doc
        target[field] = PLACEHOLDER
    return doc


def signed(provider: str, seq: int, body: bytes) -> list[tuple[str, bytes]]:
    if provider == "hmac":
        signature = "sha256=" + hex_hmac(HMAC_SECRET, body)
        return [("content-type", b"application/json"), ("x-poison-signature", signature.encode())]
    headers = genuine(provider, seq, body=body).headers
    delivery = f"github_poison_{seq}".encode()  # genuine() names it after tamper's sequence
    return [(n, delivery if n == "x-github-delivery" else v) for n, v in headers]


def build(provider: str, seq: int, hostile: tuple[str, str] | None) -> Sent:
    field = hostile[0] if hostile else None
    text = json.dumps(payload(provider, seq, field)).encode()
    if hostile is not None:
        text = text.replace(json.dumps(PLACEHOLDER).encode(), HOSTILE[hostile[1]])
    key = event_key(provider, seq)
    label = f"{hostile[0]}:{hostile[1]}" if hostile else None
    # A genuine() signature for standard covers its own msg id: re-sign with ours.
    if provider == "standard":
        return Sent(provider, key, label, standard_headers(seq, text), text)
    return Sent(provider, key, label, signed(provider, seq, text), text)


def standard_headers(seq: int, body: bytes) -> list[tuple[str, bytes]]:
    msg_id = f"standard_poison_{seq}"
    ts = str(int(time.time()))
    secret = SECRETS["standard"]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return [
        ("content-type", b"application/json"),
        ("webhook-id", msg_id.encode()),
        ("webhook-timestamp", ts.encode()),
        ("webhook-signature", b"v1," + base64.b64encode(mac)),
    ]


def make_groups(count: int, size: int, seed: int) -> list[list[Sent]]:
    """``count`` groups of ``size``: three hostile deliveries each, the rest valid; every
    (field, value) pair in turn, so that 60 groups send each at least once."""
    rng = random.Random(seed)
    pairs = [(p, f, v) for p in PROVIDERS for f in FIELDS[p] for v in HOSTILE]
    rng.shuffle(pairs)
    seq = 0
    out: list[list[Sent]] = []
    for g in range(count):
        group: list[Sent] = []
        for i in range(size):
            seq += 1
            if i < HOSTILE_PER_GROUP:
                provider, field, value = pairs[(g * HOSTILE_PER_GROUP + i) % len(pairs)]
                group.append(build(provider, seq, (field, value)))
            else:
                group.append(build(rng.choice(PROVIDERS), seq, None))
        rng.shuffle(group)
        out.append(group)
    return out


def config(work: Path) -> Path:
    blocks = [
        f'[[sources]]\nname = "{p}"\nprovider = "{p}"\nsecrets = ["{SECRETS[p]}"]\n'
        for p in ("github", "stripe", "standard")
    ]
    blocks.append(
        "\n".join(
            [
                "[[sources]]",
                'name = "hmac"',
                'provider = "hmac"',
                f'secrets = ["{HMAC_SECRET}"]',
                "[sources.verify]",
                'header = "X-Poison-Signature"',
                'prefix = "sha256="',
                'dedupe = "json:id"',
                'type_json = "type"',
                "[sources.order]",
                'key = "data.object"',
                'version = "data.version"',
                "",
            ]
        )
    )
    path = work / "hookd.toml"
    path.write_text("\n".join(blocks))
    return path


async def send_group(client: httpx.AsyncClient, group: list[Sent]) -> list[Answer]:
    async def one(sent: Sent) -> Answer:
        try:
            response = await client.post(
                f"/hooks/{sent.provider}",
                content=sent.body,
                headers=[(n.encode(), v) for n, v in sent.headers],
            )
        except httpx.HTTPError as exc:
            return Answer(sent, 0, type(exc).__name__)
        reason = ""
        with contextlib.suppress(ValueError, AttributeError):
            reason = str(json.loads(response.content).get("error", ""))
        return Answer(sent, response.status_code, reason)

    return list(await asyncio.gather(*(one(s) for s in group)))


async def stored_rows(url: str) -> list[tuple[str, str, str | None]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text("SELECT source, dedupe_key, type FROM events"))
            return [(r[0], r[1], r[2]) for r in rows]
    finally:
        await engine.dispose()


async def run(groups: int = 12, group_size: int = 24, seed: int = 11) -> dict[str, Any]:
    per_database: dict[str, Any] = {}
    for database in DATABASES:
        async with harness.workdir() as work:
            if database == "postgresql":
                pg = harness.pg_database()
                url = await asyncio.to_thread(pg.__enter__)
                try:
                    per_database[database] = await _run(work, url, groups, group_size, seed)
                finally:
                    await asyncio.to_thread(pg.__exit__, None, None, None)
            else:
                url = f"sqlite+aiosqlite:///{work / 'hookd.db'}"
                await asyncio.to_thread(migrate.upgrade, url)
                per_database[database] = await _run(work, url, groups, group_size, seed)
    return figures(per_database, groups=groups, group_size=group_size, seed=seed)


async def _run(work: Path, url: str, count: int, size: int, seed: int) -> dict[str, Any]:
    env = {"HOOKD_CONFIG": str(config(work)), "HOOKD_DATABASE_URL": url}
    server = harness.HookdServer(env, work)
    await asyncio.to_thread(server.start)
    answers: list[Answer] = []
    try:
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:
            started = time.monotonic()
            for group in make_groups(count, size, seed):
                answers += await send_group(client, group)
            send_s = time.monotonic() - started
        rows = await stored_rows(url)
        log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    finally:
        await asyncio.to_thread(server.stop)
    return tally(answers, rows, log, send_s)


def tally(
    answers: list[Answer], rows: list[tuple[str, str, str | None]], log: str, send_s: float
) -> dict[str, Any]:
    valid = [a for a in answers if a.sent.hostile is None]
    hostile = [a for a in answers if a.sent.hostile is not None]
    stored_keys = {(source, key) for source, key, _ in rows}
    valid_stored = sum((a.sent.provider, a.sent.key) in stored_keys for a in valid)
    unsafe_types = [
        t for _, _, t in rows if t is not None and (len(t) > 255 or not _printable_or_fffd(t))
    ]
    by_value: dict[str, Counter[str]] = {}
    for a in hostile:
        assert a.sent.hostile is not None
        by_value.setdefault(a.sent.hostile.split(":", 1)[1], Counter())[str(a.status)] += 1
    return {
        "sent": len(answers),
        "valid": len(valid),
        "valid_202": sum(a.status == 202 for a in valid),
        "valid_stored": valid_stored,
        "valid_statuses": dict(
            sorted(Counter(f"{a.sent.provider} {a.status} {a.reason}" for a in valid).items())
        ),
        "hostile": len(hostile),
        "hostile_pairs": len({(a.sent.provider, a.sent.hostile) for a in hostile}),
        "hostile_statuses": dict(sorted(Counter(str(a.status) for a in hostile).items())),
        "hostile_reasons": dict(Counter(a.reason for a in hostile if a.reason).most_common()),
        "hostile_by_value": {k: dict(sorted(v.items())) for k, v in sorted(by_value.items())},
        "server_errors": sum(a.status >= 500 for a in answers),
        "no_answer": sum(a.status == 0 for a in answers),
        "rows": len(rows),
        "unsafe_types_stored": len(unsafe_types),
        "commit_failures_logged": log.count("commit failed"),
        "tracebacks": log.count("Traceback"),
        "requests_per_s": round(len(answers) / send_s, 1) if send_s else 0.0,
    }


def _printable_or_fffd(text: str) -> bool:
    return all(ch.isprintable() or ch == "\ufffd" or ch == " " for ch in text)


def figures(per_database: dict[str, Any], **counts: Any) -> dict[str, Any]:
    every = per_database.values()
    pairs = {f"{p}.{f}" for p in PROVIDERS for f in FIELDS[p]}
    every_pair = len(pairs) * len(HOSTILE)
    checks = {
        "every_field_and_value_sent": all(d["hostile_pairs"] == every_pair for d in every),
        "every_valid_delivery_202": all(d["valid_202"] == d["valid"] for d in every),
        "every_valid_delivery_stored": all(d["valid_stored"] == d["valid"] for d in every),
        "no_5xx": all(d["server_errors"] == 0 for d in every),
        "every_request_answered": all(d["no_answer"] == 0 for d in every),
        # 200: a hostile value sent again (the full counts send each pair several
        # times) whose event id was stored the first time is a duplicate.
        "hostile_only_stored_duplicate_or_400": all(
            set(d["hostile_statuses"]) <= {"200", "202", "400"} for d in every
        ),
        "no_commit_failed": all(d["commit_failures_logged"] == 0 for d in every),
        "stored_types_safe": all(d["unsafe_types_stored"] == 0 for d in every),
        "no_traceback_in_server_log": all(d["tracebacks"] == 0 for d in every),
    }
    return {**counts, "fields": sorted(pairs), "databases": per_database, "checks": checks}


def report(figures: dict[str, Any]) -> str:
    dbs = figures["databases"]
    lines = [
        f"{figures['groups']} groups of {figures['group_size']} correctly signed deliveries "
        f"(seed {figures['seed']}), each group sent at once so that it shares a commit group, "
        "three of each group carrying a hostile value in a field hookd extracts "
        f"({', '.join(f'`{f}`' for f in figures['fields'])}), to a real `hookd serve` on "
        "each database:",
        "",
        "| database | valid: 202 / stored / sent | hostile: statuses | 5xx | `commit failed` "
        "logged | requests/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, d in dbs.items():
        statuses = ", ".join(f"{n:,} x {s}" for s, n in d["hostile_statuses"].items())
        lines.append(
            f"| {name} | {d['valid_202']:,} / {d['valid_stored']:,} / {d['valid']:,} | "
            f"{statuses} | {d['server_errors']} | {d['commit_failures_logged']} | "
            f"{d['requests_per_s']:,} |"
        )
    lines += [
        "",
        "Hostile values and how they were answered (both databases; 400 is "
        "`malformed_payload` for a body that is not UTF-8 JSON or a value the provider's "
        "envelope refuses, `unstorable_value` for an event id no row can hold; 202 is "
        "stored, its labels in a safe form; 200 is the same hostile event sent again):",
        "",
        "| value | " + " | ".join(dbs) + " |",
        "| --- | " + " | ".join("---" for _ in dbs) + " |",
    ]
    values = sorted({v for d in dbs.values() for v in d["hostile_by_value"]})
    for value in values:
        cells = [
            ", ".join(f"{n} x {s}" for s, n in d["hostile_by_value"].get(value, {}).items()) or "0"
            for d in dbs.values()
        ]
        lines.append(f"| `{value}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    harness.main(__name__)
