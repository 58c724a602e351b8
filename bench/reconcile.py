"""Reconciliation repair rate against the provider emulators.

For each provider, an emulator holds ``--events`` events that no webhook ever
brought; one ``hookd reconcile`` pass (the same ``Reconciler`` the CLI runs)
repairs them into a fresh PostgreSQL database. Reports events repaired per
second and API calls per 1,000 events checked. The emulator runs in the same
process as the poller (loopback, no network latency): the figures bound what
hookd itself costs, not what a provider's latency allows.

With ``--bare``, a plain httpx client that stores nothing also pages through a fresh
emulator holding the same events, making the calls a repair needs (GitHub: the list
pages and one fetch per delivery; Stripe and Slack: the list pages), one after another:
the floor that the provider API (here: its emulator) sets.

    .venv/bin/python bench/reconcile.py [--events 10000] [--providers github,stripe,slack]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import httpx  # noqa: E402

from hookd.sources import parse_sources  # noqa: E402
from reconcile.poller import Reconciler  # noqa: E402
from store import db, migrate  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from tests.support.emulators import GitHubEmulator, SlackEmulator, StripeEmulator  # noqa: E402
from tests.support.http import serve_app  # noqa: E402

TOKEN = "bench-token"


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", sql], check=True, capture_output=True
    )


def config(provider: str, api_url: str) -> str:
    extra = {
        "github": 'hook = "repos/octo/hello/hooks/42"',
        "stripe": "",
        "slack": 'channels = ["C0HOOKD"]\nrequests_per_minute = 10000',
    }[provider]
    secret = "whsec_bench" if provider == "stripe" else "bench"
    return (
        f'[[sources]]\nname = "{provider}"\nprovider = "{provider}"\nsecrets = ["{secret}"]\n'
        f'[sources.reconcile]\napi_url = "{api_url}"\nallow_insecure = true\n'
        f'token = "{TOKEN}"\n{extra}\n'
    )


def database(provider: str, prefix: str = "hookd_bench_reconcile") -> tuple[str, str]:
    """A fresh, migrated database (migrations run their own event loop: call outside one)."""
    name = f"{prefix}_{provider}"
    psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(f"CREATE DATABASE {name}")
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    migrate.upgrade(url)
    return name, url


Emulator = GitHubEmulator | StripeEmulator | SlackEmulator


def emulator_for(provider: str, events: int) -> Emulator:
    emulator: Emulator
    if provider == "github":
        # GitHub allows 5,000 calls an hour per token: a fetch repair of more missing
        # deliveries than that spreads over runs. Lifted here to measure hookd itself.
        emulator = GitHubEmulator(TOKEN, rate_limit=1_000_000)
    elif provider == "stripe":
        emulator = StripeEmulator(TOKEN)
    else:
        emulator = SlackEmulator(TOKEN)
    emulator.add_events(events, start=time.time() - 2 * 3600, step_s=0.5)
    if isinstance(emulator, GitHubEmulator):
        # Missing: hookd never acknowledged them, and GitHub's record says so. A 2xx
        # there would make each a delivery acknowledged but not stored, which the
        # reconciler's audit records and logs as the incident it would be.
        for delivery in emulator.deliveries:
            delivery["status"], delivery["status_code"] = "Invalid HTTP Response: 502", 502
    return emulator


async def page_through(provider: str, client: httpx.AsyncClient, api_url: str) -> int:
    """The calls a repair of every event needs, storing nothing. Returns items seen."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    since = time.time() - 3 * 86400
    items = 0
    if provider == "github":
        base = f"{api_url}/repos/octo/hello/hooks/42/deliveries"
        url: str | None = f"{base}?per_page=100"
        while url is not None:
            response = await client.get(url, headers=auth)
            response.raise_for_status()
            for delivery in response.json():
                (await client.get(f"{base}/{delivery['id']}", headers=auth)).raise_for_status()
                items += 1
            match = re.search(r'<([^>]+)>;\s*rel="next"', response.headers.get("link", ""))
            url = match.group(1) if match else None
    elif provider == "stripe":
        params: dict[str, Any] = {"limit": 100, "created[gte]": int(since)}
        while True:
            response = await client.get(f"{api_url}/v1/events", params=params, headers=auth)
            response.raise_for_status()
            page = response.json()
            items += len(page["data"])
            if not page["has_more"] or not page["data"]:
                break
            params["starting_after"] = page["data"][-1]["id"]
    else:
        (await client.post(f"{api_url}/auth.test", headers=auth)).raise_for_status()
        form: dict[str, Any] = {"channel": "C0HOOKD", "oldest": f"{since:.6f}", "limit": 15}
        while True:
            response = await client.post(
                f"{api_url}/conversations.history", data=form, headers=auth
            )
            answer = response.json()
            if not answer.get("ok"):
                raise RuntimeError(f"Slack emulator: {answer}")
            items += len(answer.get("messages", []))
            cursor = (answer.get("response_metadata") or {}).get("next_cursor")
            if not answer.get("has_more") or not cursor:
                break
            form["cursor"] = cursor
    return items


async def bare(provider: str, events: int) -> dict[str, Any]:
    """A plain client paging through the same emulator: the floor the API sets."""
    emulator = emulator_for(provider, events)
    async with serve_app(emulator.app) as api_url, httpx.AsyncClient() as client:
        started = time.perf_counter()
        items = await page_through(provider, client, api_url)
        elapsed = time.perf_counter() - started
    return {
        "items": items,
        "seconds": round(elapsed, 2),
        "items_per_s": round(items / elapsed, 1),
        "api_calls": emulator.api_calls,
    }


async def one(provider: str, events: int, name: str, url: str) -> dict[str, Any]:
    emulator = emulator_for(provider, events)
    engine = db.create_engine(url)
    try:
        async with serve_app(emulator.app) as api_url, httpx.AsyncClient() as client:
            sources = parse_sources(config(provider, api_url), Path("bench.toml"), env={})
            source = sources.get(provider)
            assert source is not None
            reconciler = Reconciler(engine, client, BodyCipher(""))
            started = time.perf_counter()
            outcome = await reconciler.run(source)
            elapsed = time.perf_counter() - started
    finally:
        await engine.dispose()
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert outcome.status == "succeeded", outcome
    return {
        "provider": provider,
        "events": events,
        "repaired": outcome.repaired,
        "seconds": round(elapsed, 2),
        "repaired_per_s": round(outcome.repaired / elapsed, 1),
        "api_calls": emulator.api_calls,
        "api_calls_per_1000_checked": round(1000 * emulator.api_calls / outcome.checked, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--providers", default="github,stripe,slack")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "reconcile.json")
    parser.add_argument(
        "--bare", action="store_true", help="also page through with a client that stores nothing"
    )
    parser.add_argument(
        "--db-prefix", default="hookd_bench_reconcile", help="databases PREFIX_<provider>"
    )
    args = parser.parse_args()
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.db_prefix):
        parser.error("--db-prefix: use a plain lower-case name")
    results = []
    for p in args.providers.split(","):
        result = asyncio.run(one(p, args.events, *database(p, args.db_prefix)))
        if args.bare:
            result["bare"] = asyncio.run(bare(p, args.events))
            result["ratio_to_bare"] = round(
                result["repaired_per_s"] / result["bare"]["items_per_s"], 3
            )
        results.append(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(
        "| provider | events | repaired | seconds | repaired/s | API calls | calls per 1,000 "
        "| bare items/s | ratio to bare |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        b = r.get("bare") or {}
        print(
            f"| {r['provider']} | {r['events']} | {r['repaired']} | {r['seconds']} | "
            f"{r['repaired_per_s']} | {r['api_calls']} | {r['api_calls_per_1000_checked']} "
            f"| {b.get('items_per_s', '-')} | {r.get('ratio_to_bare', '-')} |"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the finally blocks have stopped servers, dropped databases
        print("interrupted", file=sys.stderr)
        sys.exit(130)
