"""What ``bench/soak.py --deployment quickstart`` reads from hookd's SQLite file.

The same figures as the PostgreSQL queries in ``soak.py``, with the same shapes: the
backlog (events not yet processed) and the age of the oldest, the exactly-once checks,
processing lag (``processed_at - received_at``) per window and overall, and the
end-to-end rate of a burst. SQLite has no ``percentile_cont``: percentiles are computed
here, interpolated as PostgreSQL's are.

The file is opened read-only (``mode=ro``) with a busy timeout, one short query at a
time: in WAL mode a reader does not block hookd's writer, and this one never takes a
write lock. hookd stores its UTC times as ``YYYY-MM-DD HH:MM:SS.ffffff`` text, so a
time in the soak's clock is compared as that text and differences are taken with
``julianday``.

Only the standard library: the tests import this file without the bench extra.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

NOT_DONE = ("pending", "processing", "retrying")
BUSY_TIMEOUT_S = 10.0
UNIX_EPOCH_JULIAN = 2440587.5  # julianday('1970-01-01')
# Seconds since the Unix epoch, and the lag of an event, from hookd's text times.
EPOCH = f"((julianday({{col}}) - {UNIX_EPOCH_JULIAN}) * 86400.0)"
LAG = "((julianday(processed_at) - julianday(received_at)) * 86400.0)"
IN_NOT_DONE = f"status IN ({', '.join('?' * len(NOT_DONE))})"


def epoch_of(column: str) -> str:
    return EPOCH.format(col=column)


def connect(path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A read-only connection to hookd's SQLite file (it must exist)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    # timeout: SQLite's busy timeout. check_same_thread off: the soak's sampler reads
    # in a thread (one query at a time) so as not to stall the load generator's loop.
    return sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False)


@contextlib.contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    conn = connect(path)
    try:
        yield conn
    finally:
        conn.close()


def text_time(wall: float) -> str:
    """A Unix time as hookd writes its UTC times in SQLite, for comparisons."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def percentile_cont(sorted_values: list[float], fraction: float) -> float | None:
    """PostgreSQL's ``percentile_cont``: linear interpolation between the closest ranks."""
    if not sorted_values:
        return None
    pos = fraction * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def pct_ms(sorted_values: list[float], fraction: float) -> float:
    """A percentile of lags in seconds, in milliseconds (0 when there are none)."""
    value = percentile_cont(sorted_values, fraction)
    return 0.0 if value is None else round(value * 1000, 1)


def count_events(path: Path) -> int:
    with reading(path) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def count_not_done(path: Path) -> int:
    with reading(path) as conn:
        sql = f"SELECT count(*) FROM events WHERE {IN_NOT_DONE}"
        return int(conn.execute(sql, NOT_DONE).fetchone()[0])


def backlog(conn: sqlite3.Connection) -> tuple[int, float]:
    """(events not yet processed, seconds since the oldest of them was received)."""
    row = conn.execute(
        f"SELECT count(*), (julianday('now') - julianday(min(received_at))) * 86400.0 "
        f"FROM events WHERE {IN_NOT_DONE}",
        NOT_DONE,
    ).fetchone()
    return int(row[0]), (round(float(row[1]), 3) if row[1] is not None else 0.0)


def end_to_end_rate(path: Path, since_wall: float) -> dict[str, Any]:
    """Events received since ``since_wall``, over the time until the last was processed."""
    with reading(path) as conn:
        n, last = conn.execute(
            f"SELECT count(*), coalesce(max({epoch_of('processed_at')}), 0) "
            "FROM events WHERE received_at >= ?",
            (text_time(since_wall),),
        ).fetchone()
    span = float(last) - since_wall
    return {
        "events": int(n),
        "seconds": round(span, 3),
        "events_per_s": round(int(n) / span, 1) if span > 0 else None,
    }


def checks(path: Path, baseline: int, accepted: int, lost: int) -> dict[str, Any]:
    """Every 2xx'd event stored, and every stored event processed, exactly once:
    one attempt (attempts counts claims), one ledger row for the one handler."""
    with reading(path) as conn:
        row = conn.execute(
            "SELECT count(*), "
            "coalesce(sum(status = 'processed'), 0), "
            "coalesce(sum(status = 'processed' AND attempts <> 1), 0), "
            "coalesce(sum(status = 'dead'), 0), "
            "(SELECT count(*) FROM handler_runs), count(DISTINCT dedupe_key) FROM events"
        ).fetchone()
    return exactly_once(baseline, accepted, lost, *(int(v) for v in row))


def exactly_once(
    baseline: int,
    accepted: int,
    lost: int,
    total: int,
    processed: int,
    not_once: int,
    dead: int,
    ledger: int,
    distinct: int,
) -> dict[str, Any]:
    """The soak's end checks from the table's counts (either database): every 2xx one
    new row, every row processed once with one ledger row, none dead."""
    added = total - baseline
    return {
        "rows_before_soak": baseline,
        "rows_added": added,
        "accepted_2xx": accepted,
        "lost_requests": lost,
        "rows_total": total,
        "distinct_delivery_ids": distinct,
        "processed": processed,
        "processed_attempts_not_1": not_once,
        "dead": dead,
        "ledger_rows": ledger,
        "stored_ok": accepted <= added <= accepted + lost and distinct == total,
        "all_processed": processed == total,
        "once_ok": not_once == 0 and dead == 0 and ledger == processed,
    }


def lags(path: Path, since_wall: float, until_wall: float | None = None) -> list[float]:
    """Processing lags, s, sorted, of the processed events received in [since, until)."""
    sql = f"SELECT {LAG} FROM events WHERE processed_at IS NOT NULL AND received_at >= ?"
    params: tuple[str, ...] = (text_time(since_wall),)
    if until_wall is not None:
        sql += " AND received_at < ?"
        params += (text_time(until_wall),)
    with reading(path) as conn:
        return sorted(float(v) for (v,) in conn.execute(sql, params))


def windows(path: Path, start_wall: float, interval: float) -> list[dict[str, Any]]:
    """Processing lag p50/p99 by the window an event was received in, and
    events processed per second by the window they were processed in."""
    received: dict[int, list[float]] = {}
    done: dict[int, int] = {}
    with reading(path) as conn:
        rows = conn.execute(
            f"SELECT {epoch_of('received_at')}, {LAG} FROM events "
            "WHERE received_at >= ? AND processed_at IS NOT NULL",
            (text_time(start_wall),),
        )
        for at, lag in rows:
            received.setdefault(math.floor((at - start_wall) / interval), []).append(lag)
        rows = conn.execute(
            f"SELECT {epoch_of('processed_at')} FROM events WHERE processed_at >= ?",
            (text_time(start_wall),),
        )
        for (at,) in rows:
            w = math.floor((at - start_wall) / interval)
            done[w] = done.get(w, 0) + 1
    out: dict[int, dict[str, Any]] = {}
    for w, values in received.items():
        values.sort()
        out[w] = {
            "received": len(values),
            "lag_p50_ms": pct_ms(values, 0.5),
            "lag_p99_ms": pct_ms(values, 0.99),
        }
    for w, n in done.items():
        out.setdefault(w, {})["processed_per_s"] = round(n / interval, 1)
    return [{"window": w, **v} for w, v in sorted(out.items())]


def overall_lag(path: Path, start_wall: float) -> dict[str, float]:
    values = lags(path, start_wall)
    if not values:
        return {}
    return {
        "p50_ms": pct_ms(values, 0.5),
        "p99_ms": pct_ms(values, 0.99),
        "max_ms": round(values[-1] * 1000, 1),
    }


def lag_drift(
    path: Path,
    start_wall: float,
    first: tuple[float, float],
    last: tuple[float, float],
    span_s: float,
) -> dict[str, Any]:
    """Processing lag p50/p99 of the events received in the ``first`` and ``last``
    spans (seconds since the start), and last ÷ first."""
    out: dict[str, Any] = {"span_s": span_s}
    for name, (a, b) in (("first", first), ("last", last)):
        values = lags(path, start_wall + a, start_wall + b)
        out[name] = {
            "from_s": a,
            "to_s": b,
            "events": len(values),
            "p50_ms": pct_ms(values, 0.5),
            "p99_ms": pct_ms(values, 0.99),
        }
    for key in ("p50_ms", "p99_ms"):
        before, after = out["first"][key], out["last"][key]
        out[f"{key.removesuffix('_ms')}_ratio"] = round(after / before, 2) if before else None
    return out
