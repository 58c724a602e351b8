"""Soak: hookd under steady open-loop load for minutes, and the bare app at the same rate.

hookd target, by ``--deployment``:

* ``pg-redis`` (the default): ``hookd serve`` on PostgreSQL with a private Redis, one
  ``hookd worker`` (``HOOKD_WORKER_METRICS_PORT=0``) running the no-op handler
  ``bench/handlers.py:noop``.
* ``quickstart``: the Quickstart default, ``hookd serve`` alone with its default
  settings on a SQLite file in the run folder, no Redis and no worker: serve processes
  the events itself (in its own process or in processes it starts as its children).

First a short wrk run (with processing running) measures the receiver's maximum and the
rate at which that burst was stored and processed end to end; the soak then sends signed
GitHub webhooks open-loop at ``--fraction`` (default 50%; 1.0 is "its max rate") of the
lower of the two for ``--minutes``. ``bare`` target: ``bench/bare_app.py`` at the same rate
for as long.

Every ``--interval`` seconds it samples: RSS of the server and of the worker (each with
its children), ack latency p50/p99 of the requests answered in that window, requests/s,
the processing backlog (events not yet processed, and the age of the oldest), and CPU
(PostgreSQL's only for ``pg-redis``). At the end, for hookd, processing lag per window is
read from the database, every 2xx'd event must be stored and processed exactly once, and
the backlog of the last ``--compare`` seconds is compared with the first (bounded or
growing). On SQLite the file is read read-only with a busy timeout
(``bench/soak_sqlite.py``), so the probe never holds up hookd's writer.

    .venv/bin/python bench/soak.py                 # 10 minutes per target
    .venv/bin/python bench/soak.py --quick         # 1 minute per target
    .venv/bin/python bench/soak.py --rate 800      # skip the max measurement
    .venv/bin/python bench/soak.py --targets hookd --minutes 20 --autovacuum-off
    .venv/bin/python bench/soak.py --deployment quickstart --fraction 1.0   # its max rate

Results go to ``--out``: ``bench/results/soak.json``, or ``soak_quickstart.json`` for
``--deployment quickstart``.

``--autovacuum-off`` (``pg-redis`` only) turns autovacuum off for every table and
partition of hookd's database (``ALTER TABLE … SET (autovacuum_enabled = off)``, and for
their TOAST tables; partitions made during the run too), so processing has to do
without what vacuum and analyze would give it; the result then says whether processing
lag drifted: its p50/p99 over the events received in the first ``--lag-compare`` seconds
after the warm-up against the last ``--lag-compare`` seconds (default: 5 minutes, or a
third of the run).

The load generator runs on uvloop with raw asyncio protocols (no streams), one request in
flight per keep-alive connection. Request k is due at start + k/rate whatever happened to
the others; a due request waits for a free connection if all are busy, and its latency
"from due" counts that wait (coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import psutil

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent


def load_ingest_bench() -> ModuleType:
    """``bench/ingest.py`` under a name that cannot be confused with hookd's ``ingest``."""
    spec = importlib.util.spec_from_file_location("hookd_bench_ingest", BENCH_DIR / "ingest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


ib = load_ingest_bench()


def load_sqlite_probe() -> ModuleType:
    """``bench/soak_sqlite.py``: what the quickstart deployment reads from its SQLite file."""
    spec = importlib.util.spec_from_file_location(
        "hookd_bench_soak_sqlite", BENCH_DIR / "soak_sqlite.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sq = load_sqlite_probe()
DEPLOYMENTS = {
    "pg-redis": "PostgreSQL + a private Redis + one hookd worker",
    "quickstart": "SQLite, hookd serve alone (no Redis, no worker)",
}

SOURCES_TOML = f"""[[sources]]
name = "{ib.SOURCE}"
provider = "github"
secrets = ["{ib.SECRET}"]
handlers = ["bench.handlers:noop"]
"""
NOT_DONE = ("pending", "processing", "retrying")
LAG_DRIFT_WARN = 1.5  # last ÷ first processing lag p99 that counts as a drift
# The backlog is bounded if its mean over the last comparison window is at most this
# many times the first window's, or at most this many seconds of events at the rate.
BACKLOG_GROWTH, BACKLOG_FLOOR_S = 1.5, 5.0


# --------------------------------------------------------------------------- load generator


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    end = lower.find(b"\r\n", at + 2)
    return int(lower[at + 17 : end if end >= 0 else None])


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection with at most one request in flight."""

    def __init__(self, gen: OpenLoop) -> None:
        self.gen = gen
        # uvloop's transports are not asyncio.Transport subclasses.
        self.transport: Any = None
        self.buf = bytearray()
        self.inflight: tuple[float, float] | None = None  # (due, sent)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            total = end + 4 + _content_length(head)
            if len(self.buf) < total:
                return
            del self.buf[:total]
            close = b"\r\nconnection: close" in head.lower()
            self.gen.answered(self, int(head[9:12]), close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.lost(self)


@dataclass
class Window:
    """Requests answered during one sampling interval."""

    from_send: array[float] = field(default_factory=lambda: array("d"))
    from_due: array[float] = field(default_factory=lambda: array("d"))
    send_lag: array[float] = field(default_factory=lambda: array("d"))
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0


class OpenLoop:
    """Request k is due at ``start + k/rate``; answered requests are filed by the
    window (of ``interval`` seconds) in which their answer arrived."""

    def __init__(
        self,
        port: int,
        requests: list[tuple[bytes, bytes]],
        nonce: str,
        *,
        rate: float,
        duration: float,
        connections: int,
        interval: float,
        timeout_s: float,
    ) -> None:
        self.port = port
        self.requests = requests
        self.nonce = nonce
        self.rate = rate
        self.total = int(rate * duration)
        self.connections = connections
        self.interval = interval
        self.n_windows = max(1, round(duration / interval))
        self.timeout_s = timeout_s
        self.windows = [Window() for _ in range(self.n_windows)]
        # First in, first out: every connection is used every connections/rate
        # seconds, so none sits idle long enough for the server's keep-alive
        # timeout (uvicorn: 5 s) to close it just as a request is written to it.
        self.idle: deque[_Conn] = deque()
        self.backlog: deque[tuple[int, float]] = deque()
        self.live: set[_Conn] = set()
        self.sent = 0
        self.finished_count = 0
        self.socket_errors: dict[str, int] = {}
        self.start = 0.0
        self.start_wall = 0.0
        self.clock = time.perf_counter  # uvloop's loop.time() has millisecond steps
        self.done = asyncio.Event()
        self.started = asyncio.Event()
        self.stopping = False

    def window(self, now: float) -> Window:
        index = int((now - self.start) / self.interval)
        return self.windows[min(max(index, 0), self.n_windows - 1)]

    def _error(self, kind: str, due: float | None = None) -> None:
        self.socket_errors[kind] = self.socket_errors.get(kind, 0) + 1
        self.window(self.clock() if due is None else due).errors += 1
        self._finish_one()

    def _finish_one(self) -> None:
        self.finished_count += 1
        if self.finished_count >= self.total:
            self.done.set()

    def answered(self, conn: _Conn, status: int, close: bool) -> None:
        now = self.clock()
        if conn.inflight is None:  # an answer to nothing: the connection is confused
            self._error("unexpected_answer")
            if conn.transport is not None:
                conn.transport.abort()
            return
        due, sent = conn.inflight
        conn.inflight = None
        w = self.window(now)
        w.from_send.append(now - sent)
        w.from_due.append(now - due)
        w.send_lag.append(max(0.0, sent - due))
        w.statuses[status] = w.statuses.get(status, 0) + 1
        self._finish_one()
        if close and conn.transport is not None:
            conn.transport.close()  # connection_lost opens a new one
            return
        self.idle.append(conn)
        self._dispatch()

    def lost(self, conn: _Conn) -> None:
        self.live.discard(conn)
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)
        if conn.inflight is not None:
            conn.inflight = None
            self._error("connection_lost")
        if not self.stopping:
            asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        for attempt in range(50):
            try:
                transport, proto = await loop.create_connection(
                    lambda: _Conn(self), "127.0.0.1", self.port
                )
            except OSError:
                self.socket_errors["connect"] = self.socket_errors.get("connect", 0) + 1
                await asyncio.sleep(min(1.0, 0.01 * 2**attempt))
                continue
            assert isinstance(proto, _Conn)
            # uvloop may call connection_made() later; the transport is needed now.
            proto.transport = transport
            self.live.add(proto)
            self.idle.append(proto)
            self._dispatch()
            return

    def _dispatch(self) -> None:
        while self.backlog and self.idle:
            conn = self.idle.popleft()
            k, due = self.backlog.popleft()
            head, rest = self.requests[k % len(self.requests)]
            delivery = f"{self.nonce}-eeee-4000-8000-{k:012x}".encode()
            conn.inflight = (due, self.clock())
            assert conn.transport is not None
            conn.transport.write(head + delivery + rest)
            self.sent += 1

    async def _watchdog(self) -> None:
        """Abort connections whose request has waited longer than the timeout."""
        while not self.done.is_set():
            await asyncio.sleep(0.5)
            now = self.clock()
            for conn in list(self.live):
                if conn.inflight is not None and now - conn.inflight[1] > self.timeout_s:
                    due = conn.inflight[0]
                    conn.inflight = None
                    self._error("timeout", due)
                    if conn.transport is not None:
                        conn.transport.abort()

    async def run(self) -> None:
        await asyncio.gather(*(self._connect() for _ in range(self.connections)))
        self.start = self.clock() + 0.05
        self.start_wall = time.time() + 0.05
        self.started.set()
        watchdog = asyncio.get_running_loop().create_task(self._watchdog())
        k = 0
        while k < self.total:
            now = self.clock()
            due = self.start + k / self.rate
            if due > now:
                # At least 1 ms: uvloop's timers have millisecond steps, and a shorter
                # sleep would spin. Requests that fell due meanwhile go out together.
                await asyncio.sleep(max(due - now, 0.001))
                continue
            while k < self.total and self.start + k / self.rate <= now:
                self.backlog.append((k, self.start + k / self.rate))
                k += 1
            self._dispatch()
        if self.total == 0:
            self.done.set()
        await self.done.wait()
        self.stopping = True
        watchdog.cancel()
        for conn in list(self.live):
            if conn.transport is not None:
                conn.transport.close()


# --------------------------------------------------------------------------- processes


def rss_bytes(pid: int | None) -> int:
    """Resident memory of a process and all its children (0 if it is gone)."""
    if pid is None:
        return 0
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Redis:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def start_redis() -> Redis:
    """A private, memory-only Redis on a free loopback port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found (apt-get install -y redis-server)")
    port = ib.free_port()
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return Redis(proc, port)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError("redis-server did not start")


def stop_proc(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# --------------------------------------------------------------------------- sampling


@dataclass
class Probe:
    """What to watch during a soak: processes, and optionally the events table."""

    server_pid: int
    worker_pid: int | None = None
    pg_db: str | None = None
    dsn: str | None = None
    sqlite_path: Path | None = None  # quickstart: hookd's SQLite file, read read-only

    def cpu_shown(self) -> tuple[str, ...]:
        """The CPU columns of the live line: no worker, no PostgreSQL where there is none."""
        keys = ["server"]
        keys += ["worker"] if self.worker_pid is not None else []
        keys += ["postgres"] if self.pg_db is not None else []
        return (*keys, "generator", "other")


def ms(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    return round(1000 * ib.percentile(values, pct), 3)


def summarize_window(w: Window) -> dict[str, Any]:
    send = sorted(w.from_send)
    due = sorted(w.from_due)
    lag = sorted(w.send_lag)
    return {
        "answered": len(send),
        "statuses": dict(w.statuses),
        "non_2xx": sum(v for k, v in w.statuses.items() if not 200 <= k < 300),
        "errors": w.errors,
        "ack_p50_ms": ms(send, 50),
        "ack_p99_ms": ms(send, 99),
        "ack_max_ms": ms(send, 100),
        "ack_p50_from_due_ms": ms(due, 50),
        "ack_p99_from_due_ms": ms(due, 99),
        "send_lag_p99_ms": ms(lag, 99),
    }


async def sample_loop(
    gen: OpenLoop, probe: Probe, samples: list[dict[str, Any]], label: str
) -> None:
    """At the end of every window: RSS, CPU, backlog, and that window's latency."""
    conn: Any = None
    lite: sqlite3.Connection | None = None
    if probe.dsn is not None:
        import asyncpg

        conn = await asyncpg.connect(probe.dsn)
    if probe.sqlite_path is not None:
        lite = sq.connect(probe.sqlite_path)
    try:
        await gen.started.wait()
        prev = {
            "server": cpu_seconds(probe.server_pid),
            "worker": cpu_seconds(probe.worker_pid),
            "postgres": ib.postgres_cpu_s(probe.pg_db),
            "generator": self_cpu_s(),
        }
        busy0, total0 = ib.machine_busy_s()
        for n in range(1, gen.n_windows + 1):
            await asyncio.sleep(max(0.0, gen.start + n * gen.interval - gen.clock()))
            now_cpu = {
                "server": cpu_seconds(probe.server_pid),
                "worker": cpu_seconds(probe.worker_pid),
                "postgres": ib.postgres_cpu_s(probe.pg_db),
                "generator": self_cpu_s(),
            }
            busy1, total1 = ib.machine_busy_s()
            cores = os.cpu_count() or 1
            machine = 100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9)
            busy0, total0 = busy1, total1
            cpu = {k: round(100 * (now_cpu[k] - prev[k]) / gen.interval, 1) for k in now_cpu}
            cpu["machine"] = round(machine, 1)
            known = cpu["server"] + cpu["worker"] + cpu["postgres"] + cpu["generator"]
            cpu["other"] = round(max(0.0, machine - known), 1)
            prev = now_cpu
            sample: dict[str, Any] = {
                "t_s": round(n * gen.interval, 1),
                "rss_mb": {
                    "server": round(rss_bytes(probe.server_pid) / 2**20, 1),
                },
                "cpu_pct": cpu,
            }
            if probe.worker_pid is not None:
                sample["rss_mb"]["worker"] = round(rss_bytes(probe.worker_pid) / 2**20, 1)
            # The last window may still receive late answers: summarized at the end.
            if n < gen.n_windows:
                sample |= summarize_window(gen.windows[n - 1])
                sample["rps"] = round(sample["answered"] / gen.interval, 1)
            if conn is not None:
                row = await conn.fetchrow(
                    "SELECT count(*) AS backlog, "
                    "extract(epoch FROM now() - min(received_at))::float8 AS oldest "
                    "FROM events WHERE status = ANY($1::text[])",
                    list(NOT_DONE),
                )
                sample["backlog"] = int(row["backlog"])
                sample["oldest_pending_s"] = (
                    round(row["oldest"], 3) if row["oldest"] is not None else 0.0
                )
            if lite is not None:
                # In a thread: the generator's requests keep going out meanwhile.
                count, oldest = await asyncio.to_thread(sq.backlog, lite)
                sample["backlog"] = count
                sample["oldest_pending_s"] = oldest
            samples.append(sample)
            print(live_line(label, sample, probe.cpu_shown()), flush=True)
    finally:
        if conn is not None:
            await conn.close()
        if lite is not None:
            lite.close()


def live_line(label: str, s: dict[str, Any], cpu_keys: tuple[str, ...]) -> str:
    rss = "  ".join(f"rss {k} {v:.0f} MB" for k, v in s["rss_mb"].items())
    lat = (
        f"{s.get('rps', 0):.0f} req/s  ack p50 {s['ack_p50_ms']:.2f} ms  "
        f"p99 {s['ack_p99_ms']:.2f} ms  (from due {s['ack_p99_from_due_ms']:.2f})"
        if s.get("ack_p99_ms") is not None
        else "(last window: summarized at the end)"
    )
    backlog = (
        f"  backlog {s['backlog']} (oldest {s['oldest_pending_s']:.2f} s)" if "backlog" in s else ""
    )
    names = {"postgres": "pg", "generator": "gen"}
    cpu = " ".join(f"{names.get(k, k)} {s['cpu_pct'][k]:.0f}%" for k in cpu_keys)
    return f"[{label}] t={s['t_s']:>5.0f}s  {lat}  {rss}{backlog}  cpu {cpu}"


async def soak_async(
    port: int,
    requests: list[tuple[bytes, bytes]],
    nonce: str,
    probe: Probe,
    args: argparse.Namespace,
    label: str,
) -> tuple[OpenLoop, list[dict[str, Any]]]:
    gen = OpenLoop(
        port,
        requests,
        nonce,
        rate=args.rate,
        duration=args.seconds,
        connections=args.connections,
        interval=args.interval,
        timeout_s=args.timeout,
    )
    samples: list[dict[str, Any]] = []
    sampler = asyncio.create_task(sample_loop(gen, probe, samples, label))
    await gen.run()
    await sampler
    if samples and gen.n_windows == len(samples):
        last = samples[-1]
        last |= summarize_window(gen.windows[-1])
        last["rps"] = round(last["answered"] / gen.interval, 1)
    return gen, samples


def run_soak(
    port: int,
    requests: list[tuple[bytes, bytes]],
    nonce: str,
    probe: Probe,
    args: argparse.Namespace,
    label: str,
) -> tuple[OpenLoop, list[dict[str, Any]]]:
    coro = soak_async(port, requests, nonce, probe, args, label)
    if uvloop is None:
        return asyncio.run(coro)
    return uvloop.run(coro)


# --------------------------------------------------------------------------- summaries


def compare_windows(args: argparse.Namespace) -> tuple[tuple[float, float], tuple[float, float]]:
    """(first, last) comparison windows in seconds since the start: the first
    ``--compare`` seconds after the warm-up, and the last ``--compare`` seconds."""
    first = (args.warmup, args.warmup + args.compare)
    last = (args.seconds - args.compare, args.seconds)
    return first, last


def pooled(gen: OpenLoop, span: tuple[float, float], attr: str) -> list[float]:
    out: list[float] = []
    for i, w in enumerate(gen.windows):
        begin, end = i * gen.interval, (i + 1) * gen.interval
        if begin >= span[0] - 1e-9 and end <= span[1] + 1e-9:
            out.extend(getattr(w, attr))
    out.sort()
    return out


def in_span(
    samples: list[dict[str, Any]], span: tuple[float, float], interval: float
) -> list[dict[str, Any]]:
    return [s for s in samples if s["t_s"] - interval >= span[0] - 1e-9 and s["t_s"] <= span[1]]


def growth(samples: list[dict[str, Any]], args: argparse.Namespace, key: str) -> dict[str, Any]:
    first, last = compare_windows(args)
    a = [s["rss_mb"][key] for s in in_span(samples, first, args.interval) if key in s["rss_mb"]]
    b = [s["rss_mb"][key] for s in in_span(samples, last, args.interval) if key in s["rss_mb"]]
    if not a or not b:
        return {"first_mb": None, "last_mb": None, "growth_pct": None}
    fa, lb = sum(a) / len(a), sum(b) / len(b)
    return {
        "first_mb": round(fa, 1),
        "last_mb": round(lb, 1),
        "growth_pct": round(100 * (lb - fa) / fa, 2) if fa else None,
        "max_mb": max(s["rss_mb"][key] for s in samples),
    }


def backlog_summary(
    samples: list[dict[str, Any]], args: argparse.Namespace, rate: float
) -> dict[str, Any]:
    """The backlog (events not yet processed) in the first and last comparison windows.

    Bounded: the mean of the last window is at most ``BACKLOG_GROWTH`` times the first's,
    or at most ``BACKLOG_FLOOR_S`` seconds of events at the soak's rate (and 100 events):
    a backlog that stays within a few seconds of work is not growing, whatever its noise.
    """
    first, last = compare_windows(args)
    a = [s["backlog"] for s in in_span(samples, first, args.interval) if "backlog" in s]
    b = [s["backlog"] for s in in_span(samples, last, args.interval) if "backlog" in s]
    if not a or not b:
        return {}
    first_mean, last_mean = sum(a) / len(a), sum(b) / len(b)
    floor = max(100.0, BACKLOG_FLOOR_S * rate)
    oldest = [s.get("oldest_pending_s", 0.0) for s in in_span(samples, last, args.interval)]
    return {
        "first_mean": round(first_mean, 1),
        "last_mean": round(last_mean, 1),
        "max": max(s.get("backlog", 0) for s in samples),
        "end": samples[-1].get("backlog"),
        "oldest_pending_s_max_last": max(oldest, default=0.0),
        "floor": round(floor, 1),
        "bounded": last_mean <= max(floor, BACKLOG_GROWTH * first_mean),
    }


def summarize(gen: OpenLoop, samples: list[dict[str, Any]], args: argparse.Namespace) -> dict:
    first, last = compare_windows(args)
    statuses: dict[int, int] = {}
    for w in gen.windows:
        for k, v in w.statuses.items():
            statuses[k] = statuses.get(k, 0) + v
    answered = sum(statuses.values())
    every_send = sorted(x for w in gen.windows for x in w.from_send)
    every_due = sorted(x for w in gen.windows for x in w.from_due)
    behind_s = max(0.0, every_due[-1]) if every_due else 0.0
    lat: dict[str, Any] = {}
    for name, span in (("first", first), ("last", last)):
        send = pooled(gen, span, "from_send")
        due = pooled(gen, span, "from_due")
        lat[name] = {
            "span_s": list(span),
            "requests": len(send),
            "p50_ms": ms(send, 50),
            "p99_ms": ms(send, 99),
            "p99_from_due_ms": ms(due, 99),
        }
    a, b = lat["first"]["p99_from_due_ms"], lat["last"]["p99_from_due_ms"]
    lat["drift_ratio"] = round(b / a, 3) if a and b is not None else None
    rss = {key: growth(samples, args, key) for key in samples[0]["rss_mb"]} if samples else {}
    return {
        "rate_asked": round(gen.rate, 1),
        # Over the time the sending really took: a generator that fell behind its
        # schedule (the server at its limit) sent the last request that much later.
        "rate_achieved": round(answered / (args.seconds + behind_s), 1),
        "behind_schedule_s": round(behind_s, 2),
        "requests_due": gen.total,
        "requests_sent": gen.sent,
        "answered": answered,
        "statuses": statuses,
        "accepted_2xx": sum(v for k, v in statuses.items() if 200 <= k < 300),
        "non_2xx": sum(v for k, v in statuses.items() if not 200 <= k < 300),
        "socket_errors": dict(gen.socket_errors),
        "ack_ms": {
            "p50": ms(every_send, 50),
            "p90": ms(every_send, 90),
            "p99": ms(every_send, 99),
            "p999": ms(every_send, 99.9),
            "max": ms(every_send, 100),
            "p99_from_due": ms(every_due, 99),
        },
        "latency": lat,
        "rss": rss,
        "generator_cpu_pct_max": max((s["cpu_pct"]["generator"] for s in samples), default=None),
        "other_cpu_pct_mean": round(
            sum(s["cpu_pct"]["other"] for s in samples) / max(1, len(samples)), 1
        ),
    }


# --------------------------------------------------------------------------- database


def pg_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(pg_host=args.pg_host, pg_port=args.pg_port, pg_user=args.pg_user)


def quickstart(args: argparse.Namespace) -> bool:
    """Whether hookd runs as the Quickstart default (SQLite). Other scripts that use these
    functions (``bench/prune_load.py``) have no ``--deployment``: PostgreSQL."""
    return bool(getattr(args, "deployment", "pg-redis") == "quickstart")


def count_events(args: argparse.Namespace) -> int:
    if quickstart(args):
        return int(sq.count_events(args.sqlite_path))
    return int(ib.psql(pg_args(args), "SELECT count(*) FROM events", db=args.pg_db))


def count_not_done(args: argparse.Namespace) -> int:
    if quickstart(args):
        return int(sq.count_not_done(args.sqlite_path))
    listed = ", ".join(f"'{s}'" for s in NOT_DONE)
    sql = f"SELECT count(*) FROM events WHERE status IN ({listed})"
    return int(ib.psql(pg_args(args), sql, db=args.pg_db))


def wait_drained(
    args: argparse.Namespace, worker: subprocess.Popen[bytes], timeout_s: float
) -> tuple[float, int]:
    """(seconds until nothing was left to process, events still left at the timeout).
    ``worker``: what processes, ``hookd worker`` or (quickstart) ``hookd serve``."""
    start = time.monotonic()
    while True:
        left = count_not_done(args)
        if left == 0 or time.monotonic() - start > timeout_s:
            return time.monotonic() - start, left
        if worker.poll() is not None:
            what = "serve" if quickstart(args) else "worker"
            raise RuntimeError(f"hookd {what} exited with {worker.returncode}")
        time.sleep(0.5)


def end_to_end_rate(args: argparse.Namespace, since_wall: float) -> dict[str, Any]:
    """Events received since ``since_wall``, over the time until the last was processed."""
    if quickstart(args):
        result: dict[str, Any] = sq.end_to_end_rate(args.sqlite_path, since_wall)
        return result
    sql = (
        "SELECT count(*) || '|' || coalesce(extract(epoch FROM max(processed_at)), 0) "
        f"FROM events WHERE received_at >= to_timestamp({since_wall})"
    )
    n, last = ib.psql(pg_args(args), sql, db=args.pg_db).split("|")
    span = float(last) - since_wall
    return {
        "events": int(n),
        "seconds": round(span, 3),
        "events_per_s": round(int(n) / span, 1) if span > 0 else None,
    }


def db_checks(args: argparse.Namespace, baseline: int, accepted: int, lost: int) -> dict:
    """Every 2xx'd event stored, and every stored event processed, exactly once:
    one attempt (attempts counts claims), one ledger row for the one handler."""
    if quickstart(args):
        result: dict[str, Any] = sq.checks(args.sqlite_path, baseline, accepted, lost)
        return result
    p = pg_args(args)
    row = ib.psql(
        p,
        "SELECT count(*) || '|' || count(*) FILTER (WHERE status = 'processed') || '|' || "
        "count(*) FILTER (WHERE status = 'processed' AND attempts <> 1) || '|' || "
        "count(*) FILTER (WHERE status = 'dead') || '|' || "
        "(SELECT count(*) FROM handler_runs) || '|' || count(DISTINCT dedupe_key) FROM events",
        db=args.pg_db,
    )
    counts = (int(v) for v in row.split("|"))
    return dict(sq.exactly_once(baseline, accepted, lost, *counts))


def db_windows(args: argparse.Namespace, start_wall: float) -> list[dict[str, Any]]:
    """Processing lag p50/p99 by the window an event was received in, and
    events processed per second by the window they were processed in."""
    if quickstart(args):
        result: list[dict[str, Any]] = sq.windows(args.sqlite_path, start_wall, args.interval)
        return result
    iv, t0 = args.interval, start_wall
    lag = "extract(epoch FROM processed_at - received_at)"
    lag_sql = (
        "SELECT w || '|' || count(*) || '|' || percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) "
        "|| '|' || percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) FROM ("
        f"SELECT floor((extract(epoch FROM received_at) - {t0}) / {iv})::int AS w, {lag} AS lag "
        f"FROM events WHERE received_at >= to_timestamp({t0}) AND processed_at IS NOT NULL"
        ") AS x GROUP BY w ORDER BY w"
    )
    done_sql = (
        "SELECT w || '|' || count(*) FROM ("
        f"SELECT floor((extract(epoch FROM processed_at) - {t0}) / {iv})::int AS w "
        f"FROM events WHERE processed_at >= to_timestamp({t0})"
        ") AS x GROUP BY w ORDER BY w"
    )
    out: dict[int, dict[str, Any]] = {}
    for line in ib.psql(pg_args(args), lag_sql, db=args.pg_db).splitlines():
        w, n, p50, p99 = line.split("|")
        out.setdefault(int(w), {})["received"] = int(n)
        out[int(w)]["lag_p50_ms"] = round(float(p50) * 1000, 1)
        out[int(w)]["lag_p99_ms"] = round(float(p99) * 1000, 1)
    for line in ib.psql(pg_args(args), done_sql, db=args.pg_db).splitlines():
        w, n = line.split("|")
        out.setdefault(int(w), {})["processed_per_s"] = round(int(n) / iv, 1)
    return [{"window": w, **v} for w, v in sorted(out.items())]


def overall_lag(args: argparse.Namespace, start_wall: float) -> dict[str, float]:
    if quickstart(args):
        result: dict[str, float] = sq.overall_lag(args.sqlite_path, start_wall)
        return result
    sql = (
        "SELECT percentile_cont(0.5) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM processed_at - received_at)) || '|' || "
        "percentile_cont(0.99) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM processed_at - received_at)) || '|' || "
        "max(extract(epoch FROM processed_at - received_at)) "
        f"FROM events WHERE received_at >= to_timestamp({start_wall})"
    )
    out = ib.psql(pg_args(args), sql, db=args.pg_db)
    if not out or "|" not in out:
        return {}
    p50, p99, mx = (float(v) for v in out.split("|"))
    return {
        "p50_ms": round(p50 * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(mx * 1000, 1),
    }


def lag_drift(args: argparse.Namespace, start_wall: float) -> dict[str, Any]:
    """Processing lag p50/p99 of the events received in the first ``--lag-compare``
    seconds after the warm-up and in the last ones, and last ÷ first."""
    first = (args.warmup, args.warmup + args.lag_compare)
    last = (args.seconds - args.lag_compare, args.seconds)
    if quickstart(args):
        result: dict[str, Any] = sq.lag_drift(
            args.sqlite_path, start_wall, first, last, args.lag_compare
        )
        return result
    out: dict[str, Any] = {"span_s": args.lag_compare}
    for name, (a, b) in (("first", first), ("last", last)):
        row = ib.psql(
            pg_args(args),
            "SELECT count(*) || '|' || coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY "
            "extract(epoch FROM processed_at - received_at)), 0) || '|' || coalesce("
            "percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - "
            "received_at)), 0) FROM events WHERE processed_at IS NOT NULL AND received_at >= "
            f"to_timestamp({start_wall + a}) AND received_at < to_timestamp({start_wall + b})",
            db=args.pg_db,
        )
        n, p50, p99 = row.split("|")
        out[name] = {
            "from_s": a,
            "to_s": b,
            "events": int(n),
            "p50_ms": round(float(p50) * 1000, 1),
            "p99_ms": round(float(p99) * 1000, 1),
        }
    for key in ("p50_ms", "p99_ms"):
        before, after = out["first"][key], out["last"][key]
        out[f"{key.removesuffix('_ms')}_ratio"] = round(after / before, 2) if before else None
    return out


AUTOVACUUM_TABLES = (
    "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'm') "
    "AND NOT coalesce(c.reloptions && ARRAY['autovacuum_enabled=off', "
    "'autovacuum_enabled=false'], false)"
)


def autovacuum_off(args: argparse.Namespace) -> dict[str, Any]:
    """Autovacuum off for every table of the database (partitions included, and their
    TOAST tables): what the server-wide ``autovacuum = off`` would do to hookd."""
    p = pg_args(args)
    tables = [t for t in ib.psql(p, AUTOVACUUM_TABLES, db=args.pg_db).splitlines() if t]
    for table in tables:
        ib.psql(
            p,
            f"ALTER TABLE {table} SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)",
            db=args.pg_db,
        )
    return {"tables_set_off": len(tables), **autovacuum_state(args)}


def autovacuum_state(args: argparse.Namespace) -> dict[str, Any]:
    """The server's setting, tables still vacuumed by it, and how often it ran here."""
    p = pg_args(args)
    left = [t for t in ib.psql(p, AUTOVACUUM_TABLES, db=args.pg_db).splitlines() if t]
    runs = ib.psql(
        p,
        "SELECT coalesce(sum(autovacuum_count), 0) || '|' || coalesce(sum(autoanalyze_count), 0)"
        " FROM pg_stat_user_tables",
        db=args.pg_db,
    )
    vacuums, analyzes = runs.split("|")
    return {
        "server_autovacuum": ib.psql(p, "SHOW autovacuum", db=args.pg_db),
        "tables_with_autovacuum": left,
        "autovacuum_runs": int(vacuums),
        "autoanalyze_runs": int(analyzes),
    }


# --------------------------------------------------------------------------- targets


def log_problems(path: Path) -> list[str]:
    """Lines at WARNING or above (hookd logs at WARNING here), not start-up banners."""
    return [ln for ln in ib.problem_lines(path) if not ln.startswith("hookd:")][:50]


def hookd_env(args: argparse.Namespace, work: Path, **extra: str) -> dict[str, str]:
    """Everything ``hookd serve`` (and the worker) get: the sources, quiet logs, no
    scheduled reconciliation, the no-op handler importable; ``--hookd-env`` last."""
    (work / "sources.toml").write_text(SOURCES_TOML, encoding="utf-8")
    settings = {
        "HOOKD_CONFIG": str(work / "sources.toml"),
        "HOOKD_LOG_LEVEL": "WARNING",
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "PYTHONPATH": str(REPO_DIR),  # bench.handlers:noop
    }
    return ib.clean_env(**(settings | extra | dict(args.hookd_env)))


def db_upgrade(work: Path, env: dict[str, str]) -> None:
    upgrade = subprocess.run(
        [sys.executable, "-m", "hookd.cli", "db", "upgrade"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if upgrade.returncode != 0:
        raise RuntimeError(f"hookd db upgrade failed:\n{upgrade.stdout}{upgrade.stderr}")


def start_pg_redis(
    args: argparse.Namespace, work: Path, stack: contextlib.ExitStack, result: dict[str, Any]
) -> tuple[ib.Server, subprocess.Popen[bytes] | None, Path | None, Probe]:
    """PostgreSQL (a fresh database), a private Redis, ``hookd serve`` and one worker."""
    p = pg_args(args)
    ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)")
    ib.psql(p, f"CREATE DATABASE {args.pg_db}")
    if not args.keep:
        stack.callback(lambda: ib.psql(p, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)"))
    redis = start_redis()
    stack.callback(stop_proc, redis.proc)
    env = hookd_env(
        args,
        work,
        HOOKD_DATABASE_URL=(
            f"postgresql+asyncpg://{args.pg_user}@{args.pg_host}:{args.pg_port}/{args.pg_db}"
        ),
        HOOKD_REDIS_URL=redis.url,
        HOOKD_WORKER_METRICS_PORT="0",
    )
    db_upgrade(work, env)
    if args.autovacuum_off:
        result["autovacuum"] = autovacuum_off(args)
    server = ib.start_server("hookd", work, env)
    server.pg_db = args.pg_db
    stack.callback(ib.stop_server, server)
    worker_log = work / "worker.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "hookd.cli", "worker"],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    stack.callback(stop_proc, worker)
    print(
        f"[hookd] serve pid {server.proc.pid} on port {server.port}, worker pid {worker.pid}, "
        f"redis port {redis.port}, database {args.pg_db}",
        flush=True,
    )
    return server, worker, worker_log, Probe(server.proc.pid, worker.pid, args.pg_db, pg_dsn(args))


def start_quickstart(
    args: argparse.Namespace, work: Path, stack: contextlib.ExitStack
) -> tuple[ib.Server, subprocess.Popen[bytes] | None, Path | None, Probe]:
    """The Quickstart default: ``hookd serve`` alone on a SQLite file in the run folder,
    no Redis, no worker, hookd's default settings otherwise."""
    path = work / "hookd.db"
    for suffix in ("", "-wal", "-shm", "-turn"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    args.sqlite_path = path
    env = hookd_env(args, work, HOOKD_DATABASE_URL=f"sqlite+aiosqlite:///{path}")
    db_upgrade(work, env)
    server = ib.start_server("hookd", work, env)
    stack.callback(ib.stop_server, server)
    print(
        f"[hookd] quickstart: serve pid {server.proc.pid} on port {server.port}, SQLite file "
        f"{path.name} in the run folder, no Redis, no worker",
        flush=True,
    )
    return server, None, None, Probe(server.proc.pid, sqlite_path=path)


def soak_hookd(
    args: argparse.Namespace, work: Path, pool_file: Path, stack: contextlib.ExitStack
) -> dict[str, Any]:
    result: dict[str, Any] = {"target": "hookd", "deployment": args.deployment}
    if quickstart(args):
        server, worker, worker_log, probe = start_quickstart(args, work, stack)
    else:
        server, worker, worker_log, probe = start_pg_redis(args, work, stack, result)
    # What processes the events: the worker, or serve itself.
    processor = worker if worker is not None else server.proc
    with_processing = "worker running" if worker is not None else "serve processing"
    nonces = ib.Nonces()
    if args.rate is None:
        # The soak rate is a fraction of what this deployment sustains end to end:
        # the receiver's maximum (wrk, with processing running), or, if lower, the
        # rate at which that burst was both stored and processed.
        common = {"connections": 64, "threads": 1, "timeout_s": args.timeout}
        ib.run_wrk(server, pool_file, nonces.next(), duration=args.measure_warmup, **common)
        drained, left = wait_drained(args, processor, args.drain_timeout)
        if left:
            raise RuntimeError(f"{left} warm-up events not processed after {drained:.0f} s")
        cpu: dict[str, float] = {}
        began = time.time()
        run = ib.run_wrk(server, pool_file, nonces.next(), duration=args.measure, cpu=cpu, **common)
        run.pop("wrk_text", None)
        run["cpu"] = cpu
        drained, left = wait_drained(args, processor, args.drain_timeout)
        if left:
            raise RuntimeError(f"{left} events of the max run not processed after {drained:.0f} s")
        e2e = end_to_end_rate(args, began)
        measured = {"ack_rps": run["rps"], "end_to_end": e2e, "wrk": run}
        result["max_measurement"] = measured
        if run["non_2xx"] or sum(run["socket_errors"].values()):
            raise RuntimeError(
                f"max measurement had errors: {run['statuses']} {run['socket_errors']}"
            )
        bound = min(run["rps"], e2e["events_per_s"] or run["rps"])
        measured["basis"] = "ack" if bound == run["rps"] else "end_to_end"
        measured["max_rps"] = bound
        args.rate = round(args.fraction * bound, 1)
        print(
            f"[hookd] max: receiver {run['rps']:.0f} req/s (wrk, 64 connections, "
            f"{with_processing}); stored and processed {e2e['events_per_s']:.0f} events/s end "
            f"to end; soak rate {args.fraction:.0%} of the lower: {args.rate:.0f} req/s",
            flush=True,
        )
    drained, left = wait_drained(args, processor, args.drain_timeout)
    if left:
        raise RuntimeError(f"{left} events not processed before the soak")
    baseline = count_events(args)
    if args.autovacuum_off:  # and the partitions serve and worker made at their start
        first = result["autovacuum"]["tables_set_off"]
        result["autovacuum"] = autovacuum_off(args)
        result["autovacuum"]["tables_set_off"] += first
    requests = ib.build_requests(ib.read_pool(pool_file), server.port)
    gen, samples = run_soak(server.port, requests, nonces.next(), probe, args, "hookd")
    summary = summarize(gen, samples, args)
    summary["backlog"] = backlog_summary(samples, args, gen.rate)
    what = "the worker" if worker is not None else "serve"
    print(f"[hookd] soak done; waiting for {what} to finish the backlog", flush=True)
    drained, left = wait_drained(args, processor, args.drain_timeout)
    result["drain_after_soak"] = {"seconds": round(drained, 1), "left": left}
    lost = sum(gen.socket_errors.values())
    result["checks"] = db_checks(args, baseline, summary["accepted_2xx"], lost)
    by_window = {w["window"]: w for w in db_windows(args, gen.start_wall)}
    for i, s in enumerate(samples):
        s |= {k: v for k, v in by_window.get(i, {}).items() if k != "window"}
    summary["processing_lag_ms"] = overall_lag(args, gen.start_wall)
    summary["lag_drift"] = lag_drift(args, gen.start_wall)
    if args.autovacuum_off:
        result["autovacuum"] |= {"at_end": autovacuum_state(args)}
    result["summary"] = summary
    result["samples"] = samples
    result["server_exit_code"] = ib.stop_server(server)
    result["server_log_problems"] = log_problems(server.log)
    if worker is not None and worker_log is not None:
        result["worker_exit_code"] = stop_proc(worker)
        result["worker_log_problems"] = log_problems(worker_log)
    return result


def soak_bare(args: argparse.Namespace, work: Path, pool_file: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"target": "bare"}
    server = ib.start_server("bare", work, ib.clean_env())
    try:
        print(f"[bare] serving on port {server.port} (pid {server.proc.pid})", flush=True)
        if args.rate is None:
            common = {"connections": 64, "threads": 1, "timeout_s": args.timeout}
            run = ib.run_wrk(server, pool_file, ib.Nonces().next(), duration=args.measure, **common)
            run.pop("wrk_text", None)
            result["max_measurement"] = run
            args.rate = round(args.fraction * run["rps"], 1)
        requests = ib.build_requests(ib.read_pool(pool_file), server.port)
        gen, samples = run_soak(
            server.port, requests, ib.Nonces().next(), Probe(server.proc.pid), args, "bare"
        )
        result["summary"] = summarize(gen, samples, args)
        result["samples"] = samples
    finally:
        result["server_exit_code"] = ib.stop_server(server)
    result["server_log_problems"] = log_problems(server.log)
    return result


def pg_dsn(args: argparse.Namespace) -> str:
    return f"postgresql://{args.pg_user}@{args.pg_host}:{args.pg_port}/{args.pg_db}"


# --------------------------------------------------------------------------- verdicts


def errors_of(result: dict[str, Any]) -> list[str]:
    t = result["target"]
    out = []
    if "error" in result:
        return [f"{t}: {result['error']}"]
    s = result.get("summary", {})
    if s.get("non_2xx"):
        out.append(f"{t}: {s['non_2xx']} non-2xx answers {s['statuses']}")
    if s.get("statuses", {}).get(200):
        out.append(f"{t}: {s['statuses'][200]} answered 200 (duplicate?)")
    if sum(s.get("socket_errors", {}).values()):
        out.append(f"{t}: socket errors {s['socket_errors']}")
    drain = result.get("drain_after_soak")
    if drain and drain["left"]:
        out.append(
            f"{t}: {drain['left']} events still not processed {drain['seconds']:.0f} s after"
        )
    c = result.get("checks")
    if c and not c["stored_ok"]:
        out.append(f"{t}: {c['rows_added']} rows added for {c['accepted_2xx']} 2xx answers")
    if c and not c["once_ok"]:
        out.append(
            f"{t}: not processed exactly once: {c['processed_attempts_not_1']} processed with "
            f"attempts <> 1, {c['dead']} dead, {c['ledger_rows']} ledger rows for "
            f"{c['processed']} processed"
        )
    for key in ("server_log_problems", "worker_log_problems"):
        if result.get(key):
            out.append(f"{t}: {key.replace('_', ' ')}: {result[key][0][:200]}")
    for key in ("server_exit_code", "worker_exit_code"):
        if result.get(key) not in (0, None):
            out.append(f"{t}: {key.replace('_', ' ')} {result[key]}")
    return out


def warnings_of(result: dict[str, Any]) -> list[str]:
    t = result["target"]
    s = result.get("summary")
    if not s:
        return []
    out = []
    if s["other_cpu_pct_mean"] > ib.BACKGROUND_WARN_PCT:
        out.append(f"{t}: other processes used {s['other_cpu_pct_mean']:.0f}% of a core on average")
    drift = s.get("lag_drift", {}).get("p99_ratio")
    if drift is not None and drift > LAG_DRIFT_WARN:
        out.append(
            f"{t}: processing lag p99 drifted {drift:.2f}x from the first to the last "
            f"{s['lag_drift']['span_s']:.0f} s"
        )
    b = s.get("backlog") or {}
    if b and not b["bounded"]:
        out.append(
            f"{t}: the backlog grew: {b['first_mean']:,.0f} events waiting on average in the "
            f"first window, {b['last_mean']:,.0f} in the last (processing fell behind the rate)"
        )
    backlog = [x.get("backlog", 0) for x in result.get("samples", [])]
    if backlog and backlog[-1] > max(100.0, s["rate_asked"] * BACKLOG_FLOOR_S):
        out.append(
            f"{t}: {backlog[-1]:,} events waiting for processing at the end of the soak "
            "(processing fell behind the rate)"
        )
    lagging = [x for x in result.get("samples", []) if (x.get("send_lag_p99_ms") or 0) > 10]
    if lagging:
        out.append(
            f"{t}: in {len(lagging)} of {len(result['samples'])} windows 1% of requests went "
            "out more than 10 ms late (all connections busy, or the generator short of CPU)"
        )
    return out


def exactly_once(c: dict[str, Any]) -> str:
    if not (c["stored_ok"] and c["once_ok"]):
        return "NO"
    if not c["all_processed"]:
        return f"so far ({c['rows_total'] - c['processed']:,} not processed)"
    return "yes"


def num(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| target | rate asked | rate got | ack p50 ms | ack p99 ms | p99 from due ms "
        "| p99 first → last ms | drift | RSS server first → last MB | growth "
        "| RSS worker first → last MB | growth | backlog first → last | lag p99 ms "
        "| exactly once |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | --- | ---: | --- "
        "| ---: | --- |",
    ]
    for r in results:
        target = r["target"]
        if r.get("deployment") == "quickstart":
            target += " (quickstart)"
        if "summary" not in r:
            lines.append(f"| {target} | failed: {r.get('error', '?')[:80]} |" + " |" * 13)
            continue
        s = r["summary"]
        lat = s["latency"]
        cells = []
        for key in ("server", "worker"):
            g = s["rss"].get(key) or {}
            cells.append(f"{num(g.get('first_mb'), '.0f')} → {num(g.get('last_mb'), '.0f')}")
            cells.append(num(g.get("growth_pct"), "+.1f", "%"))
        b = s.get("backlog") or {}
        cells.append(
            f"{num(b.get('first_mean'), ',.0f')} → {num(b.get('last_mean'), ',.0f')}"
            + ("" if not b or b["bounded"] else " (growing)")
        )
        c = r.get("checks")
        once = "-" if c is None else exactly_once(c)
        lines.append(
            f"| {target} | {s['rate_asked']:,.0f} | {s['rate_achieved']:,.0f} "
            f"| {num(s['ack_ms']['p50'])} | {num(s['ack_ms']['p99'])} "
            f"| {num(s['ack_ms']['p99_from_due'])} "
            f"| {num(lat['first']['p99_from_due_ms'])} → {num(lat['last']['p99_from_due_ms'])} "
            f"| {num(lat['drift_ratio'], '.2f', 'x')} | {' | '.join(cells)} "
            f"| {num(s.get('processing_lag_ms', {}).get('p99_ms'), ',.0f')} | {once} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def key_value(raw: str) -> tuple[str, str]:
    result: tuple[str, str] = ib.key_value(raw)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Soak: hookd (PostgreSQL + Redis + one worker, or the Quickstart default: "
        "SQLite, serve alone; no-op handler) and the bare app under the same steady "
        "open-loop load, sampled every few seconds."
    )
    p.add_argument(
        "--deployment",
        choices=tuple(DEPLOYMENTS),
        default="pg-redis",
        help="pg-redis (default): PostgreSQL + a private Redis + one hookd worker; "
        "quickstart: a SQLite file, hookd serve alone with its defaults (no Redis, no worker)",
    )
    p.add_argument("--quick", action="store_true", help="1 minute per target, 5 s samples")
    p.add_argument("--minutes", type=float, help="soak length per target (default 10; quick 1)")
    p.add_argument("--interval", type=float, help="seconds per sample (default 10; quick 5)")
    p.add_argument(
        "--warmup",
        type=float,
        help="seconds left out before the first comparison window (default 60; quick 10)",
    )
    p.add_argument(
        "--compare",
        type=float,
        help="length of the first and last comparison windows, s (default 60; quick 20)",
    )
    p.add_argument("--rate", type=float, help="req/s; default: --fraction times the measured max")
    p.add_argument(
        "--fraction",
        type=float,
        default=0.5,
        help="of the max rate (default 0.5; 1.0: the max itself)",
    )
    p.add_argument("--measure", type=float, help="seconds of the max wrk run (default 10; quick 3)")
    p.add_argument("--measure-warmup", type=float, default=2.0)
    p.add_argument("--connections", type=int, default=64, help="open-loop connections (64)")
    p.add_argument("--timeout", type=float, default=10.0, help="request timeout, s (10)")
    p.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds to wait for the worker to finish a backlog (default 600; quick 90)",
    )
    p.add_argument("--targets", default="hookd,bare", help="hookd, bare or both (default)")
    p.add_argument(
        "--autovacuum-off",
        action="store_true",
        help="turn autovacuum off for every table and partition of hookd's database "
        "(pg-redis only)",
    )
    p.add_argument(
        "--lag-compare",
        type=float,
        help="seconds of the first and last spans whose processing lag is compared "
        "(default 300, or a third of the run if shorter)",
    )
    p.add_argument("--pool", type=int, default=1024, help="distinct signed bodies (1024)")
    p.add_argument(
        "--hookd-env", action="append", default=[], type=key_value, metavar="HOOKD_KEY=VALUE"
    )
    p.add_argument("--pg-host", default="127.0.0.1")
    p.add_argument("--pg-port", type=int, default=5432)
    p.add_argument("--pg-user", default="postgres")
    p.add_argument("--pg-db", default="hookd_bench_soak", help="dropped and created afresh")
    p.add_argument(
        "--out",
        type=Path,
        help="results (default bench/results/soak.json; quickstart: soak_quickstart.json)",
    )
    p.add_argument("--keep", action="store_true", help="keep the run folder and the database")
    args = p.parse_args(argv)
    if args.deployment == "quickstart" and args.autovacuum_off:
        # One line, no usage text: the option is understood, it only has nothing to act on.
        print(
            "soak.py: --autovacuum-off needs --deployment pg-redis (PostgreSQL); the "
            "quickstart deployment runs on SQLite, which has no autovacuum: drop the option",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if args.fraction <= 0:
        p.error("--fraction: more than 0 (1.0 is the max rate)")
    if args.out is None:
        name = "soak_quickstart.json" if args.deployment == "quickstart" else "soak.json"
        args.out = BENCH_DIR / "results" / name
    args.sqlite_path = None  # quickstart: set when its file is made
    defaults = (
        {"minutes": 1.0, "interval": 5.0, "warmup": 10.0, "compare": 20.0, "measure": 3.0}
        | {"drain_timeout": 90.0}
        if args.quick
        else {"minutes": 10.0, "interval": 10.0, "warmup": 60.0, "compare": 60.0, "measure": 10.0}
        | {"drain_timeout": 600.0}
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.seconds = round(args.minutes * 60 / args.interval) * args.interval
    if args.lag_compare is None:
        args.lag_compare = min(300.0, (args.seconds - args.warmup) / 3)
    if args.warmup + 2 * args.lag_compare > args.seconds + 1e-9:
        p.error("--warmup + 2 * --lag-compare must fit in --minutes")
    if args.warmup + 2 * args.compare > args.seconds + 1e-9:
        p.error("--warmup + 2 * --compare must fit in --minutes")
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not set(args.targets) <= {"hookd", "bare"} or not args.targets:
        p.error("--targets: hookd, bare or hookd,bare")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.pg_db):
        p.error("--pg-db: use a plain lower-case name")
    if not args.pg_host.startswith("127.") and args.pg_host not in ("localhost", "::1"):
        p.error("--pg-host: this benchmark only talks to the loopback interface")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    needs = ("wrk", "psql", "redis-server") if args.deployment == "pg-redis" else ("wrk",)
    for tool in needs if "hookd" in args.targets else ("wrk",):
        if shutil.which(tool) is None:
            print(f"{tool} not found", file=sys.stderr)
            return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = BENCH_DIR / "results" / f"soak-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    pool_file = work / "pool.tsv"
    ib.write_pool(pool_file, args.pool)
    config = {
        k: getattr(args, k)
        for k in (
            "deployment",
            "minutes",
            "seconds",
            "interval",
            "warmup",
            "compare",
            "fraction",
            "rate",
            "connections",
            "timeout",
            "quick",
            "targets",
            "autovacuum_off",
            "lag_compare",
        )
    }
    config["hookd_env"] = dict(args.hookd_env)
    print(f"hookd soak: {config}", flush=True)
    results: list[dict[str, Any]] = []
    interrupted = False
    with sigterm_as_interrupt():
        try:
            for target in args.targets:
                with contextlib.ExitStack() as stack:
                    try:
                        if target == "hookd":
                            results.append(soak_hookd(args, work, pool_file, stack))
                        else:
                            results.append(soak_bare(args, work, pool_file))
                    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                        print(f"[{target}] FAILED: {exc}", file=sys.stderr, flush=True)
                        results.append({"target": target, "error": str(exc)[:500]})
        except KeyboardInterrupt:
            interrupted = True
            dropped = "dropped the database" if args.deployment == "pg-redis" else "done"
            print(f"interrupted: stopped the servers, {dropped}", file=sys.stderr)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    if interrupted:
        return 130
    found = [e for r in results for e in errors_of(r)]
    noted = [w for r in results for w in warnings_of(r)]
    report = {
        "when": stamp,
        "config": config | {"rate": args.rate},
        "environment": ib.environment(),
        "results": results,
        "table": table(results),
        "errors": found,
        "warnings": noted,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(report["table"])
    print()
    for title, lines in (("WARNINGS", noted), ("ERRORS", found)):
        if lines:
            print(f"{title}:")
            for line in lines:
                print(f"  - {line}")
    for r in results:
        drift = r.get("summary", {}).get("lag_drift")
        if drift:
            print(
                f"[{r['target']}] processing lag, first → last {drift['span_s']:.0f} s: "
                f"p50 {drift['first']['p50_ms']} → {drift['last']['p50_ms']} ms "
                f"({drift['p50_ratio']}x), p99 {drift['first']['p99_ms']} → "
                f"{drift['last']['p99_ms']} ms ({drift['p99_ratio']}x)"
                + (f"; autovacuum {r['autovacuum']}" if "autovacuum" in r else "")
            )
    if not found:
        print("no errors: every answer a 2xx; hookd stored every event, processed each once")
    print(f"\nresults: {args.out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
