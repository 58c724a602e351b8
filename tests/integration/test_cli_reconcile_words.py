"""Reconciliation as the command line words it: `hookd coverage` names each hole for
what it is and takes a recent `--since`; `hookd sources list` and `hookd reconcile`
print cursors as ISO 8601 and a paused source's reason. Each runs the real command."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from store import coverage as ledger
from store import db
from store import reconcile as rstate
from store.status import CoverageOutcome
from tests.integration.test_cli import hookd
from tests.support.constants import SECRETS, SOURCES_TOML

pytestmark = pytest.mark.anyio

# A reconciled Stripe source beside the usual four (nothing is ever run against it).
RECONCILED_TOML = (
    SOURCES_TOML
    + f"""
[[sources]]
name = "billing"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "http://127.0.0.1:9"
allow_insecure = true
token = "sk_test_hookd"
"""
)


def last_line(stderr: str) -> str:
    """The command's own line (a PostgreSQL test database may warn first)."""
    return stderr.rstrip("\n").rsplit("\n", 1)[-1]


# -- 6: coverage words each case for what it is; a recent --since works ------------


async def test_coverage_of_a_source_no_run_has_covered_says_so(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "hookd.toml"
    config.write_text(RECONCILED_TOML)
    env = {"HOOKD_CONFIG": str(config)}
    report = hookd(sqlite_url, "coverage", "billing", "--since", "2h", "--until", "1h", **env)
    assert report.returncode == 1, report.stderr
    assert "no run covered this yet" in report.stdout
    assert "a run that died" not in report.stdout

    # The newest part: younger than the settle window, judged later. Up to now,
    # not refused for being after the default end (now less the settle window).
    recent = hookd(sqlite_url, "coverage", "billing", "--since", "30s", "--json", **env)
    assert recent.returncode == 3, recent.stderr
    shown = json.loads(recent.stdout)
    [hole] = shown["intervals"]
    assert [r["kind"] for r in hole["reasons"]] == ["settling"]
    settle = shown["settle_s"]
    assert hole["reasons"][0]["detail"].startswith(
        f"not judged yet: younger than the settle window ({settle:g} s)"
    )
    future = hookd(sqlite_url, "coverage", "billing", "--since", "2099-01-01T00:00:00Z", **env)
    assert future.returncode == 2
    assert last_line(future.stderr) == "hookd: since must be before now"


async def test_coverage_after_enable_and_a_good_run_does_not_say_disabled(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The window a disable left is recorded up to the enable; a good run after it moves
    the cursor into it. What is left from the cursor on is the next run's work."""
    config = tmp_path / "hookd.toml"
    config.write_text(RECONCILED_TOML)
    now = datetime.now(UTC)
    old_cursor = now - timedelta(hours=6)
    good_until = now - timedelta(minutes=20)  # the good run's end (its now less settle)
    engine = db.create_engine(sqlite_url)
    try:
        async with engine.begin() as conn:
            await rstate.ensure_state(conn, "billing", now)
            await rstate.update_state(conn, "billing", None, cursor=good_until.timestamp())
            await ledger.record(
                conn,
                source="billing",
                start=old_cursor - timedelta(hours=1),
                end=old_cursor,
                outcome=CoverageOutcome.COMPLETE,
                now=old_cursor,
            )
            await ledger.record(
                conn,
                source="billing",
                start=old_cursor,
                end=now - timedelta(minutes=10),
                outcome=CoverageOutcome.NOT_CHECKED,
                now=now - timedelta(minutes=10),
                reason="reconciliation disabled: key rotation",
            )
            await ledger.record(
                conn,
                source="billing",
                start=old_cursor - timedelta(minutes=1),
                end=good_until,
                outcome=CoverageOutcome.COMPLETE,
                now=now - timedelta(minutes=9),
            )
    finally:
        await engine.dispose()
    report = hookd(
        sqlite_url, "coverage", "billing", "--since", "3h", "--json", HOOKD_CONFIG=str(config)
    )
    assert report.returncode == 3, (report.stdout, report.stderr)
    holes = [i for i in json.loads(report.stdout)["intervals"] if i["state"] == "hole"]
    kinds = [r["kind"] for h in holes for r in h["reasons"]]
    assert kinds and set(kinds) <= {"pending", "settling"}, holes
