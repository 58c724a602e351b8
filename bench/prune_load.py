"""Prune under load: ingest and processing at a steady rate, with and without ``hookd prune``
working through a backlog of old events, alternating.

hookd: ``hookd serve`` on PostgreSQL with a private Redis (it only acknowledges), one
``hookd worker`` running the no-op handler ``bench/handlers.py:noop``; neither prunes
on its own (``HOOKD_PRUNE_EVERY_S=0``). The load is ``bench/soak.py``'s open-loop
generator (signed GitHub webhooks, request *k* due at start + *k*/rate, 64 keep-alive
connections, every delivery id new).

    .venv/bin/python bench/prune_load.py                    # measure the max, then 2 rounds
    .venv/bin/python bench/prune_load.py --rate 600 --seconds 60 --rounds 2

1. **Rate.** Unless ``--rate`` is given: a wrk run (worker running) measures the receiver's
   maximum, and the burst's end-to-end rate (stored and processed); the rounds run at
   ``--fraction`` of the lower, at most ``--cap`` (2,000/s: the issue's rate).
2. **Each round**, in this order: a backlog of old events is stored (``--backlog-days``
   days from 8 to 7 + N days ago, ``--per-day`` events each, 99% processed with a ledger
   row, 1% dead; every other day past 30 days also holds a few events of a source that
   is not configured, so that its day can be neither dropped nor compacted and its
   processed events are deleted row by row), then the load runs ``--seconds`` without
   prune ("baseline"), then again with ``hookd prune`` started with it ("prune"), which
   compacts the days past ``keep_events_days`` (their dead events stay), deletes row by
   row, strips bodies past ``keep_body_days``, and so on.
3. **Per phase:** answers by status (5xx counted apart), socket errors, ack latency from
   write p50/p99 and p99 from due, requests/s; then, once the worker has drained the
   backlog, by key (the phase's delivery ids): keys stored in ``event_keys`` against the
   2xx answers (lost), rows per key (doubled), processed once with one ledger row, and
   processing lag p50/p99. For "prune": how long ``hookd prune`` ran and what it removed,
   and the latency of the requests due while it ran.

Exit status 1 on a 5xx, a lost or doubled event, an event not processed exactly once, or
a failed prune. The latency ratio (prune ÷ baseline p99, target at most 1.5) is reported,
not judged: on a shared machine it says as much about the neighbours as about hookd.
Results: ``bench/results/prune_load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(REPO_DIR))

import sqlalchemy as sa  # noqa: E402

from store import db  # noqa: E402
from store.ids import id_floor  # noqa: E402
from store.retention import partition_create  # noqa: E402


def load_soak() -> ModuleType:
    """``bench/soak.py`` (its generator, processes and checks) under a private name."""
    spec = importlib.util.spec_from_file_location("hookd_bench_soak", BENCH_DIR / "soak.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


soak = load_soak()
ib = soak.ib
LEGACY = "retired"  # a source no longer configured: its days stay, pruned row by row


# --------------------------------------------------------------------------- backlog


async def store_backlog(url: str, days: range, per_day: int, round_no: int) -> int:
    """Old events of ``days`` (days ago), each day in its own partition, with their keys
    and ledger rows, as hookd would have left them; the rows stored."""
    engine = db.create_engine(url)
    total = 0
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        for ago in days:
            start = today - timedelta(days=ago)
            await partition_create.create_day(engine, start.date())
            prefix = id_floor(int((start + timedelta(hours=1)).timestamp() * 1000))[:10]
            groups = [(ib.SOURCE, per_day)]
            if ago > 30 and ago % 2:
                groups.append((LEGACY, 10))
            for source, n in groups:
                params = {
                    # Unique per round and source: the day's time, then these two.
                    "p": f"{prefix}{round_no % 10}{0 if source == ib.SOURCE else 9}",
                    "src": source,
                    "k": f"old-r{round_no}-{ago}-",
                    "t": start + timedelta(hours=1),
                    "n": n,
                }
                async with engine.begin() as conn:
                    await conn.execute(sa.text(BACKLOG_KEYS), params)
                    await conn.execute(sa.text(BACKLOG_EVENTS), params)
                    await conn.execute(sa.text(BACKLOG_LEDGER), params)
                total += n
    finally:
        await engine.dispose()
    return total


_IDS = "CAST(:p AS text) || lpad(g::text, 14, '0')"
_WHEN = "CAST(:t AS timestamptz) + g * interval '1 millisecond'"
BACKLOG_KEYS = (
    "INSERT INTO event_keys (source, dedupe_key, event_id, received_at) "
    f"SELECT :src, :k || g, {_IDS}, {_WHEN} FROM generate_series(1, :n) AS g"
)
BACKLOG_EVENTS = (
    "INSERT INTO events (id, source, provider, dedupe_key, type, origin, received_at, "
    "verified_with, headers, body, body_encrypted, status, attempts, next_attempt_at, "
    "last_error, processed_at, created_at, updated_at) "
    f"SELECT {_IDS}, :src, 'github', :k || g, 'issues.opened', 'webhook', {_WHEN}, "
    "'sha256', '{}', convert_to(repeat(md5(g::text), 32), 'UTF8'), false, "
    "CASE WHEN g % 100 = 0 THEN 'dead' ELSE 'processed' END, 1, "
    f"{_WHEN}, CASE WHEN g % 100 = 0 THEN 'bench: failed' END, "
    f"CASE WHEN g % 100 <> 0 THEN {_WHEN} END, {_WHEN}, {_WHEN} "
    "FROM generate_series(1, :n) AS g"
)
BACKLOG_LEDGER = (
    "INSERT INTO handler_runs (event_id, handler, finished_at) "
    f"SELECT {_IDS}, 'bench.handlers:noop', {_WHEN} FROM generate_series(1, :n) AS g "
    "WHERE g % 100 <> 0"
)


# --------------------------------------------------------------------------- one phase


def latency(windows: list[Any], first: int = 0, last: int | None = None) -> dict[str, Any]:
    """Ack latency of the answers filed in windows ``[first, last)``."""
    chosen = windows[first:last]
    send = sorted(x for w in chosen for x in w.from_send)
    due = sorted(x for w in chosen for x in w.from_due)
    return {
        "requests": len(send),
        "p50_ms": soak.ms(send, 50),
        "p99_ms": soak.ms(send, 99),
        "p99_from_due_ms": soak.ms(due, 99),
        "max_ms": soak.ms(send, 100),
    }


def by_key(args: argparse.Namespace, nonce: str) -> dict[str, Any]:
    """The phase's deliveries, by key: stored once, processed once, and their lag."""
    p = soak.pg_args(args)
    like = f"source = '{ib.SOURCE}' AND dedupe_key LIKE '{nonce}-%'"
    keys = int(ib.psql(p, f"SELECT count(*) FROM event_keys WHERE {like}", db=args.pg_db))
    row = ib.psql(
        p,
        "SELECT count(*) || '|' || count(DISTINCT dedupe_key) || '|' || "
        "count(*) FILTER (WHERE status = 'processed' AND attempts = 1) || '|' || "
        "(SELECT count(*) FROM handler_runs h JOIN events e ON e.id = h.event_id "
        f"WHERE e.{like}) || '|' || "
        "coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM "
        "processed_at - received_at)), 0) || '|' || coalesce(percentile_cont(0.99) WITHIN "
        "GROUP (ORDER BY extract(epoch FROM processed_at - received_at)), 0) "
        f"FROM events WHERE {like}",
        db=args.pg_db,
    )
    rows, distinct, once, ledger, p50, p99 = row.split("|")
    return {
        "keys": keys,
        "rows": int(rows),
        "distinct_keys_in_rows": int(distinct),
        "processed_once": int(once),
        "ledger_rows": int(ledger),
        "lag_p50_ms": round(float(p50) * 1000, 1),
        "lag_p99_ms": round(float(p99) * 1000, 1),
    }


def run_phase(
    args: argparse.Namespace,
    env: dict[str, str],
    work: Path,
    server: Any,
    worker: subprocess.Popen[bytes],
    requests: list[tuple[bytes, bytes]],
    nonce: str,
    *,
    prune: bool,
) -> dict[str, Any]:
    label = "prune" if prune else "baseline"
    pruner = None
    began = time.monotonic()
    if prune:
        log = (work / f"prune-{nonce}.log").open("wb")
        pruner = subprocess.Popen(
            [sys.executable, "-m", "hookd.cli", "prune", "--json"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    probe = soak.Probe(server.proc.pid, worker.pid, args.pg_db, soak.pg_dsn(args))
    gen, samples = soak.run_soak(server.port, requests, nonce, probe, args, label)
    result: dict[str, Any] = {"phase": label, "nonce": nonce}
    statuses: dict[int, int] = {}
    for w in gen.windows:
        for k, v in w.statuses.items():
            statuses[k] = statuses.get(k, 0) + v
    result |= {
        "rate_asked": args.rate,
        "rate_got": round(sum(statuses.values()) / args.seconds, 1),
        "statuses": statuses,
        "5xx": sum(v for k, v in statuses.items() if k >= 500),
        "non_2xx": sum(v for k, v in statuses.items() if not 200 <= k < 300),
        "socket_errors": dict(gen.socket_errors),
        "ack": latency(gen.windows),
        "cpu_other_pct_mean": round(
            sum(s["cpu_pct"]["other"] for s in samples) / max(1, len(samples)), 1
        ),
    }
    if pruner is not None:
        out, _ = pruner.communicate(timeout=args.prune_timeout)
        ran_s = time.monotonic() - began
        lines = [json.loads(ln) for ln in out.decode().splitlines() if ln.startswith("{")]
        result["prune"] = {
            "exit_code": pruner.returncode,
            "seconds": round(ran_s, 1),
            "removed": [ln for ln in lines if "source" in ln],
            "partitions": next((ln for ln in lines if "partitions_dropped" in ln), None),
        }
        # The windows that ended while prune still ran: its effect, undiluted.
        during = min(len(gen.windows), int(ran_s // args.interval))
        result["ack_while_pruning"] = latency(gen.windows, 0, during) if during else None
    drained, left = soak.wait_drained(args, worker, args.drain_timeout)
    result["drain_s"] = round(drained, 1)
    result["left_unprocessed"] = left
    accepted = sum(v for k, v in statuses.items() if 200 <= k < 300)
    keys = by_key(args, nonce)
    lost_requests = sum(gen.socket_errors.values())
    keys["accepted_2xx"] = accepted
    # A request whose answer was lost (a socket error) may still have been stored.
    keys["lost"] = max(0, accepted - keys["keys"])
    keys["doubled"] = keys["rows"] - keys["distinct_keys_in_rows"]
    keys["ok"] = (
        accepted <= keys["keys"] <= accepted + lost_requests
        and keys["rows"] == keys["keys"]
        and keys["doubled"] == 0
        and keys["processed_once"] == keys["rows"]
        and keys["ledger_rows"] == keys["rows"]
    )
    result["by_key"] = keys
    print(f"[{label}] {json.dumps({k: v for k, v in result.items() if k != 'nonce'})}", flush=True)
    return result


# --------------------------------------------------------------------------- the run


def measure_rate(
    args: argparse.Namespace, server: Any, worker: subprocess.Popen[bytes], pool: Path
) -> dict[str, Any]:
    nonces = ib.Nonces()
    common = {"connections": 64, "threads": 1, "timeout_s": args.timeout}
    ib.run_wrk(server, pool, nonces.next(), duration=2, **common)
    soak.wait_drained(args, worker, args.drain_timeout)
    began = time.time()
    run = ib.run_wrk(server, pool, nonces.next(), duration=args.measure, **common)
    run.pop("wrk_text", None)
    drained, left = soak.wait_drained(args, worker, args.drain_timeout)
    if left:
        raise RuntimeError(f"{left} events of the max run not processed after {drained:.0f} s")
    e2e = soak.end_to_end_rate(args, began)
    bound = min(run["rps"], e2e["events_per_s"] or run["rps"])
    return {"ack_rps": run["rps"], "end_to_end": e2e, "max_rps": bound}


def run(args: argparse.Namespace, work: Path, stack: contextlib.ExitStack) -> dict[str, Any]:
    p = soak.pg_args(args)
    ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)")
    ib.psql(p, f"CREATE DATABASE {args.pg_db}")
    if not args.keep:
        stack.callback(lambda: ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)"))
    redis = soak.start_redis()
    stack.callback(soak.stop_proc, redis.proc)
    (work / "sources.toml").write_text(soak.SOURCES_TOML, encoding="utf-8")
    url = f"postgresql+asyncpg://{args.pg_user}@{args.pg_host}:{args.pg_port}/{args.pg_db}"
    env = ib.clean_env(
        HOOKD_CONFIG=str(work / "sources.toml"),
        HOOKD_DATABASE_URL=url,
        HOOKD_REDIS_URL=redis.url,
        HOOKD_LOG_LEVEL="WARNING",
        HOOKD_RECONCILE_SCHEDULE="false",
        HOOKD_WORKER_METRICS_PORT="0",
        HOOKD_PRUNE_EVERY_S="0",
        PYTHONPATH=str(REPO_DIR),
    )
    cmd = [sys.executable, "-m", "hookd.cli", "db", "upgrade"]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"hookd db upgrade failed:\n{done.stdout}{done.stderr}")
    server = ib.start_server("hookd", work, env)
    server.pg_db = args.pg_db
    stack.callback(ib.stop_server, server)
    with (work / "worker.log").open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "hookd.cli", "worker"],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    stack.callback(soak.stop_proc, worker)
    pool = work / "pool.tsv"
    ib.write_pool(pool, 1024)
    result: dict[str, Any] = {}
    if args.rate is None:
        result["max_measurement"] = measure_rate(args, server, worker, pool)
        args.rate = round(min(args.cap, args.fraction * result["max_measurement"]["max_rps"]), 1)
        print(f"max: {json.dumps(result['max_measurement'])}; rate {args.rate}/s", flush=True)
    requests = ib.build_requests(ib.read_pool(pool), server.port)
    nonces = ib.Nonces()
    phases = []
    for n in range(args.rounds):
        began = time.monotonic()
        stored = asyncio.run(store_backlog(url, range(8, 8 + args.backlog_days), args.per_day, n))
        print(f"round {n + 1}: backlog of {stored} events in {time.monotonic() - began:.0f} s")
        ib.psql(p, "ANALYZE", db=args.pg_db)
        for prune in (False, True):
            phases.append(
                run_phase(args, env, work, server, worker, requests, nonces.next(), prune=prune)
            )
    result["phases"] = phases
    result["server_exit_code"] = ib.stop_server(server)
    result["worker_exit_code"] = soak.stop_proc(worker)
    result["server_log_problems"] = soak.log_problems(server.log)
    result["worker_log_problems"] = soak.log_problems(work / "worker.log")
    return result


def verdict(result: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    phases = result.get("phases", [])
    errors = []
    for ph in phases:
        name = f"{ph['phase']} ({ph['nonce']})"
        if ph["5xx"]:
            errors.append(f"{name}: {ph['5xx']} answers 5xx")
        if ph["non_2xx"] - ph["5xx"]:
            errors.append(f"{name}: {ph['non_2xx'] - ph['5xx']} other non-2xx answers")
        if not ph["by_key"]["ok"]:
            errors.append(f"{name}: by key {ph['by_key']}")
        if ph.get("prune", {}).get("exit_code") not in (None, 0):
            errors.append(f"{name}: hookd prune exited {ph['prune']['exit_code']}")
    for key in ("server_log_problems", "worker_log_problems"):
        if result.get(key):
            errors.append(f"{key.replace('_', ' ')}: {result[key][0][:200]}")

    def pooled(name: str, key: str) -> float | None:
        values = [ph["ack"][key] for ph in phases if ph["phase"] == name and ph["ack"][key]]
        return round(sum(values) / len(values), 3) if values else None

    summary: dict[str, Any] = {"rate": phases[0]["rate_asked"] if phases else None}
    for key in ("p50_ms", "p99_ms", "p99_from_due_ms"):
        base, pruned = pooled("baseline", key), pooled("prune", key)
        summary[key] = {
            "baseline": base,
            "prune": pruned,
            "ratio": round(pruned / base, 2) if base and pruned else None,
        }
    summary["5xx"] = sum(ph["5xx"] for ph in phases)
    summary["lost"] = sum(ph["by_key"]["lost"] for ph in phases)
    summary["doubled"] = sum(ph["by_key"]["doubled"] for ph in phases)
    return summary, errors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, help="events/s; default: measured (see --fraction)")
    p.add_argument("--fraction", type=float, default=0.6, help="of the measured max (0.6)")
    p.add_argument("--cap", type=float, default=2000.0, help="highest rate used (2000/s)")
    p.add_argument("--seconds", type=float, default=60.0, help="per phase (60)")
    p.add_argument("--rounds", type=int, default=2, help="baseline + prune pairs (2)")
    p.add_argument("--backlog-days", type=int, default=53, help="days 8..7+N ago (53)")
    p.add_argument("--per-day", type=int, default=10_000, help="backlog events a day")
    p.add_argument("--interval", type=float, default=5.0, help="seconds per window (5)")
    p.add_argument("--measure", type=float, default=10.0, help="seconds of the max run (10)")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--timeout", type=float, default=10.0, help="request timeout, s (10)")
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--prune-timeout", type=float, default=1800.0)
    p.add_argument("--pg-host", default="127.0.0.1")
    p.add_argument("--pg-port", type=int, default=5432)
    p.add_argument("--pg-user", default="postgres")
    p.add_argument("--pg-db", default="hookd_bench_prune_load", help="dropped and made afresh")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "prune_load.json")
    p.add_argument("--keep", action="store_true", help="keep the run folder and the database")
    args = p.parse_args(argv)
    args.seconds = max(1, round(args.seconds / args.interval)) * args.interval
    if not args.pg_host.startswith("127.") and args.pg_host not in ("localhost", "::1"):
        p.error("--pg-host: this benchmark only talks to the loopback interface")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for tool in ("psql", "redis-server", *(("wrk",) if args.rate is None else ())):
        if shutil.which(tool) is None:
            print(f"{tool} not found", file=sys.stderr)
            return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = BENCH_DIR / "results" / f"prune-load-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k != "out"}
    print(f"prune under load: {config}", flush=True)
    with soak.sigterm_as_interrupt():
        try:
            with contextlib.ExitStack() as stack:
                result = run(args, work, stack)
        except KeyboardInterrupt:
            print("interrupted: stopped the servers, dropped the database", file=sys.stderr)
            return 130
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    summary, errors = verdict(result)
    report = {
        "when": stamp,
        "config": config | {"rate": args.rate},
        "environment": ib.environment(),
        "summary": summary,
        "errors": errors,
        **result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    for line in errors:
        print(f"ERROR: {line}")
    print(f"results: {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
