"""``docs/benchmarks.md``, written by ``bench/run.py`` from the results in ``bench/results/``,
and the summary it prints at the end of a run.

The text between the analysis markers is written by hand and kept when the page is
regenerated; everything else comes from the results.
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime
from typing import Any

from bench.common import PAGE, TITLES, Results, load_results
from bench.plots import plots
from bench.tables import RENDERS, problems_of
from bench.verdicts import targets, verdict

ANALYSIS_START, ANALYSIS_END = "<!-- analysis -->", "<!-- /analysis -->"
ANALYSIS_PLACEHOLDER = """
_Not written yet._ For each scenario: what bounds it (the receiver's event loop, PostgreSQL,
the worker, the load generator, the emulator...), with the evidence (CPU columns, profiles),
and what would move it.
"""


# The plots shown under each scenario's tables, those of them that were drawn.
PICTURES = {
    "S1": ["bench_ingest_throughput.png", "bench_ingest_latency.png"],
    "S2": [],
    "S3": ["bench_pipeline.png"],
    "S4": ["bench_reconcile.png"],
    "S5": ["bench_soak_rss.png", "bench_soak_latency.png", "bench_soak_processing.png"],
    "S6": ["bench_quickstart_soak_rss.png", "bench_quickstart_soak_processing.png"],
    "S7": [],
}


def machine_table(info: dict[str, Any]) -> str:
    rows = [
        (
            "CPU",
            f"{info.get('cpu_model', '?')}, {info.get('cores', '?')} cores (as the OS sees them)",
        ),
        ("memory", f"{info.get('memory_gib', '?')} GiB"),
        ("OS", f"{info.get('os', '?')}, kernel {info.get('kernel', '?')}"),
        ("Python", str(info.get("python"))),
        (
            "server stack",
            ", ".join(
                f"{k} {info[k]}"
                for k in ("uvicorn", "uvloop", "httptools", "starlette")
                if info.get(k)
            ),
        ),
        (
            "database stack",
            ", ".join(
                f"{label} {info[k]}"
                for k, label in (
                    ("sqlalchemy", "SQLAlchemy"),
                    ("asyncpg", "asyncpg"),
                    ("postgresql", "PostgreSQL"),
                    ("aiosqlite", "aiosqlite"),
                    ("sqlite", "SQLite"),
                    ("arq", "arq"),
                    ("redis", "Redis server"),
                )
                if info.get(k)
            ),
        ),
        (
            "load generators",
            f"{info.get('wrk', '?')} (Debian), and the Python generators in bench/ (uvloop)",
        ),
        (
            "code",
            f"commit `{info.get('commit', '?')}`"
            + (
                f" with {info['modified_files']} tracked files modified"
                if info.get("modified_files")
                else ""
            ),
        ),
    ]
    lines = ["| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def keep_analysis() -> str:
    if PAGE.exists():
        text = PAGE.read_text(encoding="utf-8")
        match = re.search(
            re.escape(ANALYSIS_START) + r"(.*?)" + re.escape(ANALYSIS_END), text, re.DOTALL
        )
        if match:
            return match.group(1)
    return ANALYSIS_PLACEHOLDER


def soak_windows_note(s5: dict[str, Any] | None) -> str:
    cfg = (s5 or {}).get("config", {})
    warmup, compare = cfg.get("warmup", 60.0), cfg.get("compare", 60.0)
    return (
        f"S5's RSS growth and drift compare the first {compare:.0f} s after a {warmup:.0f} s "
        f'warm-up with the last {compare:.0f} s (the issue\'s "first minute" and "last '
        'minute" on a full run): RSS as the mean of the samples, latency as the p99 (from '
        "due) of all requests answered in each span."
    )


def when_line(s: dict[str, Any]) -> str:
    info = s.get("machine", {})
    stamp = s.get("when", "?")
    with contextlib.suppress(ValueError):
        stamp = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%d %H:%M UTC")
    kind = "**quick run (smoke test)**" if s.get("quick") else "full run"
    code = f"commit `{info.get('commit', '?')}`"
    if info.get("modified_files"):
        code += f" + {info['modified_files']} modified files"
    return f"_Measured {stamp}, {kind}, {code}._"


def section(
    sid: str, s: dict[str, Any] | None, pictures: list[str], images: list[str]
) -> list[str]:
    """One scenario's part of the page: when, its tables, its problems, its plots."""
    out = [f"## {sid}. {TITLES[sid]}", ""]
    if s is None:
        return [*out, "_Not run yet._", ""]
    out += [when_line(s), ""]
    try:
        out += [RENDERS[sid](s), ""]
    except (KeyError, TypeError, ValueError) as exc:
        out += [f"_Could not read the results: {type(exc).__name__}: {exc}_", ""]
    errors, warnings = problems_of(s)
    if errors:
        out += ["Errors:", ""] + [f"- {e}" for e in errors] + [""]
    if warnings:
        out += ["Warnings:", ""] + [f"- {w}" for w in warnings] + [""]
    for name in pictures:
        if name in images:
            out += [f"![{name.removesuffix('.png').replace('_', ' ')}](img/{name})", ""]
    return out


HOW_TO_RUN = [
    "## How to run",
    "",
    "```sh",
    "apt-get install -y wrk postgresql-client redis-server   # wrk 4.1 from Debian",
    ".venv/bin/python bench/run.py --quick        # smoke test, under 9 minutes",
    ".venv/bin/python bench/run.py                # everything, about 55-60 minutes",
    ".venv/bin/python bench/run.py --only S1,S5   # some; the others keep their results",
    ".venv/bin/python bench/run.py --report-only  # page and plots from bench/results/",
    "```",
    "",
    "Needs PostgreSQL on 127.0.0.1:5432 that trusts user `postgres`, and `redis-server` "
    "(each run starts its own, on a free port, memory only). The scripts create and drop "
    "their own databases (`hookd_run_*`), stop what they started on exit and on Ctrl-C, "
    "and send traffic only to 127.0.0.1. Raw numbers: `bench/results/s*_*.json` "
    "(gitignored). Each scenario is also a script of its own; see `bench/README.md`.",
    "",
    "| | scenario | script | baseline |",
    "| --- | --- | --- | --- |",
    "| S1 | signed GitHub webhooks acknowledged, PostgreSQL: ingest only (Redis set, no "
    "worker) and `hookd serve` alone (no Redis: it processes too); max req/s (wrk, 64 "
    "connections), then a "
    "fixed rate at 70% of hookd's max | `bench/ingest.py` | `bench/bare_app.py`: reads the "
    "body, answers 202 (and is driven at hookd's fixed rate too) |",
    "| S2 | the same on SQLite | `bench/ingest.py` | the same |",
    "| S3 | end to end: receiver + Redis + `hookd worker` (1 and 2) + no-op handler; "
    "events/s processed, then lag at 50% of that | `bench/pipeline.py` | bare app's req/s "
    "with the same client |",
    "| S4 | one `hookd reconcile` pass repairing 10,000 missing events from the emulators "
    "| `bench/reconcile.py` | a plain httpx client paging through the same emulator, "
    "storing nothing |",
    "| S5 | soak: receiver + Redis + one worker at 50% of a measured max for 10 minutes, "
    "sampled every 10 s | `bench/soak.py` | bare app at the same rate |",
    "| S6 | the Quickstart default sustained: `hookd serve` alone on SQLite (no Redis, no "
    "worker) at its max rate for 10 minutes; every event processed once, backlog bounded, "
    "RSS flat | `bench/soak.py --deployment quickstart --fraction 1.0` | none: sustaining "
    "the max is the target, not a ratio |",
    "| S7 | draining a backlog: 100,000 events stored first (no receiver running), then two "
    "`hookd worker`s + Redis + no-op handler; events/s from the workers' launch to the last "
    "processed, CPU and transactions per event | `bench/backlog.py` | none: the target is a "
    "rate, not a ratio |",
    "",
]


def page(results: Results, images: list[str]) -> str:
    analysis = keep_analysis()
    newest = max(results.values(), key=lambda s: s.get("when", "")) if results else {}
    quick = [sid for sid, s in results.items() if s.get("quick")]
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by bench/run.py from bench/results/*.json. Edit only between the",
        "     analysis markers below: that text is kept when the page is regenerated. -->",
        "",
        "How close hookd comes to a receiver that does nothing. Every scenario runs, in the same "
        "run and with the same load and server settings, a baseline that does the minimum, and "
        "hookd is reported as a ratio to it. All processes (load generator, servers, "
        "PostgreSQL, Redis) share one machine; see [Machine](#machine).",
        "",
    ]
    if quick:
        out += [
            f"> **Scenarios {', '.join(quick)} are from a `--quick` smoke test**: short runs "
            "and fewer events. Their numbers show that the benchmark works, not what hookd "
            "does; judge the targets on a full run.",
            "",
        ]
    out += HOW_TO_RUN
    out += [
        "## Machine",
        "",
        machine_table(newest.get("machine", {})),
        "",
        "The machine is shared: other processes may run during a benchmark. Each table shows "
        '"CPU other" (percent of one core used by everything else) where it was measured.',
        "",
        "## Targets",
        "",
        "| | target | measured | |",
        "| --- | --- | --- | --- |",
    ]
    for sid, target, measured, ok in targets(results):
        flag = " (quick run)" if results[sid].get("quick") else ""
        out.append(f"| {sid} | {target} | {measured}{flag} | {verdict(ok)} |")
    out += [
        "",
        "S1's latency target is judged, as the issue states it, on p99 measured from when "
        "each request was written; p99 from when it was due (the open-loop generator's "
        "schedule, which also counts time a request waited for a free connection or for the "
        "generator itself) is shown next to it. " + soak_windows_note(results.get("S5")),
        "",
    ]
    for sid, pictures in PICTURES.items():
        out += section(sid, results.get(sid), pictures, images)
    out += [
        "## Analysis",
        "",
        "Written by hand: what bounds each scenario. `bench/run.py` keeps everything between "
        "the two markers when it regenerates this page.",
        "",
        ANALYSIS_START + analysis + ANALYSIS_END,
        "",
    ]
    return "\n".join(out)


def write_report() -> tuple[Results, str]:
    """The page and the plots from the last results: (those results, the page)."""
    results = load_results()
    images = plots(results) if results else []
    text = page(results, images)
    PAGE.write_text(text, encoding="utf-8")
    return results, text


def summary(results: Results, wanted: list[str]) -> str:
    """What run.py prints at the end: the targets, and each scenario's main table."""
    lines = ["", "=" * 78, "TARGETS", "", "| | target | measured | |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {sid} | {t} | {m} | {verdict(ok).strip('*')} |"
        for sid, t, m, ok in targets(results)
        if sid in wanted
    ]
    for sid in wanted:
        s = results.get(sid)
        if s is None:
            continue
        lines += ["", f"{sid}. {TITLES[sid]}", ""]
        with contextlib.suppress(KeyError, TypeError, ValueError):
            lines.append(RENDERS[sid](s))
        errors, warnings = problems_of(s)
        lines += [f"  ERROR: {e}" for e in errors] + [f"  warning: {w}" for w in warnings]
    return "\n".join(lines)
