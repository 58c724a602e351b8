"""The plots of ``bench/run.py``'s report, ``docs/img/bench_*.png``: one function a chart.

Each chart function takes the results and the title's note (" (quick run)" or "") and
returns a matplotlib figure, or None when its scenario has nothing to draw. matplotlib is
imported only when plotting, so the runner starts without it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from bench.common import IMG, Results
from bench.verdicts import (
    S1_P99_MS,
    S3_EVENTS_PER_S,
    S3_LAG_P99_MS,
    S4_REPAIRED_PER_S,
    TIMES,
    ingest_rows,
)

# matplotlib's objects are untyped here: mypy does not check bench/.
Figure = Any
Chart = Callable[[Results, str], Figure | None]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend: files only, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain_log(ax: Any) -> None:
    """Log scale labelled 5, 10, 20 rather than in scientific notation."""
    from matplotlib import ticker

    ax.set_yscale("log")
    plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    few = low > 0 and high / low < 100
    ax.yaxis.set_minor_formatter(plain if few else ticker.NullFormatter())


def save(fig: Figure, name: str) -> None:
    for ax in fig.axes:
        if ax.get_yscale() == "log":
            plain_log(ax)
    fig.tight_layout()
    fig.savefig(IMG / name)
    pyplot().close(fig)


# --------------------------------------------------------------------------- S1, S2


def plotted_ingest(results: Results) -> list[dict[str, Any]]:
    """S1's and S2's deployments where both hookd and the bare app have a max."""
    rows = [row for sid in ("S1", "S2") if sid in results for row in ingest_rows(results[sid])]
    return [r for r in rows if r["hookd_rps"] and r["bare_rps"]]


def ingest_throughput(results: Results, note: str) -> Figure | None:
    rows = plotted_ingest(results)
    if not rows:
        return None
    fig, ax = pyplot().subplots(figsize=(8, 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["bare_rps"] for r in rows], 0.4, label="bare app", color="#999")
    bars = ax.bar([i + 0.2 for i in x], [r["hookd_rps"] for r in rows], 0.4, label="hookd")
    for bar, r in zip(bars, rows, strict=True):
        ax.annotate(
            f"{r['ratio']:.2f}{TIMES}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
        )
    ax.set_xticks(list(x), [r["label"].replace(", ", ",\n", 1) for r in rows])
    ax.set_ylabel("requests/s acknowledged (wrk, 64 connections)")
    ax.set_title("Max ingest throughput: hookd vs the bare Starlette app" + note)
    ax.legend()
    return fig


def ingest_latency(results: Results, note: str) -> Figure | None:
    fixed = [r for r in plotted_ingest(results) if r["fixed"]]
    if not fixed:
        return None
    names = ["p50", "p90", "p99", "p999", "max"]
    fig, ax = pyplot().subplots(figsize=(8, 4))
    width = 0.8 / len(fixed)
    for i, r in enumerate(fixed):
        lat = r["fixed"]["latency_ms"]
        values = [lat[n] for n in names] + [r["fixed"]["latency_from_due_ms"]["p99"]]
        ax.bar(
            [j + (i - (len(fixed) - 1) / 2) * width for j in range(len(values))],
            values,
            width,
            label=f"{r['label']} ({r['fixed']['rate_achieved']:,.0f} req/s)",
        )
    ax.axhline(S1_P99_MS, color="red", linestyle="--", linewidth=1, label="S1 target: p99 10 ms")
    ax.set_yscale("log")
    ax.set_xticks(range(6), ["p50", "p90", "p99", "p99.9", "max", "p99 from due"])
    ax.set_ylabel("ms")
    ax.set_title("Ack latency at 70% of hookd's max (open loop)" + note)
    ax.legend(fontsize=7)
    return fig


# --------------------------------------------------------------------------- S3, S4


def pipeline(results: Results, note: str) -> Figure | None:
    s3 = results.get("S3")
    if not (s3 and s3.get("runs")):
        return None
    runs = s3["runs"]
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(9, 3.8))
    labels = [f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}" for r in runs]
    a1.bar(labels, [r["throughput_events_per_s"] for r in runs], label="hookd events/s processed")
    bare_rps = (s3.get("bare") or {}).get("rps")
    if bare_rps:
        a1.axhline(bare_rps, color="#555", label=f"bare app req/s, same client ({bare_rps:,.0f})")
    a1.axhline(S3_EVENTS_PER_S, color="red", linestyle="--", linewidth=1, label="target 2,000/s")
    a1.set_ylabel("events/s")
    a1.set_title("Throughput (no-op handler)")
    a1.legend(fontsize=7)
    x = range(len(runs))
    a2.bar([i - 0.2 for i in x], [r["lag_p50_ms"] for r in runs], 0.4, label="p50")
    a2.bar([i + 0.2 for i in x], [r["lag_p99_ms"] for r in runs], 0.4, label="p99")
    a2.axhline(S3_LAG_P99_MS, color="red", linestyle="--", linewidth=1, label="target p99 1 s")
    a2.set_xticks(
        list(x),
        [f"{lb}\n@ {r['lag_rate_per_s']:,.0f}/s" for lb, r in zip(labels, runs, strict=True)],
    )
    a2.set_ylabel("received → processed, ms")
    a2.set_title("Lag at 50% of that rate")
    a2.legend(fontsize=7)
    fig.suptitle("End to end: PostgreSQL + Redis + hookd worker" + note)
    return fig


def reconcile(results: Results, note: str) -> Figure | None:
    s4 = results.get("S4")
    if not (s4 and s4.get("providers")):
        return None
    ps = s4["providers"]
    fig, ax = pyplot().subplots(figsize=(7, 3.8))
    x = range(len(ps))
    ax.bar(
        [i - 0.2 for i in x],
        [(p.get("bare") or {}).get("items_per_s", 0) for p in ps],
        0.4,
        color="#999",
        label="plain client, stores nothing",
    )
    ax.bar(
        [i + 0.2 for i in x],
        [p["repaired_per_s"] for p in ps],
        0.4,
        label="hookd reconcile: repaired/s",
    )
    ax.axhline(S4_REPAIRED_PER_S, color="red", linestyle="--", linewidth=1, label="target 1,000/s")
    ax.set_yscale("log")
    ax.set_xticks(list(x), [p["provider"] for p in ps])
    ax.set_ylabel("events/s")
    ax.set_title(f"Reconciliation of {ps[0]['events']:,} missing events (emulators)" + note)
    ax.legend(fontsize=7)
    return fig


# --------------------------------------------------------------------------- S5, S6


def soaked(results: Results, sid: str = "S5") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A soak's (S5's or S6's) targets that have samples, and the soak's config."""
    soak = results.get(sid)
    runs = [r for r in (soak or {}).get("results", []) if r.get("samples")]
    return runs, (soak.get("config", {}) if soak else {})


def soak_title(cfg: dict[str, Any], what: str) -> str:
    who = (
        "Quickstart default (SQLite, serve alone)"
        if cfg.get("deployment") == "quickstart"
        else "Soak"
    )
    return f"{who} at {cfg.get('rate', 0):,.0f} req/s: {what}"


def spans(ax: Any, cfg: dict[str, Any]) -> None:
    """Shade the first and last windows that RSS growth and drift compare."""
    w, c, total = cfg.get("warmup"), cfg.get("compare"), cfg.get("seconds")
    if w is None or c is None or total is None:
        return
    ax.axvspan(w, w + c, color="green", alpha=0.08, label="first window")
    ax.axvspan(total - c, total, color="orange", alpha=0.1, label="last window")


def soak_rss(results: Results, note: str, sid: str = "S5") -> Figure | None:
    runs, cfg = soaked(results, sid)
    if not runs:
        return None
    fig, ax = pyplot().subplots(figsize=(8, 3.8))
    for r in runs:
        t = [x["t_s"] for x in r["samples"]]
        for key in r["samples"][0]["rss_mb"]:
            ax.plot(
                t,
                [x["rss_mb"].get(key) for x in r["samples"]],
                marker=".",
                label=f"{r['target']} {key}",
            )
    spans(ax, cfg)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS, MB (with children)")
    ax.set_title(soak_title(cfg, "memory") + note)
    ax.legend(fontsize=7)
    return fig


def soak_latency(results: Results, note: str) -> Figure | None:
    runs, cfg = soaked(results)
    if not runs:
        return None
    fig, ax = pyplot().subplots(figsize=(8, 3.8))
    for r in runs:
        t = [x["t_s"] for x in r["samples"]]
        line = ax.plot(
            t,
            [x.get("ack_p99_from_due_ms") for x in r["samples"]],
            marker=".",
            label=f"{r['target']} p99 (from due)",
        )
        ax.plot(
            t,
            [x.get("ack_p50_ms") for x in r["samples"]],
            linestyle=":",
            color=line[0].get_color(),
            label=f"{r['target']} p50",
        )
    spans(ax, cfg)
    ax.set_yscale("log")
    ax.set_xlabel("seconds")
    ax.set_ylabel("ack latency per window, ms")
    ax.set_title(f"Soak at {cfg.get('rate', 0):,.0f} req/s: latency" + note)
    ax.legend(fontsize=7)
    return fig


def soak_processing(results: Results, note: str, sid: str = "S5") -> Figure | None:
    runs, cfg = soaked(results, sid)
    hookd = next((r for r in runs if r["target"] == "hookd"), None)
    if not (hookd and any("lag_p99_ms" in x for x in hookd["samples"])):
        return None
    samples = hookd["samples"]
    fig, a1 = pyplot().subplots(figsize=(8, 3.8))
    t = [x["t_s"] for x in samples]
    a1.plot(
        t, [x.get("lag_p99_ms") for x in samples], marker=".", label="lag p99 (by window received)"
    )
    a1.plot(t, [x.get("lag_p50_ms") for x in samples], linestyle=":", label="lag p50")
    a1.set_yscale("log")
    a1.set_xlabel("seconds")
    a1.set_ylabel("received → processed, ms")
    a2 = a1.twinx()
    a2.plot(t, [x.get("processed_per_s") for x in samples], color="green", label="processed/s")
    a2.plot(
        t,
        [x.get("rps") for x in samples],
        color="grey",
        linestyle="--",
        label="acknowledged req/s",
    )
    a2.set_ylabel("per second")
    a2.set_ylim(bottom=0)
    h1, l1 = a1.get_legend_handles_labels()
    h2, l2 = a2.get_legend_handles_labels()
    a1.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
    who = "serve alone, SQLite" if cfg.get("deployment") == "quickstart" else "hookd + 1 worker"
    a1.set_title(f"Soak: processing lag and throughput ({who})" + note)
    return fig


# The page shows each file under its scenario; this order is also the order they are drawn.
CHARTS: list[tuple[str, Chart]] = [
    ("bench_ingest_throughput.png", ingest_throughput),
    ("bench_ingest_latency.png", ingest_latency),
    ("bench_pipeline.png", pipeline),
    ("bench_reconcile.png", reconcile),
    ("bench_soak_rss.png", soak_rss),
    ("bench_soak_latency.png", soak_latency),
    ("bench_soak_processing.png", soak_processing),
    ("bench_quickstart_soak_rss.png", partial(soak_rss, sid="S6")),
    ("bench_quickstart_soak_processing.png", partial(soak_processing, sid="S6")),
]


def plots(results: Results) -> list[str]:
    """PNG files in docs/img; returns their names."""
    plt = pyplot()
    IMG.mkdir(parents=True, exist_ok=True)
    plt.rcParams.update({"figure.dpi": 110, "font.size": 9})
    quick = any(s.get("quick") for s in results.values())
    note = " (quick run)" if quick else ""
    made: list[str] = []
    for name, chart in CHARTS:
        fig = chart(results, note)
        if fig is not None:
            save(fig, name)
            made.append(name)
    return made
