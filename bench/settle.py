"""The settle window under load: reconciliation runs started every 0.5 s while 2,000
webhooks per provider are delivered, a tenth of them dropped (a third of those
delivered after all, once a run has stored them).

Each provider gets a fresh PostgreSQL database, its emulator on loopback and hookd
in-process (``tests/support/settle_scenario.py``, which the integration test runs with
300 events). Reports, per provider: events, dropped, late deliveries sent, runs
started, ``hookd_reconcile_missed_total`` and ``hookd_reconcile_late_total`` (and the
runs' own sums), rows stored, effects and handler calls, and the wall time. With
``--contrast`` the scenario also runs with ``settle_s = 0`` and webhooks up to
``--contrast-delay-s`` (3) late: what the runs count when they judge events whose
webhook is still on its way (a run's own latency hides delays shorter than it).

    .venv/bin/python bench/settle.py [--events 2000] [--providers github,stripe,slack]
        [--span-s 10] [--settle-s 5] [--max-delay-s 1] [--contrast] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from store import migrate  # noqa: E402
from tests.support import services, settle_scenario  # noqa: E402

COLUMNS = (
    "provider",
    "settle_s",
    "max_delay_s",
    "events",
    "dropped",
    "late_sent",
    "runs",
    "missed",
    "late",
    "stored",
    "effects",
    "calls",
    "slow",
    "seconds",
)


def one(plan: settle_scenario.Plan) -> dict[str, object]:
    name = services.create_database()
    url = services.sqlalchemy_url(name)
    try:
        migrate.upgrade(url)
        os.environ["HOOKD_DATABASE_URL"] = url  # the handlers write their effects there
        out = asyncio.run(settle_scenario.run(plan, url))
    finally:
        services.drop_database(name)
    return {
        "provider": plan.provider,
        "settle_s": plan.settle_s,
        "max_delay_s": plan.max_delay_s,
        "events": plan.count,
        "dropped": out.dropped,
        "late_sent": out.late_sent,
        "runs": out.runs_started,
        "missed": out.missed_metric,
        "late": out.late_metric,
        "missed_runs_sum": out.missed_sum,
        "late_runs_sum": out.late_sum,
        "stored": out.stored,
        "distinct": out.distinct,
        "by_reconcile": out.by_reconcile,
        "effects": out.effects,
        "calls": out.calls,
        "slow": out.slow_deliveries,
        "seconds": round(out.seconds, 1),
        "exact": out.missed_metric == out.dropped
        and out.late_metric == out.late_sent
        and out.stored == out.distinct == out.effects == out.calls == plan.count,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--providers", default="github,stripe,slack")
    parser.add_argument("--span-s", type=float, default=10.0, help="deliveries spread over")
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--max-delay-s", type=float, default=1.0, help="webhooks up to this late")
    parser.add_argument("--contrast", action="store_true", help="also with settle_s = 0")
    parser.add_argument("--contrast-delay-s", type=float, default=3.0)
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args()
    variants = [(args.settle_s, args.max_delay_s)]
    if args.contrast:
        variants.append((0.0, args.contrast_delay_s))
    rows = []
    for provider in args.providers.split(","):
        for settle, delay in variants:
            plan = settle_scenario.Plan(
                provider, count=args.events, span_s=args.span_s, settle_s=settle, max_delay_s=delay
            )
            row = one(plan)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS]
        print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
        for r in rows:
            print("  ".join(str(r[c]).ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    return 0 if all(r["exact"] for r in rows if r["settle_s"]) else 1


if __name__ == "__main__":
    sys.exit(main())
