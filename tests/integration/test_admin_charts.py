"""The admin UI's per-source charts: what store.activity counts per minute (on SQLite
and PostgreSQL), that its ranges are index conditions, and the SVG it makes (no
script, no inline style, every text escaped)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from hookd.web import admin_charts
from hookd.web.admin_charts import Chart, Line, render
from store import activity, db
from store.ids import id_floor
from tests.support.activity_data import event_row, insert_rows, insert_run

pytestmark = pytest.mark.anyio


def minute_of(at: datetime) -> int:
    return int(at.timestamp() // 60)


async def test_activity_counts_received_processed_and_lag_per_minute(db_url: str) -> None:
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    a, b = now - timedelta(hours=2), now - timedelta(minutes=30)
    lags_s = (60, 70, 100)
    rows = [event_row("github", a, a + timedelta(seconds=lag), i) for i, lag in enumerate(lags_s)]
    rows += [event_row("github", b, None, 10 + i) for i in range(2)]
    # Outside the range: received 30 hours ago and processed 10 hours ago (a replay);
    # and another source's event in the range.
    old = now - timedelta(hours=30)
    rows.append(event_row("github", old, now - timedelta(hours=10), 20))
    rows.append(event_row("stripe", a, a + timedelta(seconds=5), 21))
    engine = db.create_engine(db_url)
    try:
        await insert_rows(engine, rows)
        async with engine.connect() as conn:
            got = await activity.minutes(conn, "github", now - timedelta(hours=24))
    finally:
        await engine.dispose()
    assert got.received == {minute_of(a): 3, minute_of(b): 2}
    # Processed 60, 70 and 100 s after a (a is at :30): minutes a+1 (two) and a+2 (one).
    assert got.processed == {minute_of(a) + 1: 2, minute_of(a) + 2: 1}
    assert got.lag_max_s[minute_of(a) + 1] == pytest.approx(70, abs=0.01)
    assert got.lag_avg_s[minute_of(a) + 1] == pytest.approx(65, abs=0.01)
    assert got.lag_max_s[minute_of(a) + 2] == pytest.approx(100, abs=0.01)


async def test_activity_lists_the_runs_of_the_range_oldest_first(db_url: str) -> None:
    now = datetime.now(UTC)
    engine = db.create_engine(db_url)
    try:
        await insert_run(engine, "stripe", now - timedelta(hours=30), missing=9, late=9)
        first = await insert_run(engine, "stripe", now - timedelta(hours=3), missing=2, late=1)
        second = await insert_run(engine, "stripe", now - timedelta(hours=1), missing=0, late=0)
        await insert_run(engine, "github", now - timedelta(hours=1), missing=5, late=0)
        async with engine.connect() as conn:
            runs = await activity.runs(conn, "stripe", now - timedelta(hours=24))
    finally:
        await engine.dispose()
    assert [(r.id, r.missing, r.late) for r in runs] == [(first, 2, 1), (second, 0, 0)]


@pytest.mark.postgres
async def test_activity_queries_are_bounded_index_ranges_on_postgres(pg_url: str) -> None:
    """Each query's range is an index condition on (source, id): it reads the source's
    last day of the index, and only today's and yesterday's partitions."""
    since = datetime.now(UTC) - timedelta(hours=24)
    engine = db.create_engine(pg_url)
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SET enable_seqscan = off"))
            plans = []
            for sql in (
                "SELECT count(*) FROM events WHERE source = :source AND id >= :floor "
                "AND received_at >= :since",
                "SELECT count(*) FROM events WHERE source = :source AND id >= :floor "
                "AND processed_at IS NOT NULL AND processed_at >= :since",
                "SELECT id FROM reconcile_runs WHERE source = :source AND id >= :floor "
                "ORDER BY id DESC LIMIT 500",
            ):
                explained = await conn.execute(
                    sa.text("EXPLAIN (FORMAT JSON) " + sql),
                    {"source": "github", "floor": id_floor(int(since.timestamp() * 1000)),
                     "since": since},
                )  # fmt: skip
                plans.append(json.dumps(explained.scalar()))
    finally:
        await engine.dispose()
    for plan in plans:
        conds = re.findall(r'"Index Cond": "([^"]*)"', plan)
        assert conds, plan
        assert all(re.search(r"\bsource\b.*\bid\)?(::text)? >=", c) for c in conds), conds
    # Partitions of days before the range are not read.
    scanned = set(re.findall(r'"Relation Name": "(events_[^"]*)"', plans[0]))
    first_day = f"events_p{since:%Y%m%d}"
    assert scanned and all(name >= first_day or name == "events_default" for name in scanned)


def test_a_chart_is_svg_without_script_or_inline_style_and_escapes_its_text() -> None:
    start = 29_000_000
    hostile = '<script>alert(1)</script>"'
    chart = Chart(
        hostile,
        start,
        60,
        admin_charts.count,
        lines=[
            Line("a", "series-a", {start + 1: 3.0, start + 2: 7.0}),
            Line("b", "series-c", {start + 10: 2.0}, zero_when_missing=False),
        ],
        summary=hostile,
    )
    svg = str(render(chart))
    assert svg.startswith("<svg ") and svg.endswith("</svg>")
    assert "<script" not in svg and "style=" not in svg and " on" not in svg.lower()
    assert "&lt;script&gt;" in svg
    # Counts draw every minute (0 where none); a gappy series draws only its points.
    polyline = re.search(r'<polyline class="series-a" points="([^"]*)"', svg)
    assert polyline and len(polyline.group(1).split()) == 60
    assert '<circle class="series-c"' in svg
    # The scale's top is the next 1-2-5 step above the peak: 7 -> 10.
    assert ">10</text>" in svg


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (0.3, 0.5), (1, 1), (7, 10), (11, 20), (480, 500), (501, 1000)]
)
def test_the_scale_rounds_up_to_one_two_or_five(value: float, ceiling: float) -> None:
    assert admin_charts.nice_ceiling(value) == pytest.approx(ceiling)
