"""Acknowledgement throughput and latency of signed GitHub webhooks, in one run:

* ``bare``     — ``bench/bare_app.py``: Starlette reads the body and answers 202;
* ``sqlite``   — hookd on SQLite (WAL, synchronous=FULL);
* ``postgres`` — hookd on PostgreSQL (synchronous_commit=on), 127.0.0.1:5432.

Each target runs in its own uvicorn process (1 process, no access log, loopback,
the settings ``hookd serve`` uses) on a free port. The same load generator,
``wrk`` with ``bench/wrk_requests.lua``, drives each one: a short warm-up, then
the measured run. Every request carries its own X-GitHub-Delivery (hookd would
answer a repeated one with a 200 duplicate). For hookd, the number of rows the
run added to ``events`` is checked against the number of 202s that wrk saw.

Then, for each hookd target, a fixed-rate run at ``--fixed-rate`` (default 70%)
of the rate it reached, with a small open-loop generator written here (Debian has
no wrk2): latency at a sustainable load rather than at saturation.

    .venv/bin/python bench/ingest.py              # full run, about 3 minutes
    .venv/bin/python bench/ingest.py --quick      # smoke test, about 1 minute
    .venv/bin/python bench/ingest.py --rounds 3   # shared machine: keep the quietest round

Delivery ids are added by the Lua script (see bench/wrk_requests.lua), so wrk never
runs out of unique requests. CPU use of the server, PostgreSQL, the load generator and
everything else is measured from /proc; see bench/README.md for what each column means.

Needs ``wrk`` (``apt-get install -y wrk``), ``psql`` and a PostgreSQL server that
trusts user ``postgres`` on 127.0.0.1:5432 (``--targets bare,sqlite`` without it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
LUA_SCRIPT = BENCH_DIR / "wrk_requests.lua"
SECRET = "bench-secret"
SOURCE = "github"
SOURCES_TOML = f"""[[sources]]
name = "{SOURCE}"
provider = "github"
secrets = ["{SECRET}"]
"""
TARGETS = ("bare", "sqlite", "postgres")
# Lets the fixed-rate run read hookd's own ack and commit histograms from /metrics.
METRICS_TOKEN = "bench-metrics-token"
# Other processes using more than this (percent of one core) make a run suspect.
BACKGROUND_WARN_PCT = 20.0
# A fixed-rate generator that sends 1% of its requests later than this is behind.
SEND_LAG_WARN_MS = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- requests


def issue_payload(seq: int, rng: random.Random) -> dict[str, Any]:
    """A trimmed but realistic ``issues.opened`` delivery (about 1 KB as JSON)."""
    created = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(30_000_000))
    stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    login = rng.choice(["octocat", "hubot", "monalisa", "defunkt", "mojombo"])
    user = {
        "login": login,
        "id": 583231 + rng.randrange(10_000),
        "type": "User",
        "site_admin": False,
    }
    return {
        "action": "opened",
        "issue": {
            "url": f"https://api.github.com/repos/octo-org/hello-world/issues/{seq}",
            "html_url": f"https://github.com/octo-org/hello-world/issues/{seq}",
            "id": 1_900_000_000 + seq,
            "node_id": f"I_kwDOBench{seq:08d}",
            "number": seq,
            "title": f"Webhook deliveries time out under load (report #{seq})",
            "user": user,
            "labels": [{"id": 208045946, "name": "bug", "color": "d73a4a", "default": True}],
            "state": "open",
            "locked": False,
            "comments": 0,
            "created_at": stamp,
            "updated_at": stamp,
            "author_association": "MEMBER",
            "body": "Steps to reproduce: send many signed deliveries; expected: 202 for each.",
        },
        "repository": {
            "id": 1296269,
            "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5",
            "name": "hello-world",
            "full_name": "octo-org/hello-world",
            "private": False,
            "owner": {"login": "octo-org", "id": 9919, "type": "Organization"},
            "html_url": "https://github.com/octo-org/hello-world",
            "default_branch": "main",
        },
        "sender": user,
    }


def write_pool(path: Path, size: int, seed: int = 1) -> int:
    """``size`` signed bodies, one a line: ``<hex HMAC-SHA256>\\t<json>``. Returns mean bytes."""
    rng = random.Random(seed)
    total = 0
    with path.open("w", encoding="utf-8") as out:
        for seq in range(1, size + 1):
            body = json.dumps(issue_payload(seq, rng), separators=(", ", ": "))
            assert "\t" not in body
            assert "\n" not in body
            digest = hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
            out.write(f"{digest}\t{body}\n")
            total += len(body)
    return total // size


def read_pool(path: Path) -> list[tuple[str, bytes]]:
    pool = []
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, body = line.partition("\t")
        pool.append((digest, body.encode()))
    return pool


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any HOOKD_* a developer may have set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKD_")}
    env.update(extra)
    return env


@dataclass
class Server:
    target: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    pg_db: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{SOURCE}"


def start_server(target: str, work: Path, env: dict[str, str]) -> Server:
    port = free_port()
    log = work / f"{target}.log"
    if target == "bare":
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "bare_app:app",
            "--app-dir",
            str(BENCH_DIR),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
            "--no-server-header",
        ]
    else:
        # `hookd serve` runs uvicorn in-process with workers=1, access_log=False,
        # log_level="warning", server_header=False: the flags given to the bare app.
        cmd = [
            sys.executable,
            "-m",
            "hookd.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(target, proc, port, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{target} server exited with {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"{target} server not healthy after 60 s:\n{tail(log)}")


def stop_server(server: Server) -> int:
    """SIGINT (uvicorn's graceful shutdown: hookd commits what is queued), then wait."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGINT)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    return server.proc.returncode


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def problem_lines(path: Path) -> list[str]:
    """Server output after start-up at WARNING or above (hookd logs at WARNING here)."""
    keep = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("hookd: serving on") or not line.strip():
            continue
        keep.append(line)
    return keep


# --------------------------------------------------------------------------- CPU accounting


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and of its live descendants (0 if it is
    gone): hookd's SQLite writer process and `hookd serve`'s processor processes work
    for the server under test, and count as its CPU, not as another process's."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    total = 0.0
    for one, seconds in used.items():
        ancestor = one
        while ancestor > 1 and ancestor != pid:
            ancestor = parents.get(ancestor, 0)
        if ancestor == pid:
            total += seconds
    return total


POSTGRES_AUX = ("checkpointer", "background writer", "walwriter", "autovacuum launcher")


def postgres_cpu_s(dbname: str | None) -> float:
    """CPU seconds of the PostgreSQL backends serving ``dbname`` plus its shared
    writers (WAL writer, checkpointer...), not of backends serving anything else."""
    if dbname is None:
        return 0.0
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[stat.find("(") + 1 : stat.rfind(")")] != "postgres":
            continue
        if dbname in cmdline.split() or cmdline.rstrip().endswith(POSTGRES_AUX):
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK, sum(values) / CLK_TCK


def rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def cpu_meter(server_pid: int, pg_db: str | None, result: dict[str, float]) -> Iterator[None]:
    """Fill ``result`` with CPU use while the block runs, in percent of one core.

    load generator: this process (the fixed-rate generator runs in it) plus the
    children reaped meanwhile (wrk); other: whatever else kept the machine busy.
    """
    start = time.monotonic()
    srv0, pg0 = proc_cpu_s(server_pid), postgres_cpu_s(pg_db)
    gen0 = rusage_s(resource.RUSAGE_CHILDREN) + rusage_s(resource.RUSAGE_SELF)
    busy0, total0 = machine_busy_s()
    yield
    wall = time.monotonic() - start
    gen1 = rusage_s(resource.RUSAGE_CHILDREN) + rusage_s(resource.RUSAGE_SELF)
    busy1, total1 = machine_busy_s()
    server = 100 * (proc_cpu_s(server_pid) - srv0) / wall
    postgres = 100 * (postgres_cpu_s(pg_db) - pg0) / wall
    loadgen = 100 * (gen1 - gen0) / wall
    cores = os.cpu_count() or 1
    busy = 100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9)
    result["server_cpu_pct"] = round(server, 1)
    result["postgres_cpu_pct"] = round(postgres, 1)
    result["loadgen_cpu_pct"] = round(loadgen, 1)
    result["machine_busy_pct"] = round(busy, 1)
    result["other_cpu_pct"] = round(max(0.0, busy - server - postgres - loadgen), 1)


def background_busy_pct(wait_s: float, sample_s: float = 2.0) -> float:
    """How busy the machine is before a target starts (percent of one core),
    waiting up to ``wait_s`` for it to drop under ``BACKGROUND_WARN_PCT``."""
    deadline = time.monotonic() + wait_s
    while True:
        busy0, total0 = machine_busy_s()
        time.sleep(sample_s)
        busy1, total1 = machine_busy_s()
        cores = os.cpu_count() or 1
        busy = round(100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9), 1)
        if busy <= BACKGROUND_WARN_PCT or time.monotonic() >= deadline:
            return busy


# --------------------------------------------------------------------------- wrk


def wrk_version() -> str:
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    return (out.stdout + out.stderr).splitlines()[0].strip() if (out.stdout + out.stderr) else "?"


def run_wrk(
    server: Server,
    pool: Path,
    nonce: str,
    *,
    duration: float,
    connections: int,
    threads: int,
    timeout_s: float,
    cpu: dict[str, float] | None = None,
) -> dict[str, Any]:
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        f"--timeout={max(1, round(timeout_s))}s",
        "-s",
        str(LUA_SCRIPT),
        server.url,
        "--",
        str(pool),
        nonce,
    ]
    meter = (
        cpu_meter(server.proc.pid, server.pg_db, cpu)
        if cpu is not None
        else contextlib.nullcontext()
    )
    with meter:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    raw = json.loads(line.removeprefix("WRK_JSON "))
    statuses = {int(k): int(v) for k, v in raw["statuses"].items()}
    lat = {k: float(v) / 1000 for k, v in raw["latency_us"].items()}  # to milliseconds
    seconds = raw["duration_us"] / 1e6
    errors = {k: int(v) for k, v in raw["errors"].items()}
    non_2xx = sum(v for k, v in statuses.items() if not 200 <= k < 300)
    return {
        "seconds": round(seconds, 3),
        "requests": raw["requests"],
        "sent": raw["sent"],
        "in_flight_at_stop": max(0, raw["sent"] - raw["requests"]),
        "rps": round(raw["requests"] / seconds, 1),
        "statuses": statuses,
        "accepted_202": statuses.get(202, 0),
        "non_2xx": non_2xx,
        "socket_errors": {k: v for k, v in errors.items() if k != "status"},
        "latency_ms": {k: round(v, 3) for k, v in lat.items()},
        "wrk_text": done.stdout.replace(line, "").strip(),
    }


# --------------------------------------------------------------------------- fixed-rate generator


def build_requests(pool: list[tuple[str, bytes]], port: int) -> list[tuple[bytes, bytes]]:
    """Each pooled body as raw HTTP/1.1, split around the delivery id."""
    out = []
    for digest, body in pool:
        head = (
            f"POST /hooks/{SOURCE} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nUser-Agent: GitHub-Hookshot/hookd-bench\r\n"
            f"X-GitHub-Event: issues\r\nX-Hub-Signature-256: sha256={digest}\r\n"
            f"Content-Length: {len(body)}\r\nX-GitHub-Delivery: "
        ).encode()
        out.append((head, b"\r\n\r\n" + body))
    return out


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length, close = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[rank]


async def fixed_rate_run(
    port: int,
    requests: list[tuple[bytes, bytes]],
    nonce: str,
    *,
    rate: float,
    duration: float,
    connections: int,
    timeout_s: float,
) -> dict[str, Any]:
    """Open loop: request k is due at start + k/rate, whatever happened to the others.

    ``connections`` keep-alive connections take due requests in order. Latency is
    measured twice: from the moment the request was written (what a client sees)
    and from the moment it was due (counts time spent waiting for a free
    connection too, so a server that falls behind cannot hide it, as in wrk2).
    """
    # perf_counter, not loop.time(): uvloop's clock has millisecond steps and is
    # cached per loop iteration.
    clock = time.perf_counter
    total = int(rate * duration)
    start = clock() + 0.05
    state = {"next": 0, "last_sent": start}
    from_send: list[float] = []
    from_due: list[float] = []
    lag: list[float] = []
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()

    async def worker() -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while state["next"] < total:
            k = state["next"]
            state["next"] += 1
            due = start + k / rate
            wait = due - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            head, rest = requests[k % len(requests)]
            delivery = f"{nonce}-ffff-4000-8000-{k:012x}".encode()
            try:
                if writer is None or reader is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                sent = clock()
                writer.write(head + delivery + rest)
                async with asyncio.timeout(timeout_s):
                    status, close = await read_response(reader)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                errors[type(exc).__name__] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            now = clock()
            from_send.append(now - sent)
            from_due.append(now - due)
            lag.append(max(0.0, sent - due))
            state["last_sent"] = max(state["last_sent"], sent)
            statuses[status] += 1
            if close and writer is not None:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = clock() - start
    sending = max(state["last_sent"] - start, 1e-9)
    from_send.sort()
    from_due.sort()
    lag.sort()

    def ms(values: list[float], pct: float) -> float:
        return round(1000 * percentile(values, pct), 3)

    return {
        "rate_asked": round(rate, 1),
        # Answered requests over the time it took to send them all.
        "rate_achieved": round(len(from_send) / sending, 1),
        "seconds": round(elapsed, 3),
        "requests": len(from_send),
        "statuses": dict(statuses),
        "accepted_202": statuses.get(202, 0),
        "non_2xx": sum(v for k, v in statuses.items() if not 200 <= k < 300),
        "socket_errors": dict(errors),
        "latency_ms": {
            "p50": ms(from_send, 50),
            "p90": ms(from_send, 90),
            "p99": ms(from_send, 99),
            "p999": ms(from_send, 99.9),
            "max": ms(from_send, 100),
        },
        "latency_from_due_ms": {
            "p50": ms(from_due, 50),
            "p99": ms(from_due, 99),
            "max": ms(from_due, 100),
        },
        # How late the generator wrote requests (timer granularity, or no free
        # connection because the server fell behind).
        "send_lag_ms": {"p50": ms(lag, 50), "p99": ms(lag, 99), "max": ms(lag, 100)},
    }


def run_fixed_rate(**kwargs: Any) -> dict[str, Any]:
    if uvloop is None:  # the plain loop works, it only costs the generator more CPU
        return asyncio.run(fixed_rate_run(**kwargs))
    return uvloop.run(fixed_rate_run(**kwargs))


# --------------------------------------------------------------------------- databases


@dataclass
class Database:
    url: str
    count: Callable[[], int]
    # (created_at as epoch seconds, rows): hookd stamps every row of one batch
    # with the same created_at, so these are the group commits.
    batches: Callable[[], list[tuple[float, int]]]
    # Rows by processing status (pending, processed...) once the server stopped.
    statuses: Callable[[], dict[str, int]]
    describe: str
    version: str = ""


def sqlite_db(work: Path) -> Database:
    path = work / "hookd.db"
    for suffix in ("", "-wal", "-shm", "-turn"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    def count() -> int:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])

    def batches() -> list[tuple[float, int]]:
        sql = "SELECT created_at, count(*) FROM events GROUP BY created_at"
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            rows = conn.execute(sql).fetchall()
        # SQLite keeps hookd's UTC datetimes without a zone.
        return [(datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp(), n) for t, n in rows]

    def statuses() -> dict[str, int]:
        sql = "SELECT status, count(*) FROM events GROUP BY status"
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            return {str(k): int(v) for k, v in conn.execute(sql).fetchall()}

    return Database(
        f"sqlite+aiosqlite:///{path}",
        count,
        batches,
        statuses,
        "SQLite file in the run folder",
        sqlite3.sqlite_version,
    )


def psql(args: argparse.Namespace, sql: str, db: str = "postgres") -> str:
    cmd = ["psql", "-h", args.pg_host, "-p", str(args.pg_port), "-U", args.pg_user, "-d", db]
    cmd += ["-v", "ON_ERROR_STOP=1", "-Atq", "-c", sql]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=clean_env())
    if done.returncode != 0:
        raise RuntimeError(f"psql failed: {done.stderr.strip()}")
    return done.stdout.strip()


def postgres_db(args: argparse.Namespace) -> Database:
    if shutil.which("psql") is None:
        raise RuntimeError("psql not found (apt-get install -y postgresql-client)")
    name = args.pg_db
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise RuntimeError(f"--pg-db {name!r}: use a plain lower-case name")
    psql(args, f"DROP DATABASE IF EXISTS {name}")
    psql(args, f"CREATE DATABASE {name}")
    version = psql(args, "SHOW server_version")
    settings = psql(
        args,
        "SELECT string_agg(name || '=' || setting, ' ') FROM pg_settings "
        "WHERE name IN ('synchronous_commit', 'fsync', 'wal_sync_method')",
    )

    def count() -> int:
        return int(psql(args, "SELECT count(*) FROM events", db=name))

    def batches() -> list[tuple[float, int]]:
        sql = (
            "SELECT extract(epoch FROM created_at)::text || '|' || count(*) FROM events "
            "GROUP BY created_at"
        )
        out = []
        for line in psql(args, sql, db=name).splitlines():
            when, _, rows = line.partition("|")
            out.append((float(when), int(rows)))
        return out

    def statuses() -> dict[str, int]:
        sql = "SELECT status || '|' || count(*) FROM events GROUP BY status"
        pairs = [line.partition("|") for line in psql(args, sql, db=name).splitlines()]
        return {k: int(v) for k, _, v in pairs}

    url = f"postgresql+asyncpg://{args.pg_user}@{args.pg_host}:{args.pg_port}/{name}"
    return Database(url, count, batches, statuses, f"PostgreSQL {version} ({settings})", version)


def batch_stats(batches: list[tuple[float, int]], start: float, end: float) -> dict[str, Any]:
    """Group commits stamped between ``start`` and ``end`` (epoch seconds)."""
    sizes = sorted(n for when, n in batches if start <= when < end)
    if not sizes:
        return {"batches": 0}
    return {
        "batches": len(sizes),
        "commits_per_s": round(len(sizes) / (end - start), 1),
        "mean_rows": round(sum(sizes) / len(sizes), 1),
        "p50_rows": percentile([float(n) for n in sizes], 50),
        "max_rows": sizes[-1],
    }


def settled_count(count: Callable[[], int], timeout_s: float = 15.0) -> int:
    """The row count once it stops moving (commits of requests still in flight)."""
    previous = count()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        current = count()
        if current == previous:
            return current
        previous = current
    return previous


# --------------------------------------------------------------------------- one target


@dataclass
class Nonces:
    """Distinct 8-hex-digit prefixes for the delivery ids of each load run."""

    base: int = field(default_factory=lambda: random.SystemRandom().randrange(1 << 24))
    used: int = 0

    def next(self) -> str:
        self.used += 1
        return f"{self.base:06x}{self.used:02x}"


def bench_target(
    target: str, args: argparse.Namespace, work: Path, pool_file: Path, nonces: Nonces
) -> dict[str, Any]:
    result: dict[str, Any] = {"target": target}
    db: Database | None = None
    env = clean_env()
    if target != "bare":
        db = sqlite_db(work) if target == "sqlite" else postgres_db(args)
        result["database"] = db.describe
        env = clean_env(
            HOOKD_CONFIG=str(work / "sources.toml"),
            HOOKD_DATABASE_URL=db.url,
            HOOKD_LOG_LEVEL="WARNING",
            HOOKD_METRICS_TOKEN=METRICS_TOKEN,
            **dict(args.hookd_env),
        )
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

    result["background_busy_pct"] = background_busy_pct(args.wait_quiet)
    if result["background_busy_pct"] > BACKGROUND_WARN_PCT:
        print(
            f"[{target}] WARNING: the machine is already {result['background_busy_pct']:.0f}% busy "
            "(of one core) before the server starts; numbers will be low and noisy",
            flush=True,
        )
    server = start_server(target, work, env)
    if target == "postgres":
        server.pg_db = args.pg_db
    print(f"[{target}] serving on port {server.port} (pid {server.proc.pid})", flush=True)
    try:
        common = {
            "connections": args.connections,
            "threads": args.threads,
            "timeout_s": args.timeout,
        }
        if args.warmup > 0:
            warm = run_wrk(server, pool_file, nonces.next(), duration=args.warmup, **common)
            result["warmup"] = {k: warm[k] for k in ("requests", "rps", "statuses", "non_2xx")}
        rows_before = settled_count(db.count) if db else 0
        cpu: dict[str, float] = {}
        began = time.time()
        run = run_wrk(server, pool_file, nonces.next(), duration=args.duration, cpu=cpu, **common)
        run["window"] = (began, time.time())
        add_per_request_cpu(cpu, run["rps"])
        run["cpu"] = cpu
        result["max"] = run
        lat = run["latency_ms"]
        print(
            f"[{target}] {run['rps']:.0f} req/s  p50 {lat['p50']:.2f} ms  p99 {lat['p99']:.2f} ms  "
            f"statuses {run['statuses']}  socket errors {run['socket_errors']}  cpu {cpu}",
            flush=True,
        )
        if db:
            rows_after = settled_count(db.count)
            result["max"]["rows_added"] = rows_after - rows_before
            if args.fixed_rate > 0:
                rate = args.fixed_rate * run["rps"]
                print(
                    f"[{target}] fixed rate {rate:.0f} req/s for {args.fixed_duration:.0f} s",
                    flush=True,
                )
                histograms_before = scrape_histograms(server.port)
                fixed = fixed_rate_measured(server, args, pool_file, nonces, rate)
                fixed["server"] = server_side(histograms_before, scrape_histograms(server.port))
                result["fixed"] = fixed
                fl = fixed["latency_ms"]
                print(
                    f"[{target}] fixed {fixed['rate_achieved']:.0f} req/s  p50 {fl['p50']:.2f} ms  "
                    f"p99 {fl['p99']:.2f} ms  statuses {fixed['statuses']}  "
                    f"errors {fixed['socket_errors']}",
                    flush=True,
                )
    finally:
        result["exit_code"] = stop_server(server)
    result["server_log_problems"] = problem_lines(server.log)[:50]
    if "fixed" in result:
        fixed = result["fixed"]
        print(f"[{target}] the bare app at the same fixed rate, the same generator", flush=True)
        fixed["bare"] = bare_fixed_rate(args, work, pool_file, nonces, fixed["rate_asked"])
    if db:
        final = db.count()
        verify(result, final - rows_before)
        result["event_statuses"] = db.statuses()
        batches = db.batches()
        for phase in ("max", "fixed"):
            if phase in result:
                result[phase]["group_commits"] = batch_stats(batches, *result[phase]["window"])
        if target == "postgres" and not args.keep:
            psql(args, f"DROP DATABASE IF EXISTS {args.pg_db}")
    return result


def bare_fixed_rate(
    args: argparse.Namespace, work: Path, pool_file: Path, nonces: Nonces, rate: float
) -> dict[str, Any]:
    """The bare app at the rate hookd's fixed-rate run asked for: what the generator,
    loopback and the server's HTTP stack cost at that rate, so the difference is hookd's."""
    server = start_server("bare", work, clean_env())
    try:
        run = fixed_rate_measured(server, args, pool_file, nonces, rate)
    finally:
        stop_server(server)
    keep = ("rate_asked", "rate_achieved", "latency_ms", "latency_from_due_ms", "non_2xx", "cpu")
    return {k: run[k] for k in keep}


def fixed_rate_measured(
    server: Server, args: argparse.Namespace, pool_file: Path, nonces: Nonces, rate: float
) -> dict[str, Any]:
    """One fixed-rate run against ``server``, with its window and the CPU it took."""
    cpu: dict[str, float] = {}
    began = time.time()
    with cpu_meter(server.proc.pid, server.pg_db, cpu):
        run = run_fixed_rate(
            port=server.port,
            requests=build_requests(read_pool(pool_file), server.port),
            nonce=nonces.next(),
            rate=rate,
            duration=args.fixed_duration,
            connections=args.fixed_connections,
            timeout_s=args.timeout,
        )
    run["window"] = (began, time.time())
    add_per_request_cpu(cpu, run["rate_achieved"])
    run["cpu"] = cpu
    return run


Histograms = dict[str, dict[float, float]]


def scrape_histograms(port: int) -> Histograms:
    """hookd's ack and committed-commit histograms, cumulative bucket counts by bound."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
    )
    out: Histograms = {"ack": {}, "commit": {}}
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return out
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hookd_ack_seconds_bucket" and sample.labels["source"] == SOURCE:
                out["ack"][float(sample.labels["le"])] = sample.value
            elif (
                sample.name == "hookd_commit_seconds_bucket"
                and sample.labels["outcome"] == "committed"
            ):
                out["commit"][float(sample.labels["le"])] = sample.value
    return out


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """As PromQL's histogram_quantile over the increase between two scrapes: linear
    within the bucket the rank falls in (so no finer than the buckets), NaN if empty."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return float("nan")
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, count
    return lower


def server_side(before: Histograms, after: Histograms) -> dict[str, Any]:
    """The fixed-rate run as hookd measured it: time from a request's head to its ack,
    and the commits it waited for (their duration, and how many there were)."""
    inf = float("inf")

    def ms(name: str, q: float) -> float:
        return round(1000 * histogram_quantile(before[name], after[name], q), 2)

    commits = after["commit"].get(inf, 0.0) - before["commit"].get(inf, 0.0)
    acks = after["ack"].get(inf, 0.0) - before["ack"].get(inf, 0.0)
    return {
        "ack_ms": {"p50": ms("ack", 0.5), "p99": ms("ack", 0.99)},
        "commit_ms": {"p50": ms("commit", 0.5), "p99": ms("commit", 0.99)},
        "commits": int(commits),
        "acks": int(acks),
    }


def add_per_request_cpu(cpu: dict[str, float], rps: float) -> None:
    """CPU microseconds per answered request, of the server and of PostgreSQL."""
    if rps > 0:
        cpu["server_us_per_req"] = round(cpu["server_cpu_pct"] * 1e4 / rps)
        cpu["postgres_us_per_req"] = round(cpu["postgres_cpu_pct"] * 1e4 / rps)


def verify(result: dict[str, Any], rows_total: int) -> None:
    """Every 202 must be a stored row, and every stored row a request that was sent.

    The measured wrk run may add a few rows more than the 202s it counted: the
    requests in flight when wrk stopped are committed (hookd commits what it has
    read even if the client has gone) but wrk no longer counts their answers.
    """
    run = result["max"]
    n202, added, slack = run["accepted_202"], run["rows_added"], run["in_flight_at_stop"]
    fixed = result.get("fixed")
    fixed_rows = rows_total - added
    checks = {
        "max_rows": added,
        "max_202": n202,
        "max_in_flight_at_stop": slack,
        "max_ok": n202 <= added <= n202 + slack,
        "max_rows_equal_202": added == n202,
    }
    if fixed is not None:
        lost = sum(fixed["socket_errors"].values())
        checks |= {
            "fixed_rows": fixed_rows,
            "fixed_202": fixed["accepted_202"],
            "fixed_ok": fixed["accepted_202"] <= fixed_rows <= fixed["accepted_202"] + lost,
            "fixed_rows_equal_202": fixed_rows == fixed["accepted_202"],
        }
    result["verify"] = checks


# --------------------------------------------------------------------------- report


def fmt_ms(value: float) -> str:
    return f"{value:.2f}"


def markdown(results: list[dict[str, Any]]) -> str:
    by = {r["target"]: r for r in results if "max" in r}
    bare_rps = by["bare"]["max"]["rps"] if "bare" in by else None
    lines = [
        "| target | req/s | p50 ms | p99 ms | non-2xx | ratio to bare |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if "max" not in r:
            lines.append(f"| {r['target']} | failed: {r.get('error', '?')} | | | | |")
            continue
        m = r["max"]
        shown = str(m["non_2xx"])
        if sum(m["socket_errors"].values()):
            socket_errs = ", ".join(f"{k} {v}" for k, v in m["socket_errors"].items() if v)
            shown += f" (+ socket: {socket_errs})"
        ratio = (
            "1.00x"
            if r["target"] == "bare"
            else (f"{m['rps'] / bare_rps:.2f}x" if bare_rps else "n/a")
        )
        lines.append(
            f"| {r['target']} | {m['rps']:,.0f} | {fmt_ms(m['latency_ms']['p50'])} "
            f"| {fmt_ms(m['latency_ms']['p99'])} | {shown} | {ratio} |"
        )
    lines += [
        "",
        "| target | p99.9 ms | max ms | requests | CPU server | server CPU per req "
        "| CPU postgres | CPU wrk | CPU other | commits/s | rows per commit | rows vs 202s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        if "max" not in r:
            continue
        m, c = r["max"], r["max"]["cpu"]
        v = r.get("verify")
        if v is None:
            rows = "-"
        else:
            rows = f"{v['max_rows']} rows / {v['max_202']} 202s"
            if not v["max_ok"]:
                rows += " **MISMATCH**"
            elif not v["max_rows_equal_202"]:
                rows += f" (+{v['max_rows'] - v['max_202']} in flight at stop; ok)"
            else:
                rows += " (equal)"
        pg = f"{c['postgres_cpu_pct']:.0f}%" if r["target"] == "postgres" else "-"
        lat = m["latency_ms"]
        commits, per_commit = commit_cells(m)
        lines.append(
            f"| {r['target']} | {fmt_ms(lat['p999'])} | {fmt_ms(lat['max'])} "
            f"| {m['requests']:,} | {c['server_cpu_pct']:.0f}% | {c['server_us_per_req']} µs "
            f"| {pg} | {c['loadgen_cpu_pct']:.0f}% | {c['other_cpu_pct']:.0f}% "
            f"| {commits} | {per_commit} | {rows} |"
        )
    fixed = [r for r in results if "fixed" in r]
    if fixed:
        lines += [
            "",
            "| target (fixed rate) | asked req/s | got req/s | p50 ms | p90 ms | p99 ms | p99.9 ms "
            "| max ms | p99 from due ms | send lag p99 ms | non-2xx | CPU server "
            "| server CPU per req | CPU postgres | CPU generator | CPU other | commits/s "
            "| rows per commit | rows vs 202s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in fixed:
            f, lat, c = r["fixed"], r["fixed"]["latency_ms"], r["fixed"]["cpu"]
            pg = f"{c['postgres_cpu_pct']:.0f}%" if r["target"] == "postgres" else "-"
            v = r["verify"]
            shown = str(f["non_2xx"])
            if f["socket_errors"]:
                shown += f" (+ socket: {f['socket_errors']})"
            rows = f"{v['fixed_rows']} / {v['fixed_202']}" + (
                "" if v["fixed_ok"] else " **MISMATCH**"
            )
            lines.append(
                f"| {r['target']} | {f['rate_asked']:,.0f} | {f['rate_achieved']:,.0f} "
                f"| {fmt_ms(lat['p50'])} | {fmt_ms(lat['p90'])} | {fmt_ms(lat['p99'])} "
                f"| {fmt_ms(lat['p999'])} | {fmt_ms(lat['max'])} "
                f"| {fmt_ms(f['latency_from_due_ms']['p99'])} | {fmt_ms(f['send_lag_ms']['p99'])} "
                f"| {shown} "
                f"| {c['server_cpu_pct']:.0f}% | {c['server_us_per_req']} µs | {pg} "
                f"| {c['loadgen_cpu_pct']:.0f}% | {c['other_cpu_pct']:.0f}% "
                f"| {' | '.join(commit_cells(f))} | {rows} |"
            )
    return "\n".join(lines)


def commit_cells(phase: dict[str, Any]) -> tuple[str, str]:
    g = phase.get("group_commits")
    if not g or not g.get("batches"):
        return "-", "-"
    return f"{g['commits_per_s']:,.0f}", f"{g['mean_rows']:.1f} (max {g['max_rows']})"


def cleanest(rounds: list[dict[str, Any]], target: str) -> dict[str, Any]:
    """Of a target's rounds, the one other processes disturbed least."""
    mine = [r for r in rounds if r["target"] == target]
    done = [r for r in mine if "max" in r]
    if not done:
        return mine[0]
    return min(done, key=lambda r: (r["max"]["cpu"]["other_cpu_pct"], -r["max"]["rps"]))


def rounds_table(rounds: list[dict[str, Any]], chosen: list[dict[str, Any]]) -> str:
    lines = [
        "| target | round | req/s | p50 ms | p99 ms | non-2xx | CPU other | shown above |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sorted(rounds, key=lambda r: (TARGETS.index(r["target"]), r["round"])):
        shown = "yes" if any(r is c for c in chosen) else ""
        if "max" not in r:
            lines.append(f"| {r['target']} | {r['round']} | failed | | | | | {shown} |")
            continue
        m = r["max"]
        lines.append(
            f"| {r['target']} | {r['round']} | {m['rps']:,.0f} | {fmt_ms(m['latency_ms']['p50'])} "
            f"| {fmt_ms(m['latency_ms']['p99'])} | {m['non_2xx']} "
            f"| {m['cpu']['other_cpu_pct']:.0f}% | {shown} |"
        )
    return "\n".join(lines)


def errors(results: list[dict[str, Any]]) -> list[str]:
    """What makes a run wrong: failures, non-2xx answers, socket errors, lost rows."""
    out = []
    for r in results:
        t = r["target"]
        if "error" in r:
            out.append(f"{t}: {r['error']}")
            continue
        for phase in ("max", "fixed"):
            p = r.get(phase)
            if not p:
                continue
            if p["non_2xx"]:
                out.append(f"{t} ({phase}): {p['non_2xx']} non-2xx responses {p['statuses']}")
            if p["statuses"].get(200):
                out.append(f"{t} ({phase}): {p['statuses'][200]} answered 200 (duplicate?)")
            if sum(p["socket_errors"].values()):
                out.append(f"{t} ({phase}): socket errors {p['socket_errors']}")
        v = r.get("verify", {})
        if v and not v["max_ok"]:
            out.append(f"{t}: rows added {v['max_rows']} do not match 202s {v['max_202']}")
        if v and "fixed_ok" in v and not v["fixed_ok"]:
            out.append(f"{t} (fixed): rows {v['fixed_rows']} do not match 202s {v['fixed_202']}")
        if r.get("server_log_problems"):
            out.append(
                f"{t}: server logged {len(r['server_log_problems'])} lines, e.g. "
                f"{r['server_log_problems'][0][:200]}"
            )
        if r.get("exit_code") not in (0, None):
            out.append(f"{t}: server exited with {r['exit_code']}")
    return out


def warnings(results: list[dict[str, Any]]) -> list[str]:
    """What makes a run less trustworthy: other load, a generator behind schedule."""
    out = []
    for r in results:
        t = r["target"]
        if r.get("background_busy_pct", 0) > BACKGROUND_WARN_PCT:
            out.append(
                f"{t}: machine already {r['background_busy_pct']:.0f}% busy (of one core) "
                "before the server started: other load on the machine"
            )
        for phase in ("max", "fixed"):
            p = r.get(phase)
            if not p:
                continue
            other = p.get("cpu", {}).get("other_cpu_pct", 0)
            if other > BACKGROUND_WARN_PCT:
                out.append(
                    f"{t} ({phase}): other processes used {other:.0f}% of a core during the run"
                )
            lag = p.get("send_lag_ms", {}).get("p99", 0)
            if lag > SEND_LAG_WARN_MS:
                out.append(
                    f"{t} ({phase}): 1% of requests went out more than {lag:.0f} ms after "
                    "their time (all connections busy, or the generator short of CPU): "
                    "'p99 from due' counts that wait"
                )
    return out


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "wrk": wrk_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    for dist in (
        "uvicorn",
        "starlette",
        "uvloop",
        "httptools",
        "sqlalchemy",
        "aiosqlite",
        "asyncpg",
    ):
        with contextlib.suppress(Exception):
            env[dist] = version(dist)
    with contextlib.suppress(OSError):
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        env["commit"] = rev.stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        # Uncommitted changes to tracked files: the numbers are of the work tree.
        env["modified_files"] = len(status.stdout.splitlines())
    return env


# --------------------------------------------------------------------------- main


def key_value(raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key.startswith("HOOKD_"):
        raise argparse.ArgumentTypeError(f"{raw!r}: expected HOOKD_KEY=VALUE")
    return key, value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Acknowledgement throughput and latency of signed GitHub webhooks: "
        "a bare Starlette app, hookd on SQLite and hookd on PostgreSQL, in one run."
    )
    p.add_argument("--quick", action="store_true", help="smoke test: 3 s runs, 1 s warm-up")
    p.add_argument("--duration", type=float, help="seconds of each measured wrk run (default 15)")
    p.add_argument("--warmup", type=float, help="seconds of wrk warm-up per target (default 3)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    p.add_argument("--timeout", type=float, default=10.0, help="request timeout, s (default 10)")
    p.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help="comma-separated subset of " + ", ".join(TARGETS),
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run all targets this many times; the tables show, per target, the round "
        "that other processes disturbed least (default 1)",
    )
    p.add_argument("--pool", type=int, default=1024, help="distinct signed bodies (default 1024)")
    p.add_argument(
        "--fixed-rate",
        type=float,
        default=0.7,
        help="fixed-rate run at this fraction of each hookd target's max (0: skip)",
    )
    p.add_argument(
        "--fixed-duration", type=float, help="seconds of the fixed-rate run (default: --duration)"
    )
    p.add_argument(
        "--fixed-connections",
        type=int,
        help="connections of the fixed-rate run (default: --connections)",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=60.0,
        help="before each target, wait up to this many seconds for other processes to "
        f"use less than {BACKGROUND_WARN_PCT:.0f}%% of a core (default 60)",
    )
    p.add_argument(
        "--hookd-env",
        action="append",
        default=[],
        type=key_value,
        metavar="HOOKD_KEY=VALUE",
        help="extra setting for the hookd servers, e.g. HOOKD_COMMIT_WINDOW_MS=2 (repeatable)",
    )
    p.add_argument("--pg-host", default="127.0.0.1")
    p.add_argument("--pg-port", type=int, default=5432)
    p.add_argument("--pg-user", default="postgres")
    p.add_argument("--pg-db", default="hookd_bench", help="dropped and created afresh")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "ingest.json")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the run folder (SQLite file, logs) and the PostgreSQL database",
    )
    args = p.parse_args(argv)
    if args.duration is None:
        args.duration = 3.0 if args.quick else 15.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 3.0
    if args.fixed_duration is None:
        args.fixed_duration = args.duration
    if args.fixed_connections is None:
        args.fixed_connections = args.connections
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(args.targets) - set(TARGETS)
    if unknown:
        p.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    if not args.pg_host.startswith("127.") and args.pg_host not in ("localhost", "::1"):
        p.error("--pg-host: this benchmark only talks to the loopback interface")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = BENCH_DIR / "results" / f"run-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "sources.toml").write_text(SOURCES_TOML, encoding="utf-8")
    pool_file = work / "pool.tsv"
    body_bytes = write_pool(pool_file, args.pool)
    nonces = Nonces()
    config = {
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "connections": args.connections,
        "wrk_threads": args.threads,
        "timeout_s": args.timeout,
        "pool_bodies": args.pool,
        "mean_body_bytes": body_bytes,
        "fixed_rate_fraction": args.fixed_rate,
        "fixed_duration_s": args.fixed_duration,
        "fixed_connections": args.fixed_connections,
        "quick": args.quick,
        "hookd_env": dict(args.hookd_env),
        "rounds": args.rounds,
    }
    print(f"hookd ingest bench: {config}", flush=True)
    env_info = environment()
    print(f"environment: {env_info}", flush=True)
    rounds: list[dict[str, Any]] = []
    try:
        for number in range(1, args.rounds + 1):
            for target in args.targets:
                if args.rounds > 1:
                    print(f"--- round {number} of {args.rounds}: {target}", flush=True)
                try:
                    result = bench_target(target, args, work, pool_file, nonces)
                except (RuntimeError, OSError, sqlite3.Error) as exc:
                    print(f"[{target}] FAILED: {exc}", file=sys.stderr, flush=True)
                    result = {"target": target, "error": str(exc).splitlines()[0][:200]}
                result["round"] = number
                rounds.append(result)
    except KeyboardInterrupt:
        # bench_target has stopped its server; wrk was killed by subprocess.run.
        print("interrupted", file=sys.stderr, flush=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            if "postgres" in args.targets:
                with contextlib.suppress(RuntimeError, OSError):
                    psql(args, f"DROP DATABASE IF EXISTS {args.pg_db} WITH (FORCE)")
        return 130
    results = [cleanest(rounds, target) for target in args.targets]
    table = markdown(results)
    statuses = [
        f"{r['target']}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["event_statuses"].items()))
        for r in results
        if r.get("event_statuses")
    ]
    if statuses:
        table += "\n\nevents by status when the server had stopped: " + "; ".join(statuses)
    if args.rounds > 1:
        table += "\n\n" + rounds_table(rounds, results)
    found = errors(results)
    for result in rounds:
        if not any(result is chosen for chosen in results):
            found += [f"round {result['round']}: {e}" for e in errors([result])]
    noted = warnings(results)
    report = {
        "when": stamp,
        "config": config,
        "environment": env_info,
        "results": results,
        "rounds": rounds,
        "table": table,
        "errors": found,
        "warnings": noted,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(table)
    print()
    if noted:
        print("WARNINGS:")
        for line in noted:
            print(f"  - {line}")
    if found:
        print("ERRORS:")
        for line in found:
            print(f"  - {line}")
    else:
        print("no errors: every answer was a 202, and every 202 is a stored row")
    print(f"\nresults: {args.out}")
    if args.keep:
        print(f"run folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
