"""S7: draining a backlog. ``--events`` stored events, no receiver, ``--workers`` ``hookd
worker`` processes on PostgreSQL + a private Redis, the no-op handler.

What it isolates: the rate at which workers catch up after an outage (workers down, a
deploy, a burst the workers could not follow), with no receiver running. S3
(``bench/pipeline.py``) stores its events through the receiver and measures from the
first to the last ``processed_at``; here the receiver is out of the picture and the
clock starts when the workers are launched, so their start-up counts, as it does when a
backlog is really drained.

1. A fresh PostgreSQL database (``--pg-db``, dropped at the end and on Ctrl-C), ``hookd
   db upgrade``.
2. ``--events`` signed GitHub ``issues.opened`` deliveries (S1's bodies, about 1 KB)
   checked, verified and enveloped by hookd's GitHub provider, then stored through the
   receiver's own insert (``store.intake.fastpath``), in batches: exactly the rows the receiver
   would have stored, without HTTP.
3. A private Redis and ``--workers`` ``hookd worker`` processes (the no-op handler
   ``bench/handlers.py:noop``), launched together; their start-up sweep finds the
   backlog (nothing was enqueued in Redis: no receiver ran).
4. Every ``--interval`` s until nothing is left to process: the events processed so far
   (their ledger rows), and the CPU of the workers, PostgreSQL (the backends of this
   database and the shared writers, less this script's own probe), Redis, this script
   and everything else on the machine.
5. The workers stopped, the database's ``pg_stat_database`` counters are compared with
   those before the launch (transactions committed, rows inserted, updated, deleted),
   less the probe's own transactions.
6. Checks: every event processed exactly once (``attempts = 1``, one ``handler_runs``
   row each, none dead), the workers exited 0 and logged nothing at WARNING or above.

Rates: events / (last ``processed_at`` - the launch), the target's figure; and events /
(last - first ``processed_at``), S3's way, without start-up. CPU per event is given over
the whole drain (start-up included) and over the steady part (between 10% and 90% of
the events processed).

    .venv/bin/python bench/backlog.py                    # 100,000 events, 2 workers
    .venv/bin/python bench/backlog.py --quick            # 20,000 events
    .venv/bin/python bench/backlog.py --events 5000 --workers 1 --keep

Exit status 1 when a check fails (or the drain times out), 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
# hookd's own packages (the provider, the receiver's insert) from this checkout; run as a
# script, bench/ is first on sys.path, where bench/ingest.py would shadow hookd's ingest.
sys.path.insert(0, str(REPO_DIR))

from hookd.providers.base import HeaderMap  # noqa: E402
from hookd.providers.github import PROVIDER as GITHUB  # noqa: E402
from hookd.providers.github import github_headers  # noqa: E402
from hookd.runtime.sqlite_writer import inserter_for  # noqa: E402
from store.crypto import BodyCipher  # noqa: E402
from store.intake.events import NewEvent  # noqa: E402
from store.status import EventOrigin  # noqa: E402


def load_soak() -> ModuleType:
    """``bench/soak.py`` (and through it ``bench/ingest.py`` as ``soak.ib``), under names
    that cannot shadow hookd's packages: its Redis, process, CPU and environment helpers."""
    spec = importlib.util.spec_from_file_location("hookd_bench_soak", BENCH_DIR / "soak.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


soak = load_soak()
ib = soak.ib

NOT_DONE = soak.NOT_DONE
BODIES = 1024  # distinct bodies, cycled (each event has its own delivery id)
STORE_BATCH = 1000
STORE_CONCURRENCY = 2
STEADY = (0.1, 0.9)  # the steady part of the drain: from 10% to 90% of events processed
CPU_GROUPS = ("workers", "postgres", "redis", "bench", "other")
PG_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted")


# --------------------------------------------------------------------------- storing


def bodies(count: int) -> list[bytes]:
    """S1's ``issues.opened`` bodies (``bench/ingest.py``), about 1 KB each."""
    rng = random.Random(1)
    return [
        json.dumps(ib.issue_payload(seq, rng), separators=(", ", ": ")).encode()
        for seq in range(1, count + 1)
    ]


def new_event(body: bytes, now: float) -> NewEvent:
    """One delivery as the receiver stores it: GitHub's headers checked and verified,
    the envelope (dedupe key, type, kept headers) from hookd's GitHub provider."""
    headers: HeaderMap = {
        k.lower(): [v]
        for k, v in github_headers(ib.SECRET, body, "issues", str(uuid.uuid4())).items()
    }
    verified = GITHUB.verify(
        GITHUB.check_headers(headers, now, 300), body, [GITHUB.parse_secret(ib.SECRET)]
    )
    env = GITHUB.envelope(headers, body, verified)
    return NewEvent(
        source=ib.SOURCE,
        provider=GITHUB.name,
        dedupe_key=env.dedupe_key,
        type=env.type,
        origin=EventOrigin.WEBHOOK,
        received_at=datetime.fromtimestamp(now, UTC),
        occurred_at=env.occurred_at,
        verified_with=verified.describe(),
        headers=env.headers,
        body=body,
    )


async def store_events(url: str, events: int, batch: int) -> dict[str, Any]:
    """``events`` events through the receiver's insert, ``STORE_CONCURRENCY`` batches at a
    time (as its committers would); each batch is one statement, its own transaction."""
    pool = bodies(BODIES)
    inserter = inserter_for(url, BodyCipher(""), committers=STORE_CONCURRENCY, timeout_s=60)
    starts = iter(range(0, events, batch))
    created = 0

    async def committer() -> None:
        nonlocal created
        for start in starts:
            now = time.time()
            chunk = [
                new_event(pool[i % BODIES], now) for i in range(start, min(events, start + batch))
            ]
            stored = await inserter.insert(chunk)
            created += sum(s.created for s in stored)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(committer() for _ in range(STORE_CONCURRENCY)))
    finally:
        await inserter.close()
    seconds = time.perf_counter() - started
    return {
        "events": created,
        "batch": batch,
        "seconds": round(seconds, 2),
        "events_per_s": round(created / seconds, 1),
    }


# --------------------------------------------------------------------------- the database


def pg_dsn(args: argparse.Namespace) -> str:
    return f"postgresql://{args.pg_user}@{args.pg_host}:{args.pg_port}/{args.pg_db}"


async def pg_stats(args: argparse.Namespace, *, settle: bool = False) -> dict[str, int]:
    """This database's ``pg_stat_database`` counters and its tables' autovacuum runs, in
    one statement on a connection of its own (so one transaction, counted when it
    closes). ``settle``: read until two reads 0.3 s apart agree, for backends that flush
    their counters as they exit."""
    import asyncpg

    columns = ", ".join(f"d.{c}" for c in PG_COUNTERS)
    sql = (
        f"SELECT {columns}, "
        "(SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables) "
        "AS autovacuum_runs, "
        "(SELECT coalesce(sum(autoanalyze_count), 0) FROM pg_stat_user_tables) "
        "AS autoanalyze_runs "
        "FROM pg_stat_database AS d WHERE d.datname = $1"
    )
    conn = await asyncpg.connect(pg_dsn(args))
    try:
        row = dict(await conn.fetchrow(sql, args.pg_db))
        deadline = time.monotonic() + 10
        while settle and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            again = dict(await conn.fetchrow(sql, args.pg_db))
            if again == row:
                break
            row = again
    finally:
        await conn.close()
    return {k: int(v) for k, v in row.items()}


def per_event(
    before: dict[str, int], after: dict[str, int], probe_xacts: int, events: int
) -> dict[str, Any]:
    """The counters' growth over the drain, in all and per event; the probe's own
    transactions (its polls, and the first stats read's) left out."""
    delta = {k: after[k] - before[k] for k in PG_COUNTERS}
    delta["xact_commit"] -= probe_xacts
    out: dict[str, Any] = {"delta": delta}
    out["per_event"] = {k: round(v / events, 3) for k, v in delta.items()} if events else {}
    out["autovacuum_runs"] = after["autovacuum_runs"] - before["autovacuum_runs"]
    out["autoanalyze_runs"] = after["autoanalyze_runs"] - before["autoanalyze_runs"]
    out["probe_xacts_left_out"] = probe_xacts
    return out


def checks(args: argparse.Namespace, events: int) -> dict[str, Any]:
    """Every stored event processed exactly once: processed, one attempt (attempts counts
    claims), one ``handler_runs`` row for the one handler, that row an outcome of a run
    (not "skipped"), none dead."""
    p = soak.pg_args(args)
    row = ib.psql(
        p,
        "SELECT count(*) || '|' || count(*) FILTER (WHERE status = 'processed') || '|' || "
        "count(*) FILTER (WHERE attempts <> 1) || '|' || "
        "count(*) FILTER (WHERE status = 'dead') || '|' || "
        "(SELECT count(*) FROM handler_runs) || '|' || "
        "(SELECT count(*) FROM handler_runs WHERE outcome IS NOT NULL) || '|' || "
        "count(*) FILTER (WHERE NOT EXISTS "
        "(SELECT 1 FROM handler_runs h WHERE h.event_id = events.id)) FROM events",
        db=args.pg_db,
    )
    total, processed, attempts_not_1, dead, ledger, skipped, no_ledger = (
        int(v) for v in row.split("|")
    )
    c = {
        "stored": events,
        "rows_total": total,
        "processed": processed,
        "attempts_not_1": attempts_not_1,
        "dead": dead,
        "ledger_rows": ledger,
        "ledger_not_run": skipped,
        "events_without_ledger_row": no_ledger,
    }
    c["once_ok"] = (
        total == events
        and processed == events
        and attempts_not_1 == 0
        and dead == 0
        and ledger == events
        and skipped == 0
        and no_ledger == 0
    )
    return c


def pg_settings(args: argparse.Namespace) -> dict[str, str]:
    """The server settings the drain depends on most: with autovacuum off (hookd's worker
    warns of it) nothing but hookd's own analyze keeps the statistics fresh; commits
    wait for the WAL flush unless synchronous_commit or fsync is off."""
    names = ("server_version", "autovacuum", "synchronous_commit", "fsync", "shared_buffers")
    listed = ", ".join(f"'{n}'" for n in names)
    rows = ib.psql(
        soak.pg_args(args),
        f"SELECT name || '=' || setting FROM pg_settings WHERE name IN ({listed}) ORDER BY name",
    )
    return dict(line.split("=", 1) for line in rows.splitlines())


def processed_span(args: argparse.Namespace) -> tuple[float, float]:
    """First and last ``processed_at``, epoch seconds."""
    row = ib.psql(
        soak.pg_args(args),
        "SELECT extract(epoch FROM min(processed_at)) || '|' || "
        "extract(epoch FROM max(processed_at)) FROM events",
        db=args.pg_db,
    )
    first, last = row.split("|")
    return float(first), float(last)


def per_second(args: argparse.Namespace, since: float) -> list[int]:
    """Events processed in each second after ``since`` (the launch)."""
    rows = ib.psql(
        soak.pg_args(args),
        "SELECT s || '|' || count(*) FROM (SELECT floor(extract(epoch FROM processed_at) - "
        f"{since})::int AS s FROM events WHERE processed_at IS NOT NULL) AS x "
        "GROUP BY s ORDER BY s",
        db=args.pg_db,
    )
    counts: dict[int, int] = {}
    for line in rows.splitlines():
        second, n = line.split("|")
        counts[max(0, int(second))] = counts.get(max(0, int(second)), 0) + int(n)
    return [counts.get(s, 0) for s in range(max(counts, default=-1) + 1)]


# --------------------------------------------------------------------------- the drain


@dataclass
class Drain:
    """What the drain loop saw: one sample per interval, and the probe's transactions."""

    launched_wall: float = 0.0
    launched: float = 0.0
    done_after_s: float | None = None
    left: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    probe_xacts: int = 0


# PostgreSQL's processes that work for every database, this one included (as in
# ``bench/ingest.py``'s ``postgres_cpu_s``).
PG_SHARED = ["checkpointer", "background writer", "walwriter", "autovacuum launcher"]
# One round trip a sample: the events processed so far, as their ledger rows (one per
# event with the one handler), and the PostgreSQL processes working for this database
# now. Counting the events left instead costs a visit to each one's row, wide and with
# every dead version kept (autovacuum is off here): a scan of the whole table cost a
# fifth of what the workers used; the narrow ledger, written once, a few milliseconds.
POLL = (
    "SELECT (SELECT count(*) FROM handler_runs), "
    "array(SELECT pid FROM pg_stat_activity WHERE (datname = $1 OR backend_type = ANY($2)) "
    "AND pid <> pg_backend_pid())"
)
# Whether the drain is over: what is still to process, through an index on status.
LEFT = "SELECT count(*) FROM events WHERE status = ANY($1::text[])"
STALLED_S = 5.0  # no new ledger row for this long: look at what is left


class Meter:
    """CPU seconds used so far by each group, cheap enough to read twice a second: one
    ``/proc/<pid>/stat`` per process, no scan of ``/proc``.

    workers and Redis: their processes (neither starts children); PostgreSQL: the
    backends of this database and the shared writers, as the poll lists them, less this
    script's probe backend (its polls are the benchmark's, counted under ``bench``); a
    backend that has exited keeps its last reading, so a pool closing a connection takes
    nothing back. ``machine``: all cores' busy time."""

    def __init__(self, workers: list[int], redis_pid: int, probe_pid: int) -> None:
        self.workers = workers
        self.redis_pid = redis_pid
        self.probe_pid = probe_pid
        self.postgres: dict[int, float] = {}  # pid: CPU seconds at its last reading
        self.procs: dict[int, psutil.Process] = {}

    def seconds(self, pid: int) -> float | None:
        try:
            proc = self.procs.setdefault(pid, psutil.Process(pid))
            t = proc.cpu_times()
        except psutil.Error:
            return None
        return float(t.user + t.system)

    def read(self, pg_pids: list[int]) -> dict[str, float]:
        for pid in pg_pids:
            self.postgres[pid] = self.seconds(pid) or self.postgres.get(pid, 0.0)
        for pid in set(self.postgres) - set(pg_pids):  # gone, or idle and not listed
            now = self.seconds(pid)
            if now is not None:
                self.postgres[pid] = now
        probe = self.seconds(self.probe_pid) or 0.0
        busy, _ = ib.machine_busy_s()
        return {
            "workers": sum(self.seconds(pid) or 0.0 for pid in self.workers),
            "postgres": sum(self.postgres.values()),
            "redis": self.seconds(self.redis_pid) or 0.0,
            "bench": soak.self_cpu_s() + probe,
            "machine": busy,
        }


def cpu_split(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each group between two readings; ``other``: the machine's busy
    time that none of the groups account for."""
    d = {k: max(0.0, b[k] - a[k]) for k in ("workers", "postgres", "redis", "bench")}
    d["other"] = max(0.0, (b["machine"] - a["machine"]) - sum(d.values()))
    return d


def launch_workers(
    args: argparse.Namespace, env: dict[str, str], work: Path, stack: contextlib.ExitStack
) -> list[subprocess.Popen[bytes]]:
    """``--workers`` ``hookd worker`` processes, each stopped (SIGTERM) when ``stack`` closes.
    Each in a session of its own: a Ctrl-C in the terminal reaches this script only, which
    then stops them in order rather than all at once mid-drain."""
    workers = []
    for i in range(args.workers):
        with (work / f"worker{i}.log").open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "hookd.cli", "worker"],
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        workers.append(worker)
        stack.callback(soak.stop_proc, worker)
    return workers


async def drain(
    args: argparse.Namespace,
    env: dict[str, str],
    work: Path,
    redis_pid: int,
    stack: contextlib.ExitStack,
) -> tuple[Drain, list[subprocess.Popen[bytes]]]:
    """Launch the workers, then sample until nothing is left to process (or the timeout,
    or a worker exits)."""
    import asyncpg

    d = Drain()
    # LEFT: a plain index scan marks the entries of row versions the drain has left
    # behind as dead, so the next one skips them; a bitmap scan visits them all again
    # (with autovacuum off, every claim and outcome leaves one).
    probe = await asyncpg.connect(pg_dsn(args), server_settings={"enable_bitmapscan": "off"})
    workers: list[subprocess.Popen[bytes]] = []
    try:
        probe_pid = int(await probe.fetchval("SELECT pg_backend_pid()"))
        # Prepared once each: one transaction per poll, counted here and left out of the
        # database's counts (to within a few, against hundreds per 1,000 events).
        poll, left_now = await probe.prepare(POLL), await probe.prepare(LEFT)
        d.probe_xacts += 2

        async def read(meter: Meter) -> tuple[int, dict[str, float]]:
            ledger, pids = await poll.fetchrow(args.pg_db, PG_SHARED)
            d.probe_xacts += 1
            return int(ledger), meter.read(list(pids))

        async def still_left() -> int:
            d.probe_xacts += 1
            return int(await left_now.fetchval(list(NOT_DONE)))

        meter = Meter([], redis_pid, probe_pid)
        _, cpu0 = await read(meter)
        d.launched_wall, d.launched = time.time(), time.monotonic()
        workers += launch_workers(args, env, work, stack)
        meter.workers = [w.pid for w in workers]
        print(
            f"[backlog] launched {args.workers} workers: pids {meter.workers}",
            flush=True,
        )
        prev = cpu0
        grew_at, ledger_before = time.monotonic(), 0
        while True:
            await asyncio.sleep(args.interval)
            processed, now_cpu = await read(meter)
            if processed > ledger_before:
                grew_at, ledger_before = time.monotonic(), processed
            # All processed, or stuck (events gone dead or waiting for a retry have no
            # ledger row): ask the events themselves. Nothing else adds events.
            stalled = processed > 0 and time.monotonic() - grew_at > STALLED_S
            left = await still_left() if processed >= args.events or stalled else None
            if stalled:
                grew_at = time.monotonic()  # and again in STALLED_S
            t = time.monotonic() - d.launched
            step = cpu_split(prev, now_cpu)
            prev = now_cpu
            sample = {
                "t_s": round(t, 2),
                "processed": processed,
                "left": args.events - processed if left is None else left,
                "cpu_s": {k: round(v, 3) for k, v in cpu_split(cpu0, now_cpu).items()},
            }
            d.samples.append(sample)
            dt = max(t - (d.samples[-2]["t_s"] if len(d.samples) > 1 else 0.0), 1e-9)
            pct = "  ".join(f"{k} {100 * v / dt:4.0f}%" for k, v in step.items())
            print(
                f"[backlog] {t:6.1f} s  processed {processed:>8,}  "
                f"left {sample['left']:>8,}  {pct}",
                flush=True,
            )
            if left == 0:
                d.done_after_s = t
                break
            d.left = sample["left"]
            exited = [w for w in workers if w.poll() is not None]
            if exited:
                raise RuntimeError(f"hookd worker exited with {exited[0].returncode}")
            if t > args.drain_timeout:
                break
    finally:
        await probe.close()
    return d, workers


def cpu_summary(d: Drain, events: int) -> dict[str, Any]:
    """Per group: CPU seconds, percent of a core, µs per event, over the whole drain and
    over its steady part."""
    if not d.samples:
        return {}
    last = d.samples[-1]
    wall = last["t_s"]
    out: dict[str, Any] = {
        "seconds": wall,
        "cpu_s": last["cpu_s"],
        "pct_of_a_core": {k: round(100 * v / wall, 1) for k, v in last["cpu_s"].items()},
        "us_per_event": {k: round(1e6 * v / events, 1) for k, v in last["cpu_s"].items()},
    }
    low, high = (f * events for f in STEADY)
    inside = [s for s in d.samples if low <= s["processed"] <= high]
    if len(inside) >= 2 and inside[-1]["processed"] > inside[0]["processed"]:
        a, b = inside[0], inside[-1]
        n = b["processed"] - a["processed"]
        span = b["t_s"] - a["t_s"]
        cpu = {k: b["cpu_s"][k] - a["cpu_s"][k] for k in CPU_GROUPS}
        out["steady"] = {
            "from_s": a["t_s"],
            "to_s": b["t_s"],
            "events": n,
            "events_per_s": round(n / span, 1),
            "pct_of_a_core": {k: round(100 * v / span, 1) for k, v in cpu.items()},
            "us_per_event": {k: round(1e6 * v / n, 1) for k, v in cpu.items()},
        }
    return out


# --------------------------------------------------------------------------- the run


def run(args: argparse.Namespace, work: Path, stack: contextlib.ExitStack) -> dict[str, Any]:
    p = soak.pg_args(args)
    ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)")
    ib.psql(p, f"CREATE DATABASE {args.pg_db}")
    if not args.keep:
        stack.callback(lambda: ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)"))
    url = f"postgresql+asyncpg://{args.pg_user}@{args.pg_host}:{args.pg_port}/{args.pg_db}"
    redis = soak.start_redis()
    stack.callback(soak.stop_proc, redis.proc)
    env = soak.hookd_env(
        args,
        work,
        HOOKD_DATABASE_URL=url,
        HOOKD_REDIS_URL=redis.url,
        HOOKD_WORKER_METRICS_PORT="0",
    )
    soak.db_upgrade(work, env)
    result: dict[str, Any] = {"postgres_settings": pg_settings(args)}
    print(f"[backlog] storing {args.events:,} events in {args.pg_db}...", flush=True)
    result["store"] = asyncio.run(store_events(url, args.events, args.store_batch))
    stored = int(ib.psql(p, "SELECT count(*) FROM events", db=args.pg_db))
    s = result["store"]
    print(
        f"[backlog] stored {stored:,} in {s['seconds']} s ({s['events_per_s']:,.0f}/s)", flush=True
    )
    if stored != args.events:
        raise RuntimeError(f"stored {stored} events, not {args.events}")
    result["machine_busy_before_pct"] = ib.background_busy_pct(args.wait_quiet)
    before = asyncio.run(pg_stats(args))
    d, workers = asyncio.run(drain(args, env, work, redis.proc.pid, stack))
    result["drain_timed_out"] = d.done_after_s is None
    result["left"] = d.left if d.done_after_s is None else 0
    codes = [soak.stop_proc(w) for w in workers]
    # +1: the transaction of the first stats read, counted when its connection closed.
    after = asyncio.run(pg_stats(args, settle=True))
    result["database"] = per_event(before, after, d.probe_xacts + 1, args.events)
    first, last = processed_span(args)
    launch_to_last = last - d.launched_wall
    result["rates"] = {
        "events_per_s": round(args.events / launch_to_last, 1),
        "seconds_from_launch": round(launch_to_last, 3),
        "first_processed_after_s": round(first - d.launched_wall, 3),
        "span_events_per_s": round(args.events / (last - first), 1) if last > first else None,
        "span_seconds": round(last - first, 3),
        "seen_done_after_s": None if d.done_after_s is None else round(d.done_after_s, 2),
    }
    result["cpu"] = cpu_summary(d, args.events)
    result["samples"] = d.samples
    result["processed_per_second"] = per_second(args, d.launched_wall)
    result["checks"] = checks(args, args.events)
    result["worker_exit_codes"] = codes
    # A worker still booting when the backlog was gone (a small one, a loaded machine)
    # is ended by the SIGTERM before it has set up its own handling: not a failure.
    result["workers_stopped_while_starting"] = [
        i
        for i, code in enumerate(codes)
        if code == -signal.SIGTERM
        and "worker started" not in (work / f"worker{i}.log").read_text(errors="replace")
    ]
    result["worker_log_problems"] = [
        line for i in range(args.workers) for line in soak.log_problems(work / f"worker{i}.log")
    ][:50]
    return result


def errors_of(r: dict[str, Any]) -> list[str]:
    if "failed" in r:
        return [r["failed"]]
    out = []
    if r.get("drain_timed_out"):
        out.append(f"{r['left']:,} events still not processed after the drain timeout")
    c = r["checks"]
    if not c["once_ok"]:
        out.append(
            f"not processed exactly once: {c['processed']:,} of {c['rows_total']:,} processed "
            f"({c['stored']:,} stored), {c['attempts_not_1']} with attempts <> 1, {c['dead']} "
            f"dead, {c['ledger_rows']:,} ledger rows ({c['ledger_not_run']} not a run), "
            f"{c['events_without_ledger_row']} events without one"
        )
    starting = set(r.get("workers_stopped_while_starting", ()))
    bad = [code for i, code in enumerate(r["worker_exit_codes"]) if code != 0 and i not in starting]
    if bad:
        out.append(f"workers exited with {bad}")
    if r["worker_log_problems"]:
        # A traceback's own line says nothing: the exception is its last unindented line.
        said = [ln for ln in r["worker_log_problems"] if not ln.startswith((" ", "Traceback"))]
        out.append(f"worker log: {(said or r['worker_log_problems'])[-1][:200]}")
    return out


def warnings_of(r: dict[str, Any]) -> list[str]:
    out = []
    cpu = r.get("cpu") or {}
    other = (cpu.get("pct_of_a_core") or {}).get("other")
    if other is not None and other > ib.BACKGROUND_WARN_PCT:
        out.append(f"other processes used {other:.0f}% of a core on average during the drain")
    busy = r.get("machine_busy_before_pct")
    if busy is not None and busy > ib.BACKGROUND_WARN_PCT:
        out.append(f"machine already {busy:.0f}% busy (of a core) before the workers started")
    for i in r.get("workers_stopped_while_starting", ()):
        out.append(f"worker {i} was still starting when the backlog was gone: stopped, unused")
    db = r.get("database") or {}
    if db.get("autovacuum_runs") or db.get("autoanalyze_runs"):
        out.append(
            f"autovacuum ran during the drain ({db['autovacuum_runs']} vacuums, "
            f"{db['autoanalyze_runs']} analyzes): counted in PostgreSQL's CPU"
        )
    return out


def num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else f"{value:{spec}}"


def table(r: dict[str, Any], workers: int) -> str:
    """The rates and the per-event costs, as two Markdown tables."""
    if "failed" in r:
        return f"failed: {r['failed']}"
    rates, cpu, db = r["rates"], r.get("cpu") or {}, r["database"]["per_event"]
    steady = cpu.get("steady") or {}
    once = "yes" if r["checks"]["once_ok"] else "NO"
    lines = [
        "| workers | events | events/s from launch | seconds | events/s first → last processed "
        "| first processed after s | exactly once |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {workers} | {r['store']['events']:,} | {num(rates['events_per_s'])} "
        f"| {rates['seconds_from_launch']:.2f} | {num(rates['span_events_per_s'])} "
        f"| {rates['first_processed_after_s']:.2f} | {once} |",
        "",
        "| CPU per event | " + " | ".join(CPU_GROUPS) + " | xact commit / rollback "
        "| rows ins / upd / del |",
        "| --- | " + " | ".join("---:" for _ in CPU_GROUPS) + " | ---: | ---: |",
    ]
    # The database's counts are of the whole drain: shown on its row only.
    pg = (
        f"{db['xact_commit']:.2f} / {db['xact_rollback']:.2f} "
        f"| {db['tup_inserted']:.2f} / {db['tup_updated']:.2f} / {db['tup_deleted']:.2f}"
    )
    for label, part in (("whole drain", cpu), ("steady (10-90%)", steady)):
        us = part.get("us_per_event")
        if not us:
            continue
        pcts = part["pct_of_a_core"]
        cells = " | ".join(f"{us[k]:,.0f} µs ({pcts[k]:.0f}%)" for k in CPU_GROUPS)
        lines.append(f"| {label} | {cells} | {pg} |")
        pg = "- | -"
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="S7: draining a backlog of stored events with hookd workers on "
        "PostgreSQL + Redis (no receiver, no-op handler)."
    )
    p.add_argument("--events", type=int, help="events stored before the workers start (100000)")
    p.add_argument("--workers", type=int, default=2, help="hookd worker processes (2)")
    p.add_argument("--quick", action="store_true", help="20,000 events")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples (0.5)")
    p.add_argument("--drain-timeout", type=float, default=600.0, help="seconds (600)")
    p.add_argument("--store-batch", type=int, default=STORE_BATCH, help="events per insert")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        help="wait up to this many seconds for a quiet machine before the launch (0)",
    )
    p.add_argument(
        "--hookd-env", action="append", default=[], type=soak.key_value, metavar="HOOKD_KEY=VALUE"
    )
    p.add_argument("--pg-host", default="127.0.0.1")
    p.add_argument("--pg-port", type=int, default=5432)
    p.add_argument("--pg-user", default="postgres")
    p.add_argument("--pg-db", default="hookd_bench_backlog", help="dropped and created afresh")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "backlog.json")
    p.add_argument("--keep", action="store_true", help="keep the run folder and the database")
    args = p.parse_args(argv)
    if args.events is None:
        args.events = 20_000 if args.quick else 100_000
    if args.events < 1 or args.workers < 1:
        p.error("--events and --workers: at least 1")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.pg_db):
        p.error("--pg-db: use a plain lower-case name")
    if not args.pg_host.startswith("127.") and args.pg_host not in ("localhost", "::1"):
        p.error("--pg-host: this benchmark only talks to the loopback interface")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Started from a background job of a non-interactive shell, this process inherits
    # SIGINT ignored, and a Ctrl-C (or a test's SIGINT) would let the drain run on to the
    # end instead of stopping the workers and dropping the database (as bench/run.py).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for tool in ("psql", "redis-server"):
        if shutil.which(tool) is None:
            print(f"{tool} not found", file=sys.stderr)
            return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (BENCH_DIR / "results").mkdir(parents=True, exist_ok=True)
    # Its own folder (a test may run beside a benchmark): worker logs, the sources file.
    work = Path(tempfile.mkdtemp(prefix=f"backlog-{stamp}-", dir=BENCH_DIR / "results"))
    config = {
        k: getattr(args, k)
        for k in ("events", "workers", "quick", "interval", "store_batch", "pg_db")
    }
    config["hookd_env"] = dict(args.hookd_env)
    print(f"hookd backlog drain: {config}", flush=True)
    interrupted = False
    result: dict[str, Any]
    with soak.sigterm_as_interrupt():
        try:
            with contextlib.ExitStack() as stack:
                try:
                    result = run(args, work, stack)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    print(f"[backlog] FAILED: {exc}", file=sys.stderr, flush=True)
                    result = {"failed": str(exc)[:500]}
        except KeyboardInterrupt:
            interrupted = True
            print(
                "interrupted: stopped the workers and Redis, dropped the database", file=sys.stderr
            )
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    if interrupted:
        return 130
    found, noted = errors_of(result), warnings_of(result)
    report = {
        "when": stamp,
        "config": config,
        "environment": ib.environment(),
        **result,
        "table": table(result, args.workers),
        "errors": found,
        "warnings": noted,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    summary = {
        k: report[k] for k in ("config", "rates", "cpu", "database", "checks") if k in report
    }
    if "cpu" in summary:
        summary["cpu"] = {k: v for k, v in summary["cpu"].items() if k != "cpu_s"}
    print(json.dumps(summary | {"errors": found, "warnings": noted}, indent=2))
    print()
    print(report["table"])
    for title, lines in (("WARNINGS", noted), ("ERRORS", found)):
        if lines:
            print(f"\n{title}:")
            for line in lines:
                print(f"  - {line}")
    print(f"\nresults: {args.out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
