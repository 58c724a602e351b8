"""``bench/backlog.py`` end to end on a few hundred events: a fresh database, a private
Redis and two ``hookd worker``s; every event processed once, the numbers there, and
nothing left behind (database, workers, run folder), also when interrupted mid-drain."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support import services

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "backlog.py"

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(autouse=True)
def services_up() -> None:
    services.require_pg()
    services.require_tool("psql")
    services.require_tool("redis-server")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HOOKD_")}


def database_exists(name: str) -> bool:
    done = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "SELECT datname FROM pg_database"],
        capture_output=True,
        text=True,
        check=True,
    )
    return name in done.stdout.split()


def run_folders() -> set[Path]:
    return set((ROOT / "bench" / "results").glob("backlog-*"))


def test_a_small_backlog_is_drained_once_and_measured(tmp_path: Path) -> None:
    db = f"hookd_t_backlog_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "backlog.json"
    folders = run_folders()
    args = ["--events", "300", "--interval", "0.2", "--pg-db", db, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["errors"] == []
    assert r["checks"]["once_ok"]
    assert r["checks"]["processed"] == r["checks"]["ledger_rows"] == 300
    assert r["store"]["events"] == 300
    assert r["rates"]["events_per_s"] > 0
    assert r["rates"]["seconds_from_launch"] >= r["rates"]["first_processed_after_s"] > 0
    assert sum(r["processed_per_second"]) == 300
    assert r["cpu"]["us_per_event"]["workers"] > 0
    # Each event was claimed and finished, and left at least its ledger row.
    assert r["database"]["per_event"]["tup_inserted"] >= 1
    assert r["database"]["per_event"]["tup_updated"] >= 1
    assert r["database"]["per_event"]["xact_commit"] > 0
    assert r["postgres_settings"]["synchronous_commit"]
    assert "| 2 | 300 |" in r["table"]
    assert "| 2 | 300 |" in done.stdout
    assert not database_exists(db)
    assert run_folders() == folders


def test_interrupted_mid_drain_it_stops_the_workers_and_drops_the_database(
    tmp_path: Path,
) -> None:
    db = f"hookd_t_backlog_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "backlog.json"
    folders = run_folders()
    # Enough events that the drain is still going when the interrupt comes.
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--events", "20000", "--pg-db", db, "--out", str(out)],
        cwd=ROOT,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            match = re.search(r"launched \d+ workers: pids \[([\d, ]+)\]", line)
            if match:
                pids = [int(p) for p in match.group(1).split(",")]
                break
            assert time.monotonic() < deadline, "the workers were never launched"
        assert len(pids) == 2
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)
    assert not database_exists(db)
    assert not out.exists()
    assert run_folders() == folders
