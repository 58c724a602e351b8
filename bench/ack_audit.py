"""The ack audit at the issue's scale: an emulated GitHub hook with ``--events``
deliveries sent to hookd (PostgreSQL), ``--drop`` of them failing on the way (the
deliveries list says 502) and ``--forged`` more that the list says hookd answered 202
but that never reached it. Then a dry run, a run, and a run whose overlap reads
everything again; each run's ``ack_violations`` and time, the ledger and the metric
are reported. Expected: dry run = forged (nothing recorded), run = forged, then 0;
``hookd_ack_violations_total`` = forged; dropped deliveries are misses, not violations.

    .venv/bin/python bench/ack_audit.py [--events 2000] [--drop 0.1] [--forged 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench.reconcile import database  # noqa: E402
from hookd.sources import parse_sources  # noqa: E402
from tests.support.asgi import running_app  # noqa: E402
from tests.support.constants import SECRETS  # noqa: E402
from tests.support.emulators import GitHubEmulator  # noqa: E402
from tests.support.http import serve_app  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

TOKEN = "bench-token"
ADMIN = {"Authorization": "Bearer bench-admin"}
HOOK = "repos/octo/hello/hooks/42"


def config(api_url: str) -> str:
    return (
        f'[[sources]]\nname = "github"\nprovider = "github"\nsecrets = ["{SECRETS["github"]}"]\n'
        f'public_url = "https://hookd.invalid/hooks/github"\n'
        f'[sources.reconcile]\napi_url = "{api_url}"\nallow_insecure = true\n'
        f'token = "{TOKEN}"\nhook = "{HOOK}"\n'
        "lookback_s = 86400\noverlap_s = 86400\n"
    )


async def measure(url: str, events: int, drop: float, forged: int) -> dict[str, Any]:
    rng = random.Random(18)
    github = GitHubEmulator(TOKEN, hook=HOOK, rate_limit=1_000_000)
    start = time.time() - 6 * 3600
    guids = github.add_events(events, start=start, step_s=5.0)
    dropped = set(rng.sample(guids, int(events * drop)))
    async with serve_app(github.app) as api_url:
        sources = parse_sources(config(api_url), Path("bench.toml"), env={})
        async with running_app(
            sources, url, admin_token="bench-admin", reconcile_schedule=False
        ) as (_, client):
            sent = time.monotonic()
            statuses = await github.send_webhooks(
                client, "http://hookd/hooks/github", SECRETS["github"], drop=dropped
            )
            send_s = time.monotonic() - sent
            for i in range(forged):
                delivery = github.add_delivery(start + 3 + 5.0 * i)
                delivery["status"], delivery["status_code"] = "OK", 202
            runs = []
            for dry_run in (True, False, False):
                began = time.monotonic()
                query = "?dry_run=true" if dry_run else ""
                started = await client.post(f"/api/sources/github/reconcile{query}", headers=ADMIN)
                path = f"/api/reconcile-runs/{started.json()['id']}"

                async def done(path: str = path) -> dict[str, Any]:
                    run: dict[str, Any] = (await client.get(path, headers=ADMIN)).json()
                    return run if run["done"] else {}

                run = await wait_for(done, timeout_s=600, interval_s=0.05)
                runs.append(
                    {
                        "dry_run": dry_run,
                        "status": run["status"],
                        "seconds": round(time.monotonic() - began, 2),
                        "checked": run["items_checked"],
                        "missing": run["items_missing"],
                        "ack_violations": run["ack_violations"],
                        "api_calls": run["api_calls"],
                        "registration": run["registration"],
                    }
                )
            metrics = (await client.get("/metrics", headers=ADMIN)).text
    found = re.search(r'^hookd_ack_violations_total\{source="github"\} (\S+)$', metrics, re.M)
    return {
        "events": events,
        "dropped": len(dropped),
        "forged": forged,
        "accepted": sum(1 for s in statuses.values() if s == 202),
        "send_seconds": round(send_s, 2),
        "runs": runs,
        "hookd_ack_violations_total": float(found.group(1)) if found else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--drop", type=float, default=0.1)
    parser.add_argument("--forged", type=int, default=50)
    args = parser.parse_args()
    name, url = database("github", prefix="hookd_bench_ack_audit")
    result = asyncio.run(measure(url, args.events, args.drop, args.forged))
    print(json.dumps({"database": name, **result}, indent=2))


if __name__ == "__main__":
    main()
