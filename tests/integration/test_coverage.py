"""The coverage ledger against real PostgreSQL and the provider emulators, with days
passing on an emulated clock (the runs' clock; leases keep to the real one): a source
disabled for longer than its provider keeps deliveries, and a Stripe source down for
31 days. ``hookd coverage`` shows the holes with their reasons and exits non-zero for a
range that includes one, zero for a range that does not; the API, the admin page and
the gauges say the same."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.cli.coverage import cmd_coverage
from hookd.cli.parser import build_parser
from hookd.cli.reconcile import cmd_sources
from hookd.metrics import db as db_metrics
from hookd.settings import Settings
from hookd.sources import Source, Sources, parse_sources
from reconcile import service
from reconcile.poller import Reconciler
from store.crypto import BodyCipher
from tests.support.asgi import running_app
from tests.support.cli import last_line
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulators import GitHubEmulator, StripeEmulator
from tests.support.http import serve_app
from tests.support.server import ROOT

pytestmark = pytest.mark.anyio

DAY = 86_400.0
API_TOKEN = "provider-api-token"
STRIPE_KEY = "sk_test_hookd"
HOOK = "repos/octo/hello/hooks/42"
TOKEN = "coverage-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Clock:
    """The runs' clock: a fixed time while set, the real one otherwise."""

    def __init__(self, at: float | None = None) -> None:
        self.at = at

    def time(self) -> float:
        return time.time() if self.at is None else self.at

    def __call__(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)


@dataclass
class Setup:
    path: Path
    sources: Sources
    source: Source
    engine: AsyncEngine
    reconciler: Reconciler
    clock: Clock
    url: str

    def coverage(self, *args: str, source: str | None = None) -> subprocess.CompletedProcess[str]:
        """``hookd coverage SOURCE ...`` as an operator runs it, at the real time."""
        env = {
            **os.environ,
            "HOOKD_DATABASE_URL": self.url,
            "HOOKD_CONFIG": str(self.path),
            "PYTHONPATH": str(ROOT),
        }
        return subprocess.run(
            [sys.executable, "-m", "hookd.cli", "coverage", source or self.source.name, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    async def run_cli(self, *args: str, source: str | None = None) -> tuple[int, str, str]:
        """``cmd_coverage``, the command's body, in this process (the real command
        costs seconds to start): its exit status, what it printed out and to stderr."""
        parsed = build_parser().parse_args(["coverage", source or self.source.name, *args])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = await cmd_coverage(parsed, Settings(database_url=self.url), self.sources)
        return code, out.getvalue(), err.getvalue()

    async def report(self, *args: str) -> tuple[int, dict[str, Any]]:
        code, out, err = await self.run_cli(*args, "--json")
        assert err == "", err
        return code, json.loads(out)

    async def code(self, *args: str) -> int:
        return (await self.run_cli(*args))[0]


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def holes(report: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [
        (i["from"], i["to"], [r["kind"] for r in i["reasons"]])
        for i in report["intervals"]
        if i["state"] == "hole"
    ]


@pytest.fixture
def reconciled(tmp_path: Path, pg_url: str) -> Callable[..., AsyncIterator[Setup]]:
    async def make(provider: str, api_url: str, extra: str = "") -> AsyncIterator[Setup]:
        token = STRIPE_KEY if provider == "stripe" else API_TOKEN
        hook = f'hook = "{HOOK}"' if provider == "github" else ""
        path = tmp_path / "hookd.toml"
        path.write_text(
            f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{SECRETS[provider]}"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
overlap_s = 60
{hook}
{extra}
"""
        )
        sources = parse_sources(path.read_text(), path, env={})
        source = sources.get(provider)
        assert source is not None
        clock = Clock()
        async with engine_of(pg_url) as engine, httpx.AsyncClient() as http:
            reconciler = Reconciler(engine, http, BodyCipher(""), clock=clock)
            yield Setup(path, sources, source, engine, reconciler, clock, pg_url)

    return make


async def ledger(engine: AsyncEngine) -> list[tuple[str, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT outcome, repaired FROM reconcile_coverage ORDER BY start_at, id")
        )
        return [(r[0], r[1]) for r in rows]


async def gauges(setup: Setup) -> dict[str, float]:
    families = await db_metrics.collect(setup.engine, setup.sources)
    wanted = ("hookd_source_unchecked_seconds", "hookd_reconcile_retention_margin_seconds")
    return {f.name: s.value for f in families if f.name in wanted for s in f.samples}


async def test_a_source_disabled_past_githubs_retention_leaves_a_hole_with_its_reasons(
    reconciled: Callable[..., AsyncIterator[Setup]],
) -> None:
    now = float(int(time.time()))
    t0 = now - 5 * DAY  # the first run, on the emulated clock
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    emulator.add_events(3, start=t0 - 900, step_s=60)
    emulator.add_events(4, start=now - 2 * DAY, step_s=3600)  # while disabled, still kept
    for delivery in emulator.deliveries:  # none reached hookd: GitHub says so
        delivery["status"], delivery["status_code"] = "failed to connect", 502
    async with serve_app(emulator.app) as api_url:
        extra = "lookback_s = 3600\ndisable_after_auth_failures = 1"
        async for setup in reconciled("github", api_url, extra):
            setup.clock.at = t0
            first = await setup.reconciler.run(setup.source)
            assert (first.status, first.repaired) == ("succeeded", 3)
            # An hour later the token is revoked: one failed run disables the source.
            emulator.token = "revoked"
            setup.clock.at = t0 + 3600
            failed = await setup.reconciler.run(setup.source)
            assert failed.status == "failed"

            # Four days on, still disabled: everything from the cursor is not checked.
            code, report = await setup.report()
            assert code == 1
            found = holes(report)
            assert found[0][0] == iso(t0 - 60)  # the cursor: where the last good run stopped
            assert found[-1][1] == report["until"]
            assert all("not_checked" in kinds for _, _, kinds in found)
            assert found[-1][2] == ["not_checked"]
            assert "authentication failures" in report["intervals"][-1]["reasons"][0]["detail"]
            unchecked = await gauges(setup)
            assert unchecked["hookd_reconcile_retention_margin_seconds"] == 0.0
            assert unchecked["hookd_source_unchecked_seconds"] == pytest.approx(3 * DAY - 60, abs=5)

            # Enabled again (at the real time): the next run checks what GitHub still
            # keeps; the rest of the disabled window is lost, and recorded so.
            emulator.token = API_TOKEN
            await service.enable(setup.engine, "github")
            setup.clock.at = None
            back = await setup.reconciler.run(setup.source)
            assert (back.status, back.repaired) == ("succeeded", 4)
            assert await ledger(setup.engine) == [
                ("repaired", 3),
                ("failed", 0),
                ("not_checked", 0),
                ("unrecoverable", 0),
                ("repaired", 4),
            ]

            code, report = await setup.report("--since", iso(t0 - 1800), "--until", "1h")
            assert code == 1
            assert report["intervals"][0]["state"] == "checked"
            assert report["intervals"][-1]["state"] == "checked"
            found = holes(report)
            assert found[0][0] == iso(t0 - 60)
            assert found[0][2] == ["unrecoverable", "beyond_retention", "not_checked", "failed"]
            assert found[-1][2] == ["unrecoverable", "not_checked"]
            assert found[-1][1] == report["intervals"][-1]["from"]
            # Either side of the hole is covered: exit 0.
            assert await setup.code("--since", iso(t0 - 1800), "--until", iso(t0 - 120)) == 0
            assert await setup.code("--since", "2d", "--until", "1h") == 0

            # The real command, once: the same answer, as a table.
            text = setup.coverage("--since", iso(t0 - 1800), "--until", "1h")
            assert text.returncode == 1, text.stderr
            assert text.stdout.startswith("github: ") and "3 holes" in text.stdout
            print("\n" + text.stdout)


async def test_a_stripe_source_down_for_31_days_records_the_lost_day_as_unrecoverable(
    reconciled: Callable[..., AsyncIterator[Setup]], pg_url: str
) -> None:
    now = float(int(time.time()))
    t0 = now - 31 * DAY - 3600
    emulator = StripeEmulator(STRIPE_KEY)
    emulator.add_events(3, start=t0 - 1200, step_s=60)
    emulator.add_events(5, start=now - 20 * DAY, step_s=DAY)
    async with serve_app(emulator.app) as api_url:
        async for setup in reconciled("stripe", api_url):
            emulator.now = setup.clock.time  # Stripe's 30 days follow the emulated clock
            setup.clock.at = t0
            first = await setup.reconciler.run(setup.source)
            assert (first.status, first.repaired) == ("succeeded", 3)
            setup.clock.at = None  # 31 days later: hookd was down all that time
            back = await setup.reconciler.run(setup.source)
            assert (back.status, back.repaired) == ("succeeded", 5)
            assert [o for o, _ in await ledger(setup.engine)] == [
                "repaired",
                "unrecoverable",
                "repaired",
            ]
            cursor_then = t0 - 300  # Stripe's settle window
            assert back.cursor_before == pytest.approx(cursor_then)

            code, report = await setup.report()  # from where the ledger begins
            assert code == 1
            lost = [h for h in holes(report) if "unrecoverable" in h[2]]
            assert [kinds for _, _, kinds in holes(report)] == [
                ["unrecoverable", "beyond_retention"],
                ["unrecoverable"],
                ["pending"],  # since the last run, up to now less settle_s
            ]
            assert lost[0][0] == iso(cursor_then)
            lost_until = datetime.fromisoformat(lost[-1][1]).timestamp()
            assert lost_until == pytest.approx(now - 30 * DAY + 60, abs=30)
            code, report = await setup.report("--since", "29d", "--until", "1h")
            assert (code, report["covered"], report["intervals"][0]["repaired"]) == (0, True, 5)
            # The default end is now less settle_s: the part after the last run is due.
            assert await setup.code("--since", "1d") == 3

            code, text, _ = await setup.run_cli()
            print("\n" + text)
            margins = await gauges(setup)
            assert margins["hookd_source_unchecked_seconds"] < 60
            assert margins["hookd_reconcile_retention_margin_seconds"] > 30 * DAY - 400

            async with running_app(
                setup.sources, pg_url, admin_token=TOKEN, reconcile_schedule=False
            ) as (_, client):
                answer = await client.get(
                    "/api/sources/stripe/coverage",
                    params={"since": iso(t0 - 600), "until": iso(now - 29 * DAY)},
                    headers=AUTH,
                )
                assert answer.status_code == 200, answer.text
                shown = answer.json()
                assert shown["covered"] is False
                assert [i["state"] for i in shown["intervals"]] == [
                    "checked",
                    "hole",
                    "hole",
                    "checked",
                ]
                assert shown["intervals"][1]["reasons"][0]["kind"] == "unrecoverable"
                bad = await client.get(
                    "/api/sources/stripe/coverage", params={"since": "soon"}, headers=AUTH
                )
                assert bad.status_code == 400 and "since" in bad.json()["detail"]
                await client.post("/admin/login", data={"token": TOKEN})
                page = await client.get("/admin/sources/stripe/coverage?since=32d")
                assert page.status_code == 200
                assert "unrecoverable" in page.text and "beyond stripe" in page.text


async def test_hookd_coverage_refuses_an_unknown_source_and_a_bad_time(
    reconciled: Callable[..., AsyncIterator[Setup]],
) -> None:
    async for setup in reconciled("stripe", "http://127.0.0.1:9"):
        code, out, err = await setup.run_cli(source="nope")
        assert (code, out) == (4, "")
        assert re.fullmatch(r"hookd: .*no source named 'nope'\n", err)
        bad = setup.coverage("--since", "last tuesday")
        assert bad.returncode == 2
        assert "Traceback" not in bad.stderr
        assert "since 'last tuesday' is not a time" in last_line(bad.stderr)


async def sources_cli(setup: Setup, *args: str) -> tuple[int, str]:
    """``hookd sources ARGS`` (disable, enable) as an operator runs it, in this process:
    its exit status and what it printed."""
    parsed = build_parser().parse_args(["sources", *args])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await cmd_sources(parsed, Settings(database_url=setup.url), setup.sources)
    return code, out.getvalue()


async def test_a_source_disabled_by_hand_leaves_a_not_checked_hole_once_enabled(
    reconciled: Callable[..., AsyncIterator[Setup]],
) -> None:
    """``hookd sources disable`` then ``enable``: the window the source went unchecked is
    in the ledger as the automatic stop leaves it, and ``hookd coverage`` says so."""
    now = float(int(time.time()))
    t0 = now - 4 * DAY  # the first run, on the emulated clock
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    emulator.add_events(3, start=t0 - 900, step_s=60)
    for delivery in emulator.deliveries:
        delivery["status"], delivery["status_code"] = "failed to connect", 502
    async with serve_app(emulator.app) as api_url:
        async for setup in reconciled("github", api_url, "lookback_s = 3600"):
            setup.clock.at = t0
            first = await setup.reconciler.run(setup.source)
            assert (first.status, first.repaired) == ("succeeded", 3)
            code, said = await sources_cli(setup, "disable", "github", "--reason", "key rotation")
            assert code == 0 and said.startswith("github: reconciliation disabled by cli"), said
            setup.clock.at = t0 + 3600
            off = await setup.reconciler.run(setup.source)
            assert off.status == "disabled"

            # While off: from the cursor on nothing is checked.
            code, report = await setup.report("--since", iso(t0 - 1800), "--until", "1h")
            assert code == 1
            assert holes(report)[-1][2] == ["not_checked"]
            assert await setup.code("--since", iso(t0 - 1800), "--until", iso(t0 - 120)) == 0

            assert await sources_cli(setup, "enable", "github") == (
                0,
                "github: reconciliation enabled\n",
            )
            assert await ledger(setup.engine) == [("repaired", 3), ("not_checked", 0)]
            async with setup.engine.connect() as conn:
                start, reason = (
                    await conn.execute(
                        sa.text(
                            "SELECT start_at, reason FROM reconcile_coverage "
                            "WHERE outcome = 'not_checked'"
                        )
                    )
                ).one()
            assert start.timestamp() == t0 - 60  # the cursor: where the last good run stopped
            assert reason == "reconciliation disabled: key rotation"

            # The next run checks what GitHub still keeps (3 days); the rest of the
            # window stays a hole, not checked and now beyond retention.
            setup.clock.at = None
            back = await setup.reconciler.run(setup.source)
            assert back.status == "succeeded"
            assert [o for o, _ in await ledger(setup.engine)] == [
                "repaired",
                "not_checked",
                "unrecoverable",
                "complete",
            ]
            code, report = await setup.report("--since", iso(t0 - 1800), "--until", "1h")
            assert code == 1
            found = holes(report)
            assert found[0][0] == iso(t0 - 60)
            assert all("not_checked" in kinds for _, _, kinds in found), found
            details = [
                r.get("detail") or ""
                for i in report["intervals"]
                if i["state"] == "hole"
                for r in i["reasons"]
            ]
            assert any("key rotation" in d for d in details), details
            assert await setup.code("--since", iso(t0 - 1800), "--until", iso(t0 - 120)) == 0
            assert await setup.code("--since", "2d", "--until", "1h") == 0
