"""``bench/soak.py --deployment quickstart``: what it reads from hookd's SQLite file
(``bench/soak_sqlite.py``) on a file made by ``hookd db upgrade``, with rows whose
backlog, lags and checks are known; and its one-line refusal of ``--autovacuum-off``.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "hookd_bench_soak_sqlite_test", ROOT / "bench" / "soak_sqlite.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sq = load_probe()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKD_")}
    return env | extra


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    """A SQLite file at hookd's schema, made by hookd's own migrations."""
    path = tmp_path / "hookd.db"
    done = subprocess.run(
        [sys.executable, "-m", "hookd.cli", "db", "upgrade"],
        cwd=tmp_path,
        env=clean_env(HOOKD_DATABASE_URL=f"sqlite+aiosqlite:///{path}"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return path


def add_event(
    conn: sqlite3.Connection,
    n: int,
    received: float,
    *,
    status: str = "processed",
    processed: float | None = None,
    attempts: int = 1,
    key: str | None = None,
) -> None:
    """One row as hookd stores it on SQLite (UTC times as text), and its ledger row
    when processed."""
    at = sq.text_time(received)
    conn.execute(
        "INSERT INTO events (id, source, provider, dedupe_key, origin, received_at, "
        "verified_with, headers, body_encrypted, status, attempts, next_attempt_at, "
        "processed_at, created_at, updated_at) "
        "VALUES (?, 'gh', 'github', ?, 'webhook', ?, 'secret', '{}', 0, ?, ?, ?, ?, ?, ?)",
        (
            f"01TEST{n:020d}",
            key or f"delivery-{n}",
            at,
            status,
            attempts,
            at,
            None if processed is None else sq.text_time(processed),
            at,
            at,
        ),
    )
    if status == "processed":
        conn.execute(
            "INSERT INTO handler_runs (event_id, handler, finished_at) VALUES (?, 'noop', ?)",
            (f"01TEST{n:020d}", at),
        )


@pytest.fixture
def soaked(db_file: Path) -> tuple[Path, float]:
    """One event before the soak, then, from ``t0``: three processed (lags 0.5 and 1.0 s
    in the first 10 s window, 0.2 s in the second), one pending, one retrying."""
    t0 = time.time() - 100
    with sqlite3.connect(db_file) as conn:
        add_event(conn, 0, t0 - 50, processed=t0 - 49)
        add_event(conn, 1, t0 + 1, processed=t0 + 1.5)
        add_event(conn, 2, t0 + 2, processed=t0 + 3)
        add_event(conn, 3, t0 + 12, processed=t0 + 12.2)
        add_event(conn, 4, t0 + 15, status="pending", attempts=0)
        add_event(conn, 5, t0 + 25, status="retrying")
    return db_file, t0


def test_backlog_and_counts(soaked: tuple[Path, float]) -> None:
    path, _ = soaked
    assert sq.count_events(path) == 6
    assert sq.count_not_done(path) == 2
    conn = sq.connect(path)
    try:
        count, oldest = sq.backlog(conn)
    finally:
        conn.close()
    assert count == 2
    # The oldest not processed was received at t0 + 15, about 85 s ago.
    assert 84 < oldest < 95


def test_lags_by_window_overall_and_drift(soaked: tuple[Path, float]) -> None:
    path, t0 = soaked
    by = {w["window"]: w for w in sq.windows(path, t0, 10.0)}
    assert set(by) == {0, 1}
    assert by[0]["received"] == 2
    # PostgreSQL's percentile_cont: interpolated between 0.5 and 1.0 s.
    assert by[0]["lag_p50_ms"] == pytest.approx(750, abs=1)
    assert by[0]["lag_p99_ms"] == pytest.approx(995, abs=1)
    assert by[0]["processed_per_s"] == 0.2  # two processed in 10 s
    assert by[1] == {
        "window": 1,
        "received": 1,
        "lag_p50_ms": pytest.approx(200, abs=1),
        "lag_p99_ms": pytest.approx(200, abs=1),
        "processed_per_s": 0.1,
    }
    lag = sq.overall_lag(path, t0)
    assert lag["p50_ms"] == pytest.approx(500, abs=1)
    assert lag["p99_ms"] == pytest.approx(990, abs=1)
    assert lag["max_ms"] == pytest.approx(1000, abs=1)
    drift = sq.lag_drift(path, t0, (0.0, 10.0), (10.0, 20.0), 10.0)
    assert drift["first"]["events"] == 2
    assert drift["last"]["events"] == 1
    assert drift["p50_ratio"] == pytest.approx(0.27, abs=0.01)
    assert sq.overall_lag(path, t0 + 1000) == {}  # nothing received since


def test_end_to_end_rate(soaked: tuple[Path, float]) -> None:
    path, t0 = soaked
    e2e = sq.end_to_end_rate(path, t0)
    # Five received since t0, the last processed at t0 + 12.2.
    assert e2e["events"] == 5
    assert e2e["seconds"] == pytest.approx(12.2, abs=0.01)
    assert e2e["events_per_s"] == pytest.approx(5 / 12.2, abs=0.05)


def test_checks(soaked: tuple[Path, float]) -> None:
    path, _ = soaked
    c = sq.checks(path, baseline=1, accepted=5, lost=0)
    assert c["rows_added"] == 5
    assert c["distinct_delivery_ids"] == 6
    assert c["processed"] == 4
    assert c["ledger_rows"] == 4
    assert c["stored_ok"]
    assert c["once_ok"]
    assert not c["all_processed"]  # one pending, one retrying
    # A 2xx that left no row, a second attempt, a dead event, a repeated delivery id.
    assert not sq.checks(path, baseline=1, accepted=6, lost=0)["stored_ok"]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE events SET attempts = 2 WHERE dedupe_key = 'delivery-2'")
        add_event(conn, 6, time.time(), status="dead", attempts=5)
        add_event(conn, 7, time.time(), status="pending", attempts=0, key="delivery-1")
    c = sq.checks(path, baseline=1, accepted=7, lost=0)
    assert c["processed_attempts_not_1"] == 1
    assert c["dead"] == 1
    assert not c["once_ok"]
    assert c["distinct_delivery_ids"] == c["rows_total"] - 1
    assert not c["stored_ok"]


def test_probe_is_read_only_and_does_not_block_the_writer(soaked: tuple[Path, float]) -> None:
    path, t0 = soaked
    probe = sq.connect(path)
    try:
        probe.execute("BEGIN")
        assert probe.execute("SELECT count(*) FROM events").fetchone()[0] == 6
        # hookd's writer commits while the probe holds its read (WAL).
        with sqlite3.connect(path, timeout=0.5) as writer:
            add_event(writer, 8, t0 + 30, status="pending", attempts=0)
        probe.execute("COMMIT")
        assert sq.backlog(probe)[0] == 3
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            probe.execute("DELETE FROM events")
    finally:
        probe.close()


def test_percentile_cont_matches_postgresql() -> None:
    # SELECT percentile_cont(p) WITHIN GROUP (ORDER BY v) FROM unnest('{1,2,3,4,10}') v
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert sq.percentile_cont(values, 0.5) == 3.0
    assert sq.percentile_cont(values, 0.99) == pytest.approx(9.76)
    assert sq.percentile_cont(values, 0.0) == 1.0
    assert sq.percentile_cont(values, 1.0) == 10.0
    assert sq.percentile_cont([], 0.5) is None


def test_autovacuum_off_with_quickstart_is_one_error_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--deployment",
            "quickstart",
            "--autovacuum-off",
            "--out",
            str(tmp_path / "soak.json"),
        ],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--autovacuum-off" in lines[0]
    assert "pg-redis" in lines[0]
    assert done.stdout == ""
    assert not (tmp_path / "soak.json").exists()
