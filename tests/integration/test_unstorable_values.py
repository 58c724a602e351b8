"""One value no row can hold never fails the requests committed with it (invariant 9).

Two lines of defence, each tested on both databases: the receiver checks every value
it extracts before the value joins a batch (``store.values``: the event id refused, the
labels stored in a safe form), and a batch that still fails for what one row holds is
split until that row is alone (``ingest.batcher``), so only it is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from hookd.providers.signing import sample_event
from hookd.runtime.sqlite_writer import inserter_for
from ingest.batcher import GroupCommitter, StoreUnavailable
from store.crypto import BodyCipher
from store.values import MAX_TYPE_CHARS, Unstorable, safe_text, storable
from tests.support import handlers
from tests.support.constants import SECRETS
from tests.support.data import new_event, scalar
from tests.support.server import HookdServer
from tests.support.signing import hex_hmac
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

# What the database refuses (PostgreSQL: NUL in text, over-long varchar; both: a lone
# surrogate, which no encoding holds). SQLite stores NUL and long text: the check in
# the receiver makes both databases store the same thing.
POISONS = {
    "nul_type": {"type": "issues.\x00opened"},
    "long_type": {"type": "t" * 300},
    "surrogate_type": {"type": "issues.\ud800"},
    "surrogate_key": {"dedupe_key": "key-\udfff"},
    "long_verified_with": {"verified_with": "v" * 200},
}


@pytest.mark.parametrize("sqlite_process", [False, True], ids=["thread", "process"])
async def test_a_poisoned_row_is_refused_alone_and_the_rest_of_its_batch_commits(
    db_url: str, sqlite_process: bool
) -> None:
    """The second line: rows that reach the committer unchecked. Before, the whole batch
    failed (every request 503); now every innocent row commits, each poisoned one that
    its database refuses gets ``Unstorable`` (400), and readiness is untouched."""
    inserter = inserter_for(
        db_url, BodyCipher(""), committers=1, timeout_s=5, sqlite_process=sqlite_process
    )
    committer = GroupCommitter(inserter, batch_max=256, window_s=0.2)
    await committer.start()
    try:
        innocent = [new_event(f"innocent-{i}") for i in range(40)]
        poisoned = [
            dataclasses.replace(new_event(f"poison-{name}"), **fields)
            for name, fields in POISONS.items()
        ]
        events = innocent[:20] + poisoned + innocent[20:]
        futures = [committer.enqueue(e) for e in events]  # one batch: the window holds them
        results = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        await committer.stop()
        await inserter.close()
    by_key = {e.dedupe_key: r for e, r in zip(events, results, strict=True)}
    for event in innocent:
        result = by_key[event.dedupe_key]
        assert not isinstance(result, BaseException), (event.dedupe_key, result)
        assert result.created
    assert not any(isinstance(r, StoreUnavailable) for r in results), results
    refused = {
        e.dedupe_key for e, r in zip(events, results, strict=True) if isinstance(r, Unstorable)
    }
    # A lone surrogate fails on both databases; NUL and length on PostgreSQL only.
    assert {"poison-surrogate_type", "key-\udfff"} <= refused
    if db_url.startswith("postgresql"):
        assert {"poison-nul_type", "poison-long_type", "poison-long_verified_with"} <= refused
    assert committer.failed_in_row == 0
    stored = await scalar(db_url, "SELECT count(*) FROM events WHERE dedupe_key LIKE 'innocent-%'")
    assert stored == len(innocent)


def test_storable_refuses_an_unusable_key_and_keeps_labels_in_a_safe_form() -> None:
    for key in ("", "k" * 256, "a\x00b", "a\x1b[31m", "a\x85", "a\x7f", "\ud800"):
        with pytest.raises(Unstorable) as refused:
            storable(dataclasses.replace(new_event("x"), dedupe_key=key))
        assert refused.value.reason == "unstorable_value"
        assert key not in str(refused.value) or not key  # never echoes the value
    event = new_event("k" * 255)
    assert storable(event) is event  # nothing to change: the same object, no copy
    odd = dataclasses.replace(event, type="a\x00b\x1b\ud800" + "x" * 300)
    kept = storable(odd)
    assert kept.type is not None
    assert len(kept.type) == MAX_TYPE_CHARS
    assert kept.type.startswith("a\ufffdb\ufffd\ufffd")
    assert kept.type.endswith("\u2026")
    assert safe_text("überweisung.erstellt", 255) == "überweisung.erstellt"


def github(seq: int, action: str) -> tuple[dict[str, str], bytes]:
    """A genuine GitHub delivery whose ``action`` is ``action`` (JSON-escaped: a NUL or a
    lone surrogate travels as ``\\u0000``/``\\ud800``, as any JSON encoder writes it)."""
    body = json.dumps({"action": action, "issue": {"number": seq}}).encode()
    return {
        "content-type": "application/json",
        "x-github-event": "issues",
        "x-github-delivery": f"poison-{seq}",
        "x-hub-signature-256": "sha256=" + hex_hmac(SECRETS["github"], body),
    }, body


async def test_a_delivery_with_a_nul_or_overlong_action_hurts_no_other_delivery(
    tmp_path: Path, db_url: str
) -> None:
    """The review's reproduction: one correctly signed GitHub delivery whose ``action``
    holds a NUL byte (or 300 characters) among 40 concurrent ones. Before: 39 x 503.
    Now every delivery is 202 and stored, the odd ones with their type in a safe form."""
    work = tmp_path
    config = work / "hookd.toml"
    config.write_text(
        f'[[sources]]\nname = "github"\nprovider = "github"\nsecrets = ["{SECRETS["github"]}"]\n'
    )
    env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": db_url}
    odd = {7: "opened\x00evil", 19: "a" * 300, 31: "\ud800"}
    requests = [
        github(i, odd[i]) if i in odd else sample_event("github", SECRETS["github"], i)
        for i in range(40)
    ]
    with HookdServer(env, work) as server:
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:
            answers = await asyncio.gather(
                *(client.post("/hooks/github", content=b, headers=h) for h, b in requests)
            )
    assert [a.status_code for a in answers] == [202] * 40, [a.text for a in answers]
    assert await scalar(db_url, "SELECT count(*) FROM events") == 40
    safe = "SELECT count(*) FROM events WHERE type = 'issues.opened\ufffdevil'"
    assert await scalar(db_url, safe) == 1
    assert await scalar(db_url, "SELECT max(length(type)) FROM events") == MAX_TYPE_CHARS


async def test_a_handler_error_quoting_a_nul_never_fails_the_outcomes_written_with_it(
    tmp_path: Path, db_url: str
) -> None:
    """A handler's error may quote its payload. Its NUL or lone surrogate failed the
    statement that records the outcomes of every event finished in the same window, on
    PostgreSQL (a NUL) and on both (a surrogate), so those events were never recorded
    and ran again. Now each error is stored in a safe form and the others are processed."""
    env = {
        "HOOKD_CONFIG": str(handlers.config(tmp_path, "hostile_error", max_attempts=1)),
        "HOOKD_DATABASE_URL": db_url,
    }
    requests = [
        github(i, "poison") if i % 10 == 3 else sample_event("github", SECRETS["github"], i)
        for i in range(40)
    ]
    with HookdServer(env, tmp_path) as server:
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:
            answers = await asyncio.gather(
                *(client.post("/hooks/github", content=b, headers=h) for h, b in requests)
            )
        assert [a.status_code for a in answers] == [202] * 40

        async def settled() -> bool:
            done = "SELECT count(*) FROM events WHERE status IN ('processed', 'dead')"
            return await scalar(db_url, done) == 40

        await wait_for(settled, timeout_s=60, interval_s=0.2, message="not all settled")
    assert await scalar(db_url, "SELECT count(*) FROM events WHERE status = 'processed'") == 36
    dead = "SELECT count(*) FROM events WHERE status = 'dead' AND last_error LIKE '%bad value%'"
    assert await scalar(db_url, dead) == 4
    history = "SELECT count(*) FROM event_history WHERE error LIKE '%bad value \ufffd and%'"
    assert await scalar(db_url, history) == 4
