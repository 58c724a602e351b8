"""Server-rendered SVG charts for the admin UI: no script, nothing loaded, no inline
style (the pages' Content-Security-Policy allows neither), colours from admin.css
by class. A chart is a time axis of whole minutes (the last 24 hours) with lines
(a value per minute; a minute without one is a gap, or 0 for counts) and bars (a
value at an instant: a reconciliation run). Every text in it is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from hookd.ops.sources import RunPoint, SourceOps
from store.status import RunStatus

WIDTH = 960
HEIGHT = 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 24
TICK_HOURS = 3
BAR_W = 3.0
MARK_H = 7


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    css: str  # a class admin.css colours: series-a, series-b, ...
    values: dict[int, float]  # unix minute -> value
    zero_when_missing: bool = True


@dataclass(frozen=True, slots=True)
class Bar:
    minute: float  # unix minute, fractional
    parts: Sequence[tuple[str, float]]  # (css class, height) stacked from 0
    title: str
    # A mark under the axis in this class (a run that failed, or did not finish): what
    # happened to it, beside what it counted. None: a tick on the axis when it counted
    # nothing ("bar-none").
    mark: str | None = None


@dataclass(slots=True)
class Chart:
    title: str
    start_minute: int
    minutes: int
    y_format: Callable[[float], str]
    lines: list[Line] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    summary: str = ""


def nice_ceiling(value: float) -> float:
    """The least of 1, 2, 5 times 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def seconds(value: float) -> str:
    if value <= 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def _x(chart: Chart, minute: float) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (minute - chart.start_minute) / max(1, chart.minutes) * span


def _y(value: float, top: float) -> float:
    span = HEIGHT - TOP - BOTTOM
    return HEIGHT - BOTTOM - min(value, top) / top * span


def _segments(chart: Chart, line: Line) -> list[list[tuple[int, float]]]:
    """The line's runs of consecutive minutes with a value (all of them for counts)."""
    segments: list[list[tuple[int, float]]] = [[]]
    for minute in range(chart.start_minute, chart.start_minute + chart.minutes):
        value = line.values.get(minute)
        if value is None and line.zero_when_missing:
            value = 0.0
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        segments[-1].append((minute, value))
    return [s for s in segments if s]


def render(chart: Chart) -> Markup:
    peak = max(
        [v for line in chart.lines for v in line.values.values()]
        + [sum(h for _, h in bar.parts) for bar in chart.bars]
        + [0.0]
    )
    top = nice_ceiling(peak)
    label = escape(chart.title)
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{label}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{label}</title>",
    ]
    if chart.summary:
        out.append(f"<desc>{escape(chart.summary)}</desc>")
    # Horizontal grid: 0, half, top, labelled on the left.
    for fraction in (0.0, 0.5, 1.0):
        y = _y(top * fraction, top)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        text = escape(chart.y_format(top * fraction))
        out.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
        )
    # Hour ticks every TICK_HOURS, on whole UTC hours.
    first_hour = -(-chart.start_minute // 60) * 60
    for minute in range(first_hour, chart.start_minute + chart.minutes + 1, 60 * TICK_HOURS):
        x = _x(chart, minute)
        at = datetime.fromtimestamp(minute * 60, UTC).strftime("%H:%M")
        out.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
        )
        out.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle">{at}</text>'
        )
    for bar in chart.bars:
        x = _x(chart, bar.minute) - BAR_W / 2
        base = 0.0
        parts = []
        for css, height in bar.parts:
            if height <= 0:
                continue
            y_top, y_base = _y(base + height, top), _y(base, top)
            parts.append(
                f'<rect class="{escape(css)}" x="{x:.1f}" y="{y_top:.1f}" '
                f'width="{BAR_W}" height="{max(1.0, y_base - y_top):.1f}"/>'
            )
            base += height
        if bar.mark is not None:  # under the axis, clear of the hour labels
            parts.append(
                f'<rect class="{escape(bar.mark)}" x="{x:.1f}" y="{HEIGHT - BOTTOM + 1}" '
                f'width="{BAR_W}" height="{MARK_H}"/>'
            )
        elif not parts:  # a run that found nothing: a tick on the axis
            y_axis = HEIGHT - BOTTOM - 2
            parts.append(
                f'<rect class="bar-none" x="{x:.1f}" y="{y_axis}" width="{BAR_W}" height="2"/>'
            )
        out.append(f"<g><title>{escape(bar.title)}</title>{''.join(parts)}</g>")
    for line in chart.lines:
        for segment in _segments(chart, line):
            points = " ".join(f"{_x(chart, m + 0.5):.1f},{_y(v, top):.1f}" for m, v in segment)
            if len(segment) == 1:
                ((m, v),) = segment
                out.append(
                    f'<circle class="{escape(line.css)}" cx="{_x(chart, m + 0.5):.1f}" '
                    f'cy="{_y(v, top):.1f}" r="1.5"/>'
                )
            else:
                out.append(f'<polyline class="{escape(line.css)}" points="{points}"/>')
    out.append(
        f'<line class="axis-line" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
        f'y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
    )
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 - numbers and escaped text only


DAY_MINUTES = 24 * 60


# A run's mark on the runs chart by its status: what it came to, beside its counts. A
# run that succeeded has none (a tick on the axis when it found nothing).
RUN_MARKS = {
    RunStatus.FAILED: "bar-failed",
    RunStatus.RUNNING: "bar-other",
    RunStatus.QUEUED: "bar-other",
    RunStatus.LEASE_HELD: "bar-other",
}


@dataclass(frozen=True, slots=True)
class SourceCharts:
    events: Markup
    lag: Markup
    runs: Markup | None  # None: the source is not reconciled
    received: int
    processed: int
    run_count: int
    missing: int
    late: int | None  # None: no late count in this schema
    failed: int = 0  # runs that failed
    other: int = 0  # runs still running, queued, or skipped (another held the lease)
    empty: int = 0  # runs that succeeded and found nothing


def _run_title(r: RunPoint) -> str:
    counts = f"{r.missing} missed" + ("" if r.late is None else f", {r.late} late")
    said = f"run {r.id} at {r.started_at:%H:%M:%S} UTC, {r.status}: {counts}"
    return said + (f"; {r.error}" if r.status == RunStatus.FAILED and r.error else "")


async def source_charts(
    sources: SourceOps, source: str, *, reconciled: bool, now: datetime
) -> SourceCharts:
    """The source's last 24 hours, minute by minute, as three charts."""
    start = int(now.timestamp() // 60) - DAY_MINUTES + 1
    since = datetime.fromtimestamp(start * 60, UTC)
    seen = await sources.activity(source, since, reconciled=reconciled)
    per_minute, runs = seen.minutes, seen.runs
    received, processed = sum(per_minute.received.values()), sum(per_minute.processed.values())
    events = Chart(
        "Events per minute, last 24 hours (UTC)",
        start,
        DAY_MINUTES,
        count,
        lines=[
            Line("received", "series-a", {m: float(n) for m, n in per_minute.received.items()}),
            Line("processed", "series-b", {m: float(n) for m, n in per_minute.processed.items()}),
        ],
        summary=f"{received} received, {processed} processed in the last 24 hours",
    )
    worst = max(per_minute.lag_max_s.values(), default=0.0)
    lag = Chart(
        "Processing lag per minute: received to processed (UTC)",
        start,
        DAY_MINUTES,
        seconds,
        lines=[
            Line("longest", "series-c", per_minute.lag_max_s, zero_when_missing=False),
            Line("mean", "series-b", per_minute.lag_avg_s, zero_when_missing=False),
        ],
        summary=f"longest wait {seconds(worst)}",
    )
    missing = sum(r.missing for r in runs)
    late = sum(r.late or 0 for r in runs) if seen.keeps_late else None
    marks = [RUN_MARKS.get(RunStatus(r.status)) for r in runs]
    failed = marks.count("bar-failed")
    other = marks.count("bar-other")
    empty = sum(1 for r, m in zip(runs, marks, strict=True) if m is None and not _counted(r))
    run_chart = None
    if reconciled:
        bars = [
            Bar(
                minute=r.started_at.timestamp() / 60,
                parts=[("bar-missed", float(r.missing)), ("bar-late", float(r.late or 0))],
                title=_run_title(r),
                mark=mark,
            )
            for r, mark in zip(runs, marks, strict=True)
        ]
        said = f"{len(runs)} runs ({failed} failed), {missing} missed" + (
            "" if late is None else f", {late} late"
        )
        run_chart = render(
            Chart(
                "Reconciliation runs: events missed and late per run (UTC)",
                start,
                DAY_MINUTES,
                count,
                bars=bars,
                summary=said,
            )
        )
    return SourceCharts(
        events=render(events),
        lag=render(lag),
        runs=run_chart,
        received=received,
        processed=processed,
        run_count=len(runs),
        missing=missing,
        late=late,
        failed=failed,
        other=other,
        empty=empty,
    )


def _counted(run: RunPoint) -> bool:
    return run.missing > 0 or (run.late or 0) > 0


# The coverage timeline: a source's coverage report (``reconcile.coverage``'s merged
# view, as its resource) drawn as one band across the range: each checked interval
# and each hole a rectangle, a hole coloured by its main reason.
TIMELINE_HEIGHT = 64
BAND_TOP, BAND_HEIGHT = 8, 30
TIMELINE_TICKS = 6
# Hole reasons by severity, with the class admin.css colours them by: the main reason
# of a hole is the first of these it gives.
HOLE_CLASSES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"unrecoverable", "beyond_retention"}), "cov-lost"),
    (frozenset({"failed", "silent"}), "cov-failed"),
    (frozenset({"not_checked"}), "cov-off"),
    (frozenset({"not_recorded"}), "cov-unrecorded"),
    (frozenset({"settling", "pending"}), "cov-due"),
)
CHECKED_CLASS = "cov-checked"


def hole_class(kinds: Sequence[str]) -> str:
    """The class of a hole with these reasons: its most severe one's."""
    for members, css in HOLE_CLASSES:
        if members.intersection(kinds):
            return css
    return "cov-unrecorded"


def _moment(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _tick_label(moment: float, span_s: float) -> str:
    at = datetime.fromtimestamp(moment, UTC)
    if span_s <= 2 * 86_400:
        return at.strftime("%m-%d %H:%M")
    return at.strftime("%Y-%m-%d")


def _span_title(span: Mapping[str, Any]) -> str:
    when = f"{span['from']} to {span['to']} ({seconds(float(span['seconds']))})"
    if span["state"] == "checked":
        runs = int(span.get("runs", 0))
        return (
            f"checked {when}: {runs} run{'' if runs == 1 else 's'}, "
            f"{int(span.get('repaired', 0))} repaired"
        )
    reasons = "; ".join(
        r["kind"] + (f": {r['detail']}" if r.get("detail") else "") for r in span["reasons"]
    )
    return f"hole {when}: {reasons or 'no reason recorded'}"


def coverage_timeline(view: Mapping[str, Any]) -> Markup:
    """The coverage report ``view`` (a ``hookd.ops.models.Coverage``'s answer: since,
    until, intervals) as one SVG band over its range: checked intervals and holes, each
    with its title."""
    since, until = _moment(view["since"]), _moment(view["until"])
    span_s = max(until - since, 1e-9)
    width = WIDTH - LEFT - RIGHT

    def x(moment: float) -> float:
        return LEFT + (min(max(moment, since), until) - since) / span_s * width

    intervals = view["intervals"]
    holes = sum(1 for s in intervals if s["state"] != "checked")
    label = escape(
        f"Coverage of {view['source']} from {view['since']} to {view['until']}: "
        f"{len(intervals) - holes} checked interval(s), {holes} hole(s)"
    )
    out = [
        f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {TIMELINE_HEIGHT}" width="{WIDTH}" '
        f'height="{TIMELINE_HEIGHT}" role="img" aria-label="{label}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{label}</title>",
    ]
    for span in intervals:
        x0, x1 = x(_moment(span["from"])), x(_moment(span["to"]))
        if span["state"] == "checked":
            css = CHECKED_CLASS
        else:
            css = hole_class([r["kind"] for r in span["reasons"]])
        out.append(
            f'<g><title>{escape(_span_title(span))}</title><rect class="band {css}" '
            f'x="{x0:.1f}" y="{BAND_TOP}" width="{max(1.0, x1 - x0):.1f}" '
            f'height="{BAND_HEIGHT}"/></g>'
        )
    axis_y = BAND_TOP + BAND_HEIGHT
    for i in range(TIMELINE_TICKS):
        moment = since + span_s * i / (TIMELINE_TICKS - 1)
        tx = x(moment)
        anchor = "start" if i == 0 else "end" if i == TIMELINE_TICKS - 1 else "middle"
        out.append(
            f'<line class="tick" x1="{tx:.1f}" x2="{tx:.1f}" y1="{axis_y}" y2="{axis_y + 5}"/>'
        )
        out.append(
            f'<text class="axis" x="{tx:.1f}" y="{TIMELINE_HEIGHT - 6}" '
            f'text-anchor="{anchor}">{escape(_tick_label(moment, span_s))}</text>'
        )
    out.append(
        f'<line class="axis-line" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{axis_y}" y2="{axis_y}"/>'
    )
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 - numbers and escaped text only
