"""End-to-end processing: PostgreSQL + Redis + ``hookd worker``s, no-op handler.

Two measurements per worker count, each in a fresh database and a private Redis:

* throughput — ``--events`` signed GitHub webhooks are stored first (workers
  stopped), then the workers start; the rate is events / (last processed_at -
  first processed_at), read from the database, so worker start-up is not counted;
* lag — with the workers running, webhooks are sent open-loop at ``--rate-fraction``
  of that throughput for ``--lag-seconds``; lag is processed_at - received_at per
  event, p50/p99 from the database.

With ``--bare``, the same requests are also sent, by the same closed-loop client, to
``bench/bare_app.py`` (reads the body, answers 202): the req/s of a receiver that does
nothing, to compare the pipeline's events/s with.

    .venv/bin/python bench/pipeline.py                  # 1 and 2 workers
    .venv/bin/python bench/pipeline.py --quick --bare
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PG = "postgresql://postgres@127.0.0.1:5432"
SECRET = "bench-secret"
CLIENT_CONNECTIONS = 32  # the closed-loop client of the throughput phase


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def psql(sql: str, db: str = "postgres") -> str:
    out = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-Atc", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def signed_request(seq: int) -> bytes:
    body = json.dumps({"action": "opened", "number": seq, "zen": "x" * 600}).encode()
    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    head = (
        "POST /hooks/github HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: issues\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
        f"X-Hub-Signature-256: sha256={sig}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def send_closed_loop(port: int, requests: list[bytes], connections: int) -> dict[int, int]:
    """As fast as the server answers, over keep-alive connections."""
    queue = list(reversed(requests))
    statuses: dict[int, int] = {}

    async def conn() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while queue:
            writer.write(queue.pop())
            status = await _read_response(reader)
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    await asyncio.gather(*(conn() for _ in range(connections)))
    return statuses


async def send_open_loop(
    port: int, requests: list[bytes], rate: float, connections: int
) -> dict[int, int]:
    """At a fixed rate whatever the answers: request i is due at start + i/rate."""
    statuses: dict[int, int] = {}
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    start = time.monotonic()
    tasks = []

    async def one(raw: bytes) -> None:
        reader, writer = await pool.get()
        writer.write(raw)
        status = await _read_response(reader)
        statuses[status] = statuses.get(status, 0) + 1
        pool.put_nowait((reader, writer))

    for i, raw in enumerate(requests):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(raw)))
    await asyncio.gather(*tasks)
    return statuses


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        with log.open("ab") as out:
            self.p = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def wait_http(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                if b" 200 " in s.recv(200):
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server did not come up")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The bare app's req/s for the requests and client of the throughput phase."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "bare_app:app",
        "--app-dir",
        str(BENCH),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
        "--no-server-header",
    ]
    server = Proc(cmd, {**os.environ}, tmp / "bare.log")
    try:
        wait_http(port)
        requests = [signed_request(i) for i in range(args.events)]
        started = time.perf_counter()
        statuses = asyncio.run(send_closed_loop(port, requests, CLIENT_CONNECTIONS))
        seconds = time.perf_counter() - started
    finally:
        server.stop()
    return {
        "target": "bare",
        "requests": args.events,
        "seconds": round(seconds, 3),
        "rps": round(args.events / seconds, 1),
        "statuses": statuses,
    }


def run(workers: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    db = f"{args.db_prefix}_{workers}"
    psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    psql(f"CREATE DATABASE {db}")
    redis_port, http_port = free_port(), free_port()
    redis = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(redis_port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
    )
    config = tmp / "bench.toml"
    config.write_text(
        f'[[sources]]\nname = "github"\nprovider = "github"\nsecrets = ["{SECRET}"]\n'
        'handlers = ["bench.handlers:noop"]\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}",
        "HOOKD_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "HOOKD_LOG_LEVEL": "WARNING",
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_WORKER_METRICS_PORT": "0",
    }
    cli = [sys.executable, "-m", "hookd.cli"]
    subprocess.run([*cli, "db", "upgrade"], env=env, check=True, capture_output=True)
    serve = Proc([*cli, "serve", "--port", str(http_port)], env, tmp / "serve.log")
    procs: list[Proc] = []
    try:
        wait_http(http_port)
        requests = [signed_request(i) for i in range(args.events)]
        started = time.perf_counter()
        statuses = asyncio.run(send_closed_loop(http_port, requests, CLIENT_CONNECTIONS))
        ingest_seconds = time.perf_counter() - started
        assert statuses.get(202) == args.events, statuses
        procs = [Proc([*cli, "worker"], env, tmp / f"worker{i}.log") for i in range(workers)]
        deadline = time.monotonic() + 600
        while int(psql("SELECT count(*) FROM events WHERE status = 'processed'", db)) < args.events:
            if time.monotonic() > deadline:
                raise RuntimeError("throughput phase did not finish")
            time.sleep(0.5)
        span = float(
            psql("SELECT extract(epoch FROM max(processed_at) - min(processed_at)) FROM events", db)
        )
        throughput = args.events / span
        rate = throughput * args.rate_fraction
        marker = psql("SELECT now()", db)
        count = int(rate * args.lag_seconds)
        lag_requests = [signed_request(10_000_000 + i) for i in range(count)]
        statuses = asyncio.run(send_open_loop(http_port, lag_requests, rate, 64))
        deadline = time.monotonic() + 300
        query = (
            f"SELECT count(*) FROM events WHERE received_at > '{marker}' AND status = 'processed'"
        )
        while int(psql(query, db)) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("lag phase did not finish")
            time.sleep(0.5)
        lags = [
            float(v)
            for v in psql(
                "SELECT extract(epoch FROM processed_at - received_at) FROM events "
                f"WHERE received_at > '{marker}'",
                db,
            ).split()
        ]
        effects_ok = int(psql("SELECT count(*) FROM events WHERE attempts <> 1", db)) == 0
        return {
            "workers": workers,
            "events": args.events,
            "throughput_events_per_s": round(throughput, 1),
            # req/s of the receiver while it stored the events (workers stopped)
            "ingest_rps": round(args.events / ingest_seconds, 1),
            "lag_rate_per_s": round(rate, 1),
            "lag_events": count,
            "lag_p50_ms": round(percentile(lags, 0.50) * 1000, 1),
            "lag_p99_ms": round(percentile(lags, 0.99) * 1000, 1),
            "lag_statuses": statuses,
            "every_event_one_attempt": effects_ok,
        }
    finally:
        for p in procs:
            p.stop()
        serve.stop()
        redis.terminate()
        redis.wait()
        psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rate-fraction", type=float, default=0.5)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--bare", action="store_true", help="also the bare app's req/s with the same client"
    )
    parser.add_argument(
        "--db-prefix", default="hookd_bench_pipe", help="databases PREFIX_<workers>, dropped"
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "pipeline.json")
    args = parser.parse_args()
    if args.quick:
        args.events, args.lag_seconds = 2_000, 5.0
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.db_prefix):
        parser.error("--db-prefix: use a plain lower-case name")
    results = []
    baseline = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.bare:
            baseline = bare(args, Path(tmp))
        for workers in (int(w) for w in args.workers.split(",")):
            results.append(run(workers, args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "config": {
            "events": args.events,
            "rate_fraction": args.rate_fraction,
            "lag_seconds": args.lag_seconds,
            "client_connections": CLIENT_CONNECTIONS,
            "quick": args.quick,
        },
        "runs": results,
        "bare": baseline,
    }
    args.out.write_text(json.dumps(report, indent=2))
    print(
        "| workers | events/s processed | ingest req/s | lag rate (/s) | lag p50 ms | lag p99 ms "
        "| one attempt each |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['workers']} | {r['throughput_events_per_s']} | {r['ingest_rps']} "
            f"| {r['lag_rate_per_s']} | {r['lag_p50_ms']} | {r['lag_p99_ms']} "
            f"| {r['every_event_one_attempt']} |"
        )
    if baseline is not None:
        print(
            f"bare app, same client and requests: {baseline['rps']} req/s "
            f"(statuses {baseline['statuses']})"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the finally blocks have stopped servers, dropped databases
        print("interrupted", file=sys.stderr)
        sys.exit(130)
