"""Durable commits per event under ``hookd serve`` alone (it processes too), by deployment.

On SQLite, a commit in WAL mode with ``synchronous=FULL`` is one sync of the WAL file:
the script runs ``hookd serve`` under ``strace -f`` tracing only ``fsync`` and
``fdatasync`` (seccomp-filtered, so no other call is slowed), drives it at its maximum
with wrk for ``--duration`` seconds, lets it finish processing, stops it, and divides the
syncs of every process of serve (receiver, writer, processors) by the events stored. On
PostgreSQL it counts the server's committed transactions (``pg_stat_database``,
``xact_commit``) over the same run. Each is a count of durable writes, whoever makes
them, per event stored and processed.

    .venv/bin/python bench/commits.py --targets sqlite,postgres --duration 10
    .venv/bin/python bench/commits.py --tree ../hookd-before   # another checkout, same load
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent


def _load_ingest_bench() -> ModuleType:
    """``bench/ingest.py`` under a name that cannot be confused with hookd's ``ingest``."""
    spec = importlib.util.spec_from_file_location("hookd_bench_ingest", BENCH_DIR / "ingest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


ingest = _load_ingest_bench()


def settled(count: Any, timeout_s: float = 120.0) -> int:
    return int(ingest.settled_count(count, timeout_s))


def processed(db: Any) -> int:
    return int(db.statuses().get("processed", 0))


def start(
    target: str, work: Path, env: dict[str, str], tree: Path
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = ingest.free_port()
    log = work / f"{target}.log"
    trace = work / f"{target}.strace"
    cmd = [sys.executable, "-m", "hookd.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if target == "sqlite":
        cmd = [
            "strace",
            "-f",
            "--seccomp-bpf",
            "-e",
            "trace=fsync,fdatasync",
            "-c",
            "-o",
            str(trace),
            *cmd,
        ]
    env = {**env, "PYTHONPATH": str(tree)}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited {proc.returncode}:\n{ingest.tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return proc, port, trace
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"serve not healthy:\n{ingest.tail(log)}")


def syncs(trace: Path) -> int:
    total = 0
    for line in trace.read_text().splitlines():
        fields = line.split()
        if fields and fields[-1] in ("fsync", "fdatasync"):
            total += int(fields[3])
    return total


def xact_commits(args: argparse.Namespace) -> int:
    sql = f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{args.pg_db}'"
    return int(ingest.psql(args, sql))


def measure(
    target: str, args: argparse.Namespace, work: Path, pool: Path, tree: Path
) -> dict[str, Any]:
    db = ingest.sqlite_db(work) if target == "sqlite" else ingest.postgres_db(args)
    env = ingest.clean_env(
        HOOKD_CONFIG=str(work / "sources.toml"),
        HOOKD_DATABASE_URL=db.url,
        HOOKD_LOG_LEVEL="WARNING",
    )
    subprocess.run(
        [sys.executable, "-m", "hookd.cli", "db", "upgrade"],
        cwd=work,
        env={**env, "PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
    )
    before = xact_commits(args) if target == "postgres" else 0
    proc, port, trace = start(target, work, env, tree)
    server = ingest.Server(target, proc, port, work / f"{target}.log")
    try:
        run = ingest.run_wrk(
            server,
            pool,
            ingest.Nonces().next(),
            duration=args.duration,
            connections=64,
            threads=1,
            timeout_s=10,
        )
        stored = settled(db.count)
        deadline = time.monotonic() + 120
        while processed(db) < stored and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        # Under strace, serve is strace's child: the signal goes to serve itself.
        serve_pid = proc.pid
        if target == "sqlite":
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            serve_pid = int(children[0])
        os.kill(serve_pid, signal.SIGINT)
        proc.wait(timeout=60)
    done = processed(db)
    result: dict[str, Any] = {
        "target": target,
        "tree": str(tree),
        "rps": run["rps"],
        "stored": stored,
        "processed": done,
    }
    if target == "sqlite":
        result["syncs"] = syncs(trace)
        result["syncs_per_event"] = round(result["syncs"] / max(1, stored), 4)
    else:
        result["commits"] = xact_commits(args) - before
        result["commits_per_event"] = round(result["commits"] / max(1, stored), 4)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sqlite,postgres")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--tree", type=Path, default=BENCH_DIR.parent, help="the checkout to run")
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", default="5432")
    parser.add_argument("--pg-user", default="postgres")
    parser.add_argument("--pg-db", default="hookd_run_commits")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("strace not found (apt-get install -y strace)", file=sys.stderr)
        return 2
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookd-commits-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "sources.toml").write_text(ingest.SOURCES_TOML)
    pool = work / "pool.txt"
    ingest.write_pool(pool, 1024)
    results = []
    try:
        for target in args.targets.split(","):
            result = measure(target, args, work, pool, args.tree.resolve())
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        if "postgres" in args.targets:
            ingest.psql(args, f"DROP DATABASE IF EXISTS {args.pg_db}")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
