"""The admin UI's per-source charts: what store.admin.activity counts per minute (on SQLite
and PostgreSQL), that its ranges are index conditions, and the SVG it makes (no
script, no inline style, every text escaped)."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from hookd.sources import parse_sources
from hookd.web import admin_charts
from hookd.web.admin_charts import Chart, Line, render
from store.admin import activity
from store.ids import id_floor
from store.reconcile import coverage as coverage_ledger
from tests.support.activity_data import event_row, insert_rows, insert_run
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of

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
    async with engine_of(db_url) as engine:
        await insert_rows(engine, rows)
        async with engine.connect() as conn:
            got = await activity.minutes(conn, "github", now - timedelta(hours=24))
    assert got.received == {minute_of(a): 3, minute_of(b): 2}
    # Processed 60, 70 and 100 s after a (a is at :30): minutes a+1 (two) and a+2 (one).
    assert got.processed == {minute_of(a) + 1: 2, minute_of(a) + 2: 1}
    assert got.lag_max_s[minute_of(a) + 1] == pytest.approx(70, abs=0.01)
    assert got.lag_avg_s[minute_of(a) + 1] == pytest.approx(65, abs=0.01)
    assert got.lag_max_s[minute_of(a) + 2] == pytest.approx(100, abs=0.01)


async def test_activity_lists_the_runs_of_the_range_oldest_first(db_url: str) -> None:
    now = datetime.now(UTC)
    async with engine_of(db_url) as engine:
        await insert_run(engine, "stripe", now - timedelta(hours=30), missing=9, late=9)
        first = await insert_run(engine, "stripe", now - timedelta(hours=3), missing=2, late=1)
        second = await insert_run(engine, "stripe", now - timedelta(hours=1), missing=0, late=0)
        await insert_run(engine, "github", now - timedelta(hours=1), missing=5, late=0)
        async with engine.connect() as conn:
            runs = await activity.runs(conn, "stripe", now - timedelta(hours=24))
    assert [(r.id, r.missing, r.late) for r in runs] == [(first, 2, 1), (second, 0, 0)]


@pytest.mark.postgres
async def test_activity_queries_are_bounded_index_ranges_on_postgres(pg_url: str) -> None:
    """Each query's range is an index condition on (source, id): it reads the source's
    last day of the index, and only today's and yesterday's partitions."""
    since = datetime.now(UTC) - timedelta(hours=24)
    async with engine_of(pg_url) as engine, engine.connect() as conn:
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


COVERAGE_TOKEN = "coverage-chart-token"


def bands(svg: str) -> list[tuple[str, str]]:
    """The timeline's bands in order: (class, title)."""
    found = re.findall(r'<g><title>([^<]*)</title><rect class="band ([a-z-]+)"', svg)
    return [(css, title) for title, css in found]


async def test_the_coverage_page_draws_a_band_per_interval_and_hole_coloured_by_reason(
    db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "hookd.toml"
    path.write_text(
        f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "http://127.0.0.1:9"
allow_insecure = true
token = "sk_test_timeline"
"""
    )
    sources = parse_sources(path.read_text(), path, env={})
    now = datetime.now(UTC).replace(microsecond=0)
    hours = [now - timedelta(hours=h) for h in (10, 8, 7, 5, 4, 3)]
    async with engine_of(db_url) as engine:
        runs = [await insert_run(engine, "stripe", at, missing=0, late=0) for at in hours[1:]]
        async with engine.begin() as conn:
            for (start, end), outcome, run_id, reason in [
                ((hours[0], hours[1]), "complete", runs[0], None),
                ((hours[1], hours[2]), "failed", runs[1], "provider answered <500>"),
                ((hours[2], hours[3]), "repaired", runs[2], None),
                ((hours[3], hours[4]), "not_checked", None, "disabled by an operator"),
                ((hours[4], hours[5]), "unrecoverable", runs[3], "beyond retention"),
            ]:
                await coverage_ledger.record(
                    conn, source="stripe", start=start, end=end, outcome=outcome, now=now,
                    run_id=run_id, repaired=2 if outcome == "repaired" else 0, reason=reason,
                )  # fmt: skip
    since, until = (at.isoformat().replace("+00:00", "Z") for at in (hours[0], now))
    async with running_app(
        sources, db_url, admin_token=COVERAGE_TOKEN, reconcile_schedule=False
    ) as (_, client):
        await client.post("/admin/login", data={"token": COVERAGE_TOKEN})
        page = await client.get(
            "/admin/sources/stripe/coverage", params={"since": since, "until": until}
        )
    assert page.status_code == 200, page.text
    svg = re.search(r'<svg class="chart timeline".*?</svg>', page.text, re.S)
    assert svg is not None
    drawn = bands(svg.group(0))
    # Checked, failed, checked, disabled, lost; then hours nothing recorded (no cursor:
    # no run has succeeded) and the settle window before now.
    assert [css for css, _ in drawn] == [
        "cov-checked",
        "cov-failed",
        "cov-checked",
        "cov-off",
        "cov-lost",
        "cov-unrecorded",
        "cov-due",
    ]
    assert "settling" in drawn[-1][1]
    assert page.text.count("<tr>") - 1 == len(drawn)  # a band per row of the table
    assert drawn[2][1].endswith("1 run, 2 repaired")
    assert "provider answered &lt;500&gt;" in drawn[1][1]
    assert "<script" not in svg.group(0) and "style=" not in svg.group(0)
    # Left to right, edge to edge: each band starts where the one before it ends.
    xs = re.findall(
        r'class="band [a-z-]+" x="([0-9.]+)" y="[0-9]+" width="([0-9.]+)"', svg.group(0)
    )
    for (x0, w0), (x1, _) in itertools.pairwise(xs):
        assert float(x0) + float(w0) == pytest.approx(float(x1), abs=0.11)


def test_a_hole_takes_the_class_of_its_most_severe_reason() -> None:
    assert admin_charts.hole_class(["settling", "failed"]) == "cov-failed"
    assert admin_charts.hole_class(["not_checked", "beyond_retention"]) == "cov-lost"
    assert admin_charts.hole_class(["pending"]) == "cov-due"
    assert admin_charts.hole_class(["not_recorded", "settling"]) == "cov-unrecorded"
    assert admin_charts.hole_class([]) == "cov-unrecorded"


def test_the_coverage_timeline_escapes_its_text_and_keeps_a_short_hole_visible() -> None:
    hostile = '<script>alert(1)</script>"'
    view = {
        "source": hostile,
        "since": "2027-01-01T00:00:00Z",
        "until": "2027-01-11T00:00:00Z",
        "intervals": [
            {"from": "2027-01-01T00:00:00Z", "to": "2027-01-10T23:59:59Z", "seconds": 863_999,
             "state": "checked", "runs": 3, "repaired": 0},
            {"from": "2027-01-10T23:59:59Z", "to": "2027-01-11T00:00:00Z", "seconds": 1,
             "state": "hole", "reasons": [{"kind": "failed", "detail": hostile, "run_id": None}]},
        ],
    }  # fmt: skip
    svg = str(admin_charts.coverage_timeline(view))
    assert svg.startswith("<svg ") and svg.endswith("</svg>")
    assert "<script" not in svg and "style=" not in svg and " on" not in svg.lower()
    assert svg.count("&lt;script&gt;") == 3  # the label, the title and the hole's title
    hole = re.search(r'class="band cov-failed" x="[0-9.]+" y="[0-9]+" width="([0-9.]+)"', svg)
    assert hole and float(hole.group(1)) >= 1.0  # a second of ten days: still a pixel
    assert ">2027-01-01</text>" in svg and ">2027-01-11</text>" in svg
