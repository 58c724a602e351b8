"""``hookd alerts`` as a user runs it, on both databases: one line per alert, JSON
Lines, the filters, ack and resolve recorded as ``cli user:NAME``, and a one-line
error with exit status 1 for an unknown id or an alert in the wrong state (2 for a
usage error). The alerts are made by the real lifecycle."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.alerts import alert_row, apply, breaker, dead, failing
from tests.support.cli import hookd_with_config, last_line
from tests.support.data import engine_of

pytestmark = pytest.mark.anyio
UNKNOWN = "01J0000000000000000000000A"


async def seed(url: str) -> dict[str, str]:
    """{kind: id}: dead (found last) and breaker_open open, reconcile_failing resolved."""
    now = datetime.now(UTC)
    async with engine_of(url) as engine:
        opened = await apply(engine, [dead(), breaker(), failing()], now - timedelta(minutes=10))
        await apply(engine, [dead(), breaker()], now - timedelta(minutes=8))
        await apply(engine, [dead()], now - timedelta(minutes=5), evaluated=["dead"])
    return dict(zip(("dead", "breaker_open", "reconcile_failing"), opened.opened, strict=True))


async def cli(url: str, config: Path, *args: str) -> tuple[int, str, str]:
    done = await asyncio.to_thread(hookd_with_config, url, config, "alerts", *args)
    return done.returncode, done.stdout, done.stderr


async def test_alerts_list_one_line_each_and_json(db_url: str, sources_file: Path) -> None:
    ids = await seed(db_url)
    code, out, err = await cli(db_url, sources_file, "list")
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["ID", "STATUS", "SEVERITY", "KIND", "KEY", "LAST_SEEN", "SUMMARY"]
    assert [line.split()[0] for line in lines] == [ids["dead"], ids["breaker_open"]]
    fields = lines[0].split(maxsplit=6)
    assert fields[:5] == [ids["dead"], "open", "critical", "dead", "github"]
    # Seen 5 minutes ago: today, or yesterday on a run that crosses midnight (UTC).
    days = {(datetime.now(UTC) - timedelta(minutes=m)).strftime("%Y-%m-%d") for m in (0, 15)}
    assert fields[5][:10] in days, fields[5]
    assert fields[6] == "12 events of github are dead: replay them once the cause is fixed"
    code, out, err = await cli(db_url, sources_file, "list", "--status", "all", "--json")
    assert code == 0, err
    listed = [json.loads(line) for line in out.splitlines()]
    assert [a["id"] for a in listed] == [ids["dead"], ids["breaker_open"], ids["reconcile_failing"]]
    assert [a["status"] for a in listed] == ["open", "open", "resolved"]
    code, out, _ = await cli(
        db_url,
        sources_file,
        "list",
        *("--status", "resolved", "--source", "stripe", "--kind", "reconcile_failing"),
    )
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == [ids["reconcile_failing"]]
    code, out, _ = await cli(db_url, sources_file, "list", "--status", "all", "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 2
    code, out, _ = await cli(db_url, sources_file, "list", "--kind", "prune_behind")
    assert (code, out.splitlines()[1:]) == (0, ["(none)"])
    code, out, _ = await cli(db_url, sources_file, "show", ids["dead"])
    assert code == 0
    shown = dict(line.split(maxsplit=1) for line in out.splitlines() if " " in line.strip())
    assert (shown["id"], shown["status"], shown["key"]) == (ids["dead"], "open", "github")


async def test_alerts_ack_and_resolve_and_their_errors(db_url: str, sources_file: Path) -> None:
    ids = await seed(db_url)
    alert_id = ids["dead"]
    code, out, err = await cli(db_url, sources_file, "ack", alert_id)
    assert (code, out) == (0, f"{alert_id} acknowledged: dead github\n"), err
    code, out, err = await cli(db_url, sources_file, "ack", alert_id)
    assert (code, out) == (1, "")
    assert last_line(err) == f"hookd: alert {alert_id}: the alert is acknowledged, not open"
    code, out, err = await cli(db_url, sources_file, "resolve", alert_id, "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "resolved"
    code, _, err = await cli(db_url, sources_file, "resolve", alert_id)
    assert code == 1
    assert last_line(err) == f"hookd: alert {alert_id}: the alert is resolved already"
    for verb in ("ack", "resolve", "show"):
        code, out, err = await cli(db_url, sources_file, verb, UNKNOWN)
        assert (code, out, last_line(err)) == (1, "", f"hookd: no alert {UNKNOWN}"), verb
    async with engine_of(db_url) as engine:
        row = await alert_row(engine, alert_id)
    assert row.status == "resolved"
    for who in (row.acknowledged_by, row.resolved_by):
        assert who == "cli" or who.startswith("cli user:"), who


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--limit", "0"),
        ("list", "--limit", "501"),
        ("list", "--status", "closed"),
        ("list", "--kind", "nope"),
        ("ack",),
    ],
)
async def test_a_usage_error_is_exit_status_2(
    sqlite_url: str, sources_file: Path, args: tuple[str, ...]
) -> None:
    code, out, err = await cli(sqlite_url, sources_file, *args)
    assert (code, out) == (2, "")
    assert "hookd alerts" in err
