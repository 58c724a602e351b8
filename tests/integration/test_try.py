"""``hookd try HANDLER EVENT_ID``: a handler run on stored events as processing would run
it, recording nothing. A real ``hookd serve`` makes an event dead through a failing
handler; ``hookd try`` (a real process) shows the error and the row stays the same to
the byte; the other runs show what a handler returned, a time-out, and the one-line
refusals of bad input.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hookd.event import idempotency_key
from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS
from tests.support.data import engine_of, scalar
from tests.support.handlers import github_source, prepare
from tests.support.server import ROOT, HookdServer
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

FAILING = "tests.support.handlers:value_error"
SUMMARISE = "tests.support.try_handlers:summarise"


def config(tmp_path: Path) -> Path:
    return github_source(tmp_path / "hookd.toml", FAILING, "max_attempts = 1\n")


def hookd_try(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", "try", *args],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def row_text(url: str, event_id: str) -> str:
    """The whole row as PostgreSQL writes it out (the body as bytea hex): byte for byte."""

    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.exec_driver_sql(
            f"SELECT e::text FROM events e WHERE e.id = '{event_id}'"
        )
        return str(result.scalar_one())


async def counts(url: str) -> tuple[int, ...]:
    return (
        await scalar(url, "SELECT count(*) FROM events"),
        await scalar(url, "SELECT count(*) FROM handler_runs"),
        await scalar(url, "SELECT count(*) FROM event_keys"),
        await scalar(url, "SELECT count(*) FROM reconcile_runs"),
    )


async def dead_events(tmp_path: Path, pg_url: str, env: dict[str, str], count: int) -> list[str]:
    """``count`` deliveries, dead after their one attempt at the failing handler."""
    ids = []
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            for seq in range(count):
                headers, body = sample_event("github", SECRETS["github"], seq)
                response = await client.post("/hooks/github", content=body, headers=headers)
                assert response.status_code == 202
                ids.append(response.json()["event_id"])

        async def all_dead() -> bool:
            dead = "SELECT count(*) FROM events WHERE status = 'dead'"
            return await scalar(pg_url, dead) == count

        await wait_for(all_dead, timeout_s=30, message=server.log)
    return ids


async def test_try_on_a_dead_event_shows_its_error_and_changes_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    await prepare(pg_url)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path)),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_PRUNE_EVERY_S": "0",
    }
    event_id, other = await dead_events(tmp_path, pg_url, env, 2)
    before, totals = await row_text(pg_url, event_id), await counts(pg_url)
    assert "dead" in before

    failed = hookd_try(env, tmp_path, FAILING, event_id)
    assert failed.returncode == 1, failed.stderr
    assert f"event {event_id} (github, type issues.opened, dead, 1 attempt(s))" in failed.stdout
    assert "raised ValueError after" in failed.stdout
    assert ": boom" in failed.stdout
    assert "Traceback (most recent call last):" in failed.stdout
    assert 'raise ValueError("boom")' in failed.stdout  # the handler's own line
    assert await row_text(pg_url, event_id) == before
    assert await counts(pg_url) == totals

    # A handler that returns: what it returned, with the idempotency key processing uses.
    returned = hookd_try(env, tmp_path, SUMMARISE, event_id)
    assert returned.returncode == 0, returned.stdout + returned.stderr
    assert "returned in " in returned.stdout
    assert "'type': 'issues.opened'" in returned.stdout
    assert idempotency_key(event_id, SUMMARISE) in returned.stdout
    assert await row_text(pg_url, event_id) == before

    # Over a sample: --all with its filters.
    both = hookd_try(env, tmp_path, SUMMARISE, "--all", "--type", "issues.*", "--since", "1h")
    assert both.returncode == 0, both.stdout + both.stderr
    assert event_id in both.stdout and other in both.stdout
    assert "2 event(s) tried: 2 returned, 0 raised" in both.stdout
    one = hookd_try(env, tmp_path, FAILING, "--all", "--source", "github", "--limit", "1")
    assert one.returncode == 1
    assert "1 event(s) tried: 0 returned, 1 raised" in one.stdout
    assert other in one.stdout  # the newest first
    none = hookd_try(env, tmp_path, FAILING, "--all", "--type", "pull_request*")
    assert none.returncode == 0
    assert "no stored event matches" in none.stdout
    slow = hookd_try(
        {**env, "HOOKD_HANDLER_TIMEOUT_S": "0.5"},
        tmp_path,
        "tests.support.try_handlers:too_slow",
        event_id,
    )
    assert slow.returncode == 1
    assert "did not finish within 0.5s" in slow.stdout

    assert await row_text(pg_url, event_id) == before
    assert await counts(pg_url) == totals

    refusals = {
        "no such event": (FAILING, "01J0000000000000000000000A"),
        "module:function": ("no_colon", event_id),
        "cannot import": ("no_such_module_here:f", event_id),
        "not both": (FAILING, event_id, "--all"),
        "give an EVENT_ID": (FAILING,),
        "only go with --all": (FAILING, event_id, "--type", "issues.*"),
        "not a time": (FAILING, "--all", "--since", "yesterday-ish"),
    }
    for said, args in refusals.items():
        refused = hookd_try(env, tmp_path, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        # (A warning about the database's settings may come first: not this command's.)
        lines = [x for x in refused.stderr.splitlines() if not x.startswith("hookd: warning:")]
        assert len(lines) == 1 and lines[0].startswith("hookd: "), refused.stderr
        assert said in lines[0], (said, lines[0])
        assert refused.stdout == ""
    assert await row_text(pg_url, event_id) == before
