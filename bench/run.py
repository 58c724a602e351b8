"""All of hookd's benchmarks in one command, each next to a bare baseline, and the report.

    .venv/bin/python bench/run.py                  # everything: about 55-60 minutes
    .venv/bin/python bench/run.py --quick          # smoke test: under 9 minutes
    .venv/bin/python bench/run.py --only S1,S3     # some scenarios (the others' last
                                                   # results stay in the report)
    .venv/bin/python bench/run.py --report-only    # plots and docs from the last results

Scenarios, each measured together with a baseline that does nothing, in the same run,
with the same load and server settings:

S1  signed GitHub webhooks acknowledged by hookd on PostgreSQL (``bench/ingest.py``), in
    two deployments: "ingest only" (``HOOKD_REDIS_URL`` set, no worker: the receiver only
    stores) and "serve alone" (no Redis: serve also processes, in its processor
    process, HOOKD_PROCESSORS=auto). Max
    req/s with wrk, then p99 latency at a fixed 70% of hookd's max. Baseline: the bare
    Starlette app (``bench/bare_app.py``).
S2  the same on SQLite (ingest only; serve alone, the Quickstart default).
S3  end to end on PostgreSQL + Redis + ``hookd worker`` + no-op handler
    (``bench/pipeline.py``): events/s processed, lag at 50% of that. Baseline: the bare
    app's req/s with the same sending client.
S4  reconciliation repairing 10,000 missing events from the emulators
    (``bench/reconcile.py``): repaired/s and API calls. Baseline: a plain client paging
    through the same emulator, storing nothing.
S5  soak (``bench/soak.py``): hookd + one worker at 50% of a measured max for 10 minutes;
    RSS and latency over time. Baseline: the bare app at the same rate.
S6  the Quickstart default sustained (``bench/soak.py --deployment quickstart --fraction
    1.0``): ``hookd serve`` alone on SQLite, no Redis, no worker, at its max rate for 10
    minutes (quick: 1); every event processed once, backlog bounded, RSS flat. Baseline:
    the bare app at the same rate.
S7  draining a backlog (``bench/backlog.py``): 100,000 events (quick: 20,000) stored with
    no receiver running, then two ``hookd worker``s + Redis + no-op handler drain them;
    events/s from the workers' launch to the last processed, CPU and transactions per
    event, every event processed once. No baseline: the target is a rate.

Writes ``bench/results/s*_*.json`` (raw numbers; gitignored), ``docs/img/bench_*.png`` and
``docs/benchmarks.md``. Text between ``<!-- analysis -->`` and ``<!-- /analysis -->`` in
that page is written by hand and kept.

This file is the command; the work is in ``bench/scenarios.py`` (running the scripts),
``bench/verdicts.py`` (ratios and targets), ``bench/tables.py`` and ``bench/report.py``
(the page) and ``bench/plots.py`` (the charts).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

# Run as a script, bench/ is first on sys.path, where bench/ingest.py and bench/reconcile.py
# would stand in for hookd's packages of those names: the repository root goes first, so
# that ``bench.*`` resolves as it does under ``python -m bench.run``.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PAGE, RAW, REPO_DIR, SCENARIOS
from bench.report import summary, write_report
from bench.scenarios import Terminated, machine, preflight, raise_terminated, steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run hookd's benchmarks (S1-S7), each next to a bare baseline where "
        "there is one, and "
        "write docs/benchmarks.md and docs/img/bench_*.png."
    )
    p.add_argument("--quick", action="store_true", help="smoke test: under 9 minutes")
    p.add_argument("--only", help="comma-separated scenarios, e.g. S1,S3 (default: all)")
    p.add_argument(
        "--report-only", action="store_true", help="no runs: the page and plots from results"
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="ingest rounds per target, least disturbed kept"
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        help="ingest and S7: wait up to this many seconds for a quiet machine (default 60; "
        "quick 2)",
    )
    p.add_argument("--soak-minutes", type=float, help="S5 and S6 soak length (default 10; quick 1)")
    args = p.parse_args(argv)
    wanted = [s.strip().upper() for s in (args.only or ",".join(SCENARIOS)).split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        p.error(f"--only: unknown {unknown}; choose from {', '.join(SCENARIOS)}")
    args.wanted = [s for s in SCENARIOS if s in wanted]
    if args.wait_quiet is None:
        args.wait_quiet = 2.0 if args.quick else 60.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        results, _ = write_report()
        print(summary(results, list(results)))
        print(f"\nwrote {PAGE.relative_to(REPO_DIR)} and docs/img/bench_*.png")
        return 0
    problems = preflight(args.wanted)
    if problems:
        for line in problems:
            print(f"cannot run: {line}", file=sys.stderr)
        return 2
    info = machine()
    print(f"hookd benchmarks {','.join(args.wanted)}{' (quick)' if args.quick else ''}", flush=True)
    print(f"machine: {info}", flush=True)
    RAW.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    took: dict[str, float] = {}
    ok = True
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    # Started in the background by a non-interactive shell, this process (and so every
    # script it starts) would inherit SIGINT ignored, and the one SIGINT run_step sends
    # to clean up would do nothing. A handler of our own is reset to the default in the
    # scripts at exec, so they take Ctrl-C as KeyboardInterrupt again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for name, step in steps(args, info):
            t0 = time.monotonic()
            ok = step() and ok
            took[name] = round(time.monotonic() - t0, 1)
            print(f"--- {name} done in {took[name]:.0f} s", flush=True)
    except (KeyboardInterrupt, Terminated):
        print("\ninterrupted: the running scenario has cleaned up", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    results, _ = write_report()
    print(summary(results, args.wanted))
    total = time.monotonic() - started
    print(
        f"\ntook {total / 60:.1f} min ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
        + ")"
    )
    print(f"wrote bench/results/s*_*.json, {PAGE.relative_to(REPO_DIR)}, docs/img/bench_*.png")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
