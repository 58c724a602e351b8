"""Reconciliation repair rate against the provider emulators.

For each provider, an emulator holds ``--events`` events that no webhook ever
brought; one ``hookd reconcile`` pass (the same ``Reconciler`` the CLI runs)
repairs them into a fresh PostgreSQL database. Reports events repaired per
second and API calls per 1,000 events checked. The emulator runs in the same
process as the poller (loopback, no network latency): the figures bound what
hookd itself costs, not what a provider's latency allows.

    .venv/bin/python bench/reconcile.py [--events 10000] [--providers github,stripe,slack]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import httpx  # noqa: E402

from ingest.config import parse_sources  # noqa: E402
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
        f'[sources.reconcile]\napi_url = "{api_url}"\ntoken = "{TOKEN}"\n{extra}\n'
    )


def database(provider: str) -> tuple[str, str]:
    """A fresh, migrated database (migrations run their own event loop: call outside one)."""
    name = f"hookd_bench_reconcile_{provider}"
    psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(f"CREATE DATABASE {name}")
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    migrate.upgrade(url)
    return name, url


async def one(provider: str, events: int, name: str, url: str) -> dict[str, Any]:
    emulator: GitHubEmulator | StripeEmulator | SlackEmulator
    if provider == "github":
        # GitHub allows 5,000 calls an hour per token: a fetch repair of more missing
        # deliveries than that spreads over runs. Lifted here to measure hookd itself.
        emulator = GitHubEmulator(TOKEN, rate_limit=1_000_000)
    elif provider == "stripe":
        emulator = StripeEmulator(TOKEN)
    else:
        emulator = SlackEmulator(TOKEN)
    emulator.add_events(events, start=time.time() - 2 * 3600, step_s=0.5)
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
    args = parser.parse_args()
    results = [asyncio.run(one(p, args.events, *database(p))) for p in args.providers.split(",")]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print("| provider | events | repaired | seconds | repaired/s | API calls | calls per 1,000 |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['provider']} | {r['events']} | {r['repaired']} | {r['seconds']} | "
            f"{r['repaired_per_s']} | {r['api_calls']} | {r['api_calls_per_1000_checked']} |"
        )


if __name__ == "__main__":
    main()
