"""Per-event CPU of the receiver, stage by stage, in this process (no server, no database).

What ``bench/ingest.py`` measures as "server CPU per request" is the sum of uvicorn's
HTTP work (the same for the bare app) and hookd's own stages. This script times each of
hookd's stages on the same signed GitHub bodies that ``ingest.py`` sends, one at a time
in a loop (``timeit``, best of ``--repeat``), so a change to one stage shows as a change
to its line:

* ``headers``  — header map from the ASGI scope, the provider's header checks;
* ``verify``   — HMAC-SHA256 over the raw body, constant-time compare;
* ``envelope`` — dedupe key, type (the body's JSON is parsed for GitHub's ``action``);
* ``event``    — the ``NewEvent`` record handed to the group commit;
* ``commit``   — per event of a 64-event batch: ids, row dicts, the statement's
  parameters (PostgreSQL's JSON payload); not the database's own work;
* ``metrics``  — the received counter and the ack histogram;
* ``answer``   — the JSON answer's bytes.

    .venv/bin/python bench/stages.py                    # this tree
    .venv/bin/python bench/stages.py --tree /tmp/old    # another checkout, to compare

``--tree`` measures the code of another checkout (``git worktree add /tmp/old <commit>``)
with this script, so before and after are timed the same way on the same machine.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import random
import sys
import timeit
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCH = 64


def load(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(tree))
    names = (
        "hookd.sources",
        "ingest.receiver",
        "store.intake.events",
        "store.intake.fastpath",
        "store.crypto",
        "store.status",
    )
    return {name: importlib.import_module(name) for name in names}


def bodies(count: int) -> list[tuple[str, bytes]]:
    sys.path.insert(0, str(REPO))
    from bench import ingest

    rng = random.Random(1)
    out = []
    for seq in range(1, count + 1):
        body = json.dumps(ingest.issue_payload(seq, rng), separators=(", ", ": ")).encode()
        out.append((ingest.SECRET, body))
    return out


def measure(tree: Path, repeat: int, number: int) -> dict[str, float]:
    pool = bodies(16)
    mods = load(tree)
    sources_mod = mods["hookd.sources"]
    receiver = mods["ingest.receiver"]
    # ``header_map`` took the ASGI scope until the receiver answered from the HTTP
    # protocol (cca6b4e); since, the scope's header list. Either tree is measured.
    takes_list = "scope" not in inspect.signature(receiver.header_map).parameters

    def header_map(scope: dict[str, Any]) -> Any:
        return receiver.header_map(scope["headers"] if takes_list else scope)

    events_mod = mods["store.intake.events"]
    fastpath = mods["store.intake.fastpath"]
    cipher = mods["store.crypto"].BodyCipher("")
    origin = mods["store.status"].EventOrigin.WEBHOOK
    secret = pool[0][0]
    sources = sources_mod.parse_sources(
        f'[[sources]]\nname = "github"\nprovider = "github"\nsecrets = ["{secret}"]\n',
        Path("bench.toml"),
        {},
    )
    source = sources.get("github")
    provider = source.adapter
    import hashlib
    import hmac

    scopes = []
    for i, (_, body) in enumerate(pool):
        digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        scopes.append(
            (
                {
                    "headers": [
                        (b"host", b"127.0.0.1:8000"),
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"x-github-event", b"issues"),
                        (b"x-github-delivery", f"00000000-0000-4000-8000-{i:012d}".encode()),
                        (b"x-hub-signature-256", f"sha256={digest}".encode()),
                        (b"user-agent", b"GitHub-Hookshot/bench"),
                    ]
                },
                body,
            )
        )
    now = datetime.now(UTC).timestamp()
    prepared = []
    for scope, body in scopes:
        headers = header_map(scope)
        signed = provider.check_headers(headers, now, 300)
        verified = provider.verify(signed, body, source.keys)
        env = provider.envelope(headers, body, verified)
        prepared.append((scope, body, headers, signed, verified, env))

    def new_event(env: Any, body: bytes, verified: Any) -> Any:
        return events_mod.NewEvent(
            source="github",
            provider="github",
            dedupe_key=env.dedupe_key,
            type=env.type,
            origin=origin,
            received_at=datetime.fromtimestamp(now, UTC),
            occurred_at=env.occurred_at,
            verified_with=verified.describe(),
            headers=env.headers,
            body=body,
        )

    import dataclasses

    # Distinct keys, as the receiver's batches have (prepare keeps one row per key).
    batch_events = [
        dataclasses.replace(new_event(env, body, verified), dedupe_key=f"{env.dedupe_key}-{n}")
        for n in range(BATCH // len(prepared))
        for _, body, _, _, verified, env in prepared
    ]

    def stage_headers() -> None:
        for scope, _, _, _, _, _ in prepared:
            provider.check_headers(header_map(scope), now, 300)

    def stage_verify() -> None:
        for _, body, _, signed, _, _ in prepared:
            provider.verify(signed, body, source.keys)

    def stage_envelope() -> None:
        for _, body, headers, _, verified, _ in prepared:
            provider.envelope(headers, body, verified)

    def stage_event() -> None:
        for _, body, _, _, verified, env in prepared:
            new_event(env, body, verified)

    def stage_commit() -> None:
        batch = events_mod.prepare(batch_events, cipher)
        fastpath._pg_payload(batch.rows)

    metrics_mod = importlib.import_module("ingest.metrics")
    if hasattr(metrics_mod, "AckTally"):
        # Written once per commit group (here: one group of 16 requests).
        tally = metrics_mod.AckTally()

        def stage_metrics() -> None:
            tally._scheduled = True  # as if the flush were queued (no loop here)
            for _ in prepared:
                tally.record("github", "accepted", 0.004)
            tally.flush()

    else:  # before: a counter and a histogram written per request
        received = receiver._received("github", "accepted")
        ack = metrics_mod.ACK_SECONDS.labels("github")

        def stage_metrics() -> None:
            for _ in prepared:
                received.inc()
                ack.observe(0.004)

    def stage_answer() -> None:
        for _ in prepared:
            receiver.stored_answer("01JBENCH0000000000000000000", "accepted")

    per_call = {
        "headers": len(prepared),
        "verify": len(prepared),
        "envelope": len(prepared),
        "event": len(prepared),
        "commit": len(batch_events),
        "metrics": len(prepared),
        "answer": len(prepared),
    }
    stages = {
        "headers": stage_headers,
        "verify": stage_verify,
        "envelope": stage_envelope,
        "event": stage_event,
        "commit": stage_commit,
        "metrics": stage_metrics,
        "answer": stage_answer,
    }
    out: dict[str, float] = {}
    for name, fn in stages.items():
        best = min(timeit.repeat(fn, number=number, repeat=repeat))
        out[name] = round(best / number / per_call[name] * 1e6, 2)
    out["total"] = round(sum(out.values()), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.tree.resolve(), args.repeat, args.number)
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:10s} {value:8.2f} µs/event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
