"""bench/backlog.py's arithmetic (CPU per event over the whole drain and its steady part,
the database's counters less the probe's own transactions) and S7's verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from bench import backlog
from bench.tables import backlog_text
from bench.verdicts import S7_EVENTS_PER_S, backlog_targets


def sample(t: float, processed: int, workers: float, postgres: float) -> dict[str, Any]:
    cpu = {"workers": workers, "postgres": postgres, "redis": 0.0, "bench": 0.0, "other": 0.0}
    return {"t_s": t, "processed": processed, "left": 1000 - processed, "cpu_s": cpu}


def test_cpu_per_event_over_the_drain_and_its_steady_part() -> None:
    d = backlog.Drain(
        samples=[
            sample(1.0, 0, 2.0, 0.0),  # start-up: the workers' imports, nothing processed
            sample(2.0, 100, 2.2, 0.1),
            sample(3.0, 500, 2.6, 0.3),
            sample(4.0, 900, 3.0, 0.5),
            sample(5.0, 1000, 3.1, 0.55),
        ]
    )
    cpu = backlog.cpu_summary(d, 1000)
    assert cpu["seconds"] == 5.0
    # 3.1 s of workers' CPU over 1,000 events, start-up included; 62% of a core.
    assert cpu["us_per_event"]["workers"] == pytest.approx(3100)
    assert cpu["pct_of_a_core"]["workers"] == pytest.approx(62)
    # Steady: from 100 to 900 processed, 0.8 s of workers' CPU for 800 events in 2 s.
    steady = cpu["steady"]
    assert (steady["from_s"], steady["to_s"], steady["events"]) == (2.0, 4.0, 800)
    assert steady["events_per_s"] == 400
    assert steady["us_per_event"]["workers"] == pytest.approx(1000)
    assert steady["us_per_event"]["postgres"] == pytest.approx(500)


def test_no_steady_part_when_one_sample_saw_it_all() -> None:
    d = backlog.Drain(samples=[sample(1.0, 1000, 1.0, 0.5)])
    cpu = backlog.cpu_summary(d, 1000)
    assert "steady" not in cpu
    assert cpu["us_per_event"]["postgres"] == pytest.approx(500)


def test_the_other_group_is_what_no_group_accounts_for() -> None:
    a = {"workers": 1.0, "postgres": 1.0, "redis": 0.0, "bench": 0.0, "machine": 10.0}
    b = {"workers": 2.0, "postgres": 1.5, "redis": 0.1, "bench": 0.1, "machine": 13.0}
    split = backlog.cpu_split(a, b)
    assert split["other"] == pytest.approx(3.0 - 1.0 - 0.5 - 0.1 - 0.1)


def test_database_counters_leave_the_probe_out() -> None:
    zero = dict.fromkeys(backlog.PG_COUNTERS, 0) | {"autovacuum_runs": 0, "autoanalyze_runs": 0}
    after = zero | {"xact_commit": 260, "tup_inserted": 200, "tup_updated": 200}
    db = backlog.per_event(zero, after, probe_xacts=60, events=100)
    assert db["delta"]["xact_commit"] == 200
    assert db["per_event"]["xact_commit"] == 2.0
    assert db["per_event"]["tup_inserted"] == 2.0
    assert db["probe_xacts_left_out"] == 60


def result(events_per_s: float, once: bool) -> dict[str, Any]:
    """A result as backlog.py writes it, the parts S7's verdicts and tables read."""
    return {
        "config": {"events": 100_000, "workers": 2},
        "store": {"events": 100_000, "events_per_s": 12_000.0, "batch": 1000},
        "rates": {
            "events_per_s": events_per_s,
            "seconds_from_launch": 100_000 / events_per_s,
            "first_processed_after_s": 2.5,
            "span_events_per_s": events_per_s * 1.2,
        },
        "checks": {
            "processed": 100_000 if once else 99_999,
            "rows_total": 100_000,
            "attempts_not_1": 0,
            "dead": 0 if once else 1,
            "ledger_rows": 100_000,
            "once_ok": once,
        },
        "postgres_settings": {"server_version": "15.20 (Debian)", "autovacuum": "off"},
        "table": "| workers |",
    }


def test_s7_is_met_at_the_target_rate_from_the_launch() -> None:
    (rate, once) = backlog_targets("S7", result(S7_EVENTS_PER_S, True))
    assert rate[3] is True
    assert "10,000 events/s" in rate[2]
    assert "first processed after 2.5 s" in rate[2]
    assert once[3] is True


def test_s7_not_met_below_the_rate_or_when_an_event_is_not_once() -> None:
    (rate, once) = backlog_targets("S7", result(S7_EVENTS_PER_S - 1, False))
    assert rate[3] is False
    assert once[3] is False
    assert "1 dead" in once[2]


def test_s7_failed_run_is_not_judged() -> None:
    [(sid, _, measured, met)] = backlog_targets("S7", {"failed": "redis-server did not start"})
    assert (sid, measured, met) == ("S7", "redis-server did not start", None)


def test_s7_page_text_names_the_settings() -> None:
    text = backlog_text(result(5000.0, True))
    assert text.startswith("| workers |")
    assert "100,000 signed GitHub" in text
    assert "PostgreSQL 15.20: autovacuum off" in text


def _ran(**over: Any) -> dict[str, Any]:
    checks = {
        "once_ok": True,
        "processed": 10,
        "rows_total": 10,
        "stored": 10,
        "attempts_not_1": 0,
        "dead": 0,
        "ledger_rows": 10,
        "ledger_not_run": 0,
        "events_without_ledger_row": 0,
    }
    return {"checks": checks, "worker_exit_codes": [0, 0], "worker_log_problems": [], **over}


def test_a_worker_ended_by_sigterm_while_starting_is_no_error_but_one_that_had_started_is() -> None:
    assert backlog.errors_of(_ran()) == []
    stopped = _ran(worker_exit_codes=[0, -15], workers_stopped_while_starting=[1])
    assert backlog.errors_of(stopped) == []
    assert backlog.errors_of(_ran(worker_exit_codes=[0, -15])) == ["workers exited with [-15]"]
    crashed = _ran(worker_exit_codes=[1, -15], workers_stopped_while_starting=[1])
    assert backlog.errors_of(crashed) == ["workers exited with [1]"]
