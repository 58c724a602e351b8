"""The verdicts of ``bench/run.py``: hookd as a ratio to the bare baseline, and each of the
issue's targets met or not, from the numbers in ``bench/results/``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.common import Results

TIMES = "\N{MULTIPLICATION SIGN}"

# The issues' targets. Ingest only: PostgreSQL 0.70, SQLite 0.60 of the bare app;
# hookd serve alone (processing without Redis, the default): PostgreSQL 0.60, SQLite
# (the Quickstart default) 0.50.
S1_RATIO, S1_P99_MS = 0.70, 10.0
S2_RATIO = 0.60
SERVE_ALONE_RATIO = {"S1": 0.60, "S2": 0.50}
S3_EVENTS_PER_S, S3_LAG_P99_MS = 10_000.0, 250.0
S4_REPAIRED_PER_S, S4_CALLS_PER_1000 = 1000.0, 12.0
S5_RSS_GROWTH_PCT, S5_DRIFT = 10.0, 1.5
S6_RSS_GROWTH_PCT = 10.0
# Draining 100,000 stored events with two workers, from their launch to the last processed.
S7_EVENTS_PER_S = 10_000.0


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def ingest_rows(s: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per deployment: hookd and bare max, fixed-rate latency."""
    rows = []
    for v in s.get("variants", []):
        hookd, bare = v.get("hookd") or {}, v.get("bare") or {}
        h, b = hookd.get("max"), bare.get("max")
        fixed = hookd.get("fixed")
        rows.append(
            {
                "name": v.get("name"),
                "label": v["label"],
                "hookd_rps": h["rps"] if h else None,
                "bare_rps": b["rps"] if b else None,
                "ratio": ratio(h["rps"] if h else None, b["rps"] if b else None),
                "hookd": h,
                "bare": b,
                "fixed": fixed,
                "error": v.get("error") or hookd.get("error") or bare.get("error"),
                "errors": v.get("errors", []),
                "warnings": v.get("warnings", []),
                "events": hookd.get("event_statuses"),
            }
        )
    return rows


def pipeline_best(s: dict[str, Any]) -> dict[str, Any] | None:
    runs = s.get("runs") or []
    return max(runs, key=lambda r: r["throughput_events_per_s"]) if runs else None


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


# (scenario, target, measured, met); met is None when there is nothing to judge.
Target = tuple[str, str, str, bool | None]


def ingest_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S1 and S2: req/s against the bare app per deployment; S1 also p99 at 70%."""
    out: list[Target] = []
    for row in ingest_rows(s):
        alone = row["name"] == "in_process"
        need = SERVE_ALONE_RATIO[sid] if alone else (S1_RATIO if sid == "S1" else S2_RATIO)
        r = row["ratio"]
        out.append(
            (
                sid,
                f"{row['label']}: req/s ≥ {need:.2f} {TIMES} bare",
                "failed"
                if r is None
                else f"{r:.2f}{TIMES} ({row['hookd_rps']:,.0f} vs {row['bare_rps']:,.0f} req/s)",
                None if r is None else r >= need,
            )
        )
        if sid == "S1" and not alone:  # the latency target: PostgreSQL, ingest only
            f = row["fixed"]
            if not f:
                out.append((sid, f"{row['label']}: p99 ack ≤ 10 ms at 70%", "no run", None))
                continue
            due, sent = f["latency_from_due_ms"]["p99"], f["latency_ms"]["p99"]
            out.append(
                (
                    sid,
                    f"{row['label']}: p99 ack ≤ {S1_P99_MS:.0f} ms at 70% of hookd's max "
                    "(from send)",
                    f"{sent:.1f} ms from send ({due:.1f} ms from due) "
                    f"at {f['rate_achieved']:,.0f} req/s",
                    sent <= S1_P99_MS,
                )
            )
    return out


def pipeline_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S3: events/s processed by the best run, and its lag at half that rate."""
    best = pipeline_best(s)
    if best is None:
        return [(sid, "pipeline", "failed", None)]
    w = best["workers"]
    return [
        (
            sid,
            f"≥ {S3_EVENTS_PER_S:,.0f} events/s processed",
            f"{best['throughput_events_per_s']:,.0f} events/s ({w} worker"
            f"{'s' if w > 1 else ''}, the best)",
            best["throughput_events_per_s"] >= S3_EVENTS_PER_S,
        ),
        (
            sid,
            f"p99 lag ≤ {S3_LAG_P99_MS:,.0f} ms at 50% of that rate",
            f"{best['lag_p99_ms']:,.0f} ms at {best['lag_rate_per_s']:,.0f} events/s",
            best["lag_p99_ms"] <= S3_LAG_P99_MS,
        ),
    ]


def reconcile_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S4: repaired/s and API calls per 1,000 checked, for GitHub and Stripe."""
    out: list[Target] = []
    by = {p["provider"]: p for p in s.get("providers", [])}
    for provider in ("github", "stripe"):
        p = by.get(provider)
        if p is None:
            out.append((sid, f"{provider}", "no result", None))
            continue
        out.append(
            (
                sid,
                f"{provider}: ≥ {S4_REPAIRED_PER_S:,.0f} events/s repaired",
                f"{p['repaired_per_s']:,.0f} events/s",
                p["repaired_per_s"] >= S4_REPAIRED_PER_S,
            )
        )
        out.append(
            (
                sid,
                f"{provider}: ≤ {S4_CALLS_PER_1000:.0f} API calls per 1,000 checked",
                f"{p['api_calls_per_1000_checked']:,.1f}",
                p["api_calls_per_1000_checked"] <= S4_CALLS_PER_1000,
            )
        )
    return out


def soak_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S5: RSS growth of server and worker, latency drift, and the exactly-once check."""
    hookd = next((r for r in s.get("results", []) if r["target"] == "hookd"), None)
    summary = (hookd or {}).get("summary")
    if not summary:
        return [(sid, "soak", "failed", None)]
    out: list[Target] = []
    for key in ("server", "worker"):
        g = summary["rss"].get(key) or {}
        pct = g.get("growth_pct")
        out.append(
            (
                sid,
                f"hookd {key} RSS growth ≤ {S5_RSS_GROWTH_PCT:.0f}%",
                "-"
                if pct is None
                else f"{pct:+.1f}% ({g['first_mb']:.0f} → {g['last_mb']:.0f} MB)",
                None if pct is None else pct <= S5_RSS_GROWTH_PCT,
            )
        )
    lat = summary["latency"]
    drift = lat["drift_ratio"]
    out.append(
        (
            sid,
            f"no latency drift: p99 of the last minute ≤ {S5_DRIFT} {TIMES} the first",
            "-"
            if drift is None
            else f"{drift:.2f}{TIMES} ({lat['first']['p99_from_due_ms']:.1f} → "
            f"{lat['last']['p99_from_due_ms']:.1f} ms)",
            None if drift is None else drift <= S5_DRIFT,
        )
    )
    c = hookd.get("checks") if hookd else None
    if c:
        ok = c["stored_ok"] and c["once_ok"] and c["all_processed"]
        out.append(
            (
                sid,
                "every 2xx'd event stored and processed exactly once (check)",
                f"{c['rows_added']:,} rows for {c['accepted_2xx']:,} 2xx; "
                f"{c['processed']:,} of {c['rows_total']:,} processed, "
                f"{c['processed_attempts_not_1']} with attempts ≠ 1",
                ok,
            )
        )
    return out


def quickstart_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S6: the Quickstart default (SQLite, serve alone) at its max rate: every event
    processed once, the backlog bounded, serve's RSS (with its children) flat."""
    hookd = next((r for r in s.get("results", []) if r["target"] == "hookd"), None)
    summary = (hookd or {}).get("summary")
    name = (
        f"every event processed once, backlog bounded, RSS growth ≤ {S6_RSS_GROWTH_PCT:.0f}% "
        "over 10 minutes at its max rate"
    )
    if not hookd or not summary:
        return [(sid, name, "failed", None)]
    c = hookd.get("checks") or {}
    g = summary["rss"].get("server") or {}
    b = summary.get("backlog") or {}
    pct = g.get("growth_pct")
    once = bool(c) and c["stored_ok"] and c["once_ok"] and c["all_processed"]
    cfg = s.get("config", {})
    parts = [
        (
            f"{c['processed']:,} of {c['rows_total']:,} processed, {c['rows_added']:,} rows for "
            f"{c['accepted_2xx']:,} 2xx, {c['processed_attempts_not_1']} with attempts ≠ 1, "
            f"{c['dead']} dead"
            if c
            else "no exactly-once check"
        ),
        (
            f"backlog {b['first_mean']:,.0f} → {b['last_mean']:,.0f} "
            f"({'bounded' if b['bounded'] else 'growing'})"
            if b
            else "no backlog samples"
        ),
        "RSS -"
        if pct is None
        else f"RSS {pct:+.1f}% ({g['first_mb']:.0f} → {g['last_mb']:.0f} MB)",
        f"{cfg.get('seconds', 0) / 60:.0f} min asked at {summary['rate_asked']:,.0f} req/s "
        f"({cfg.get('fraction', 0):.0%} of the max), "
        + (
            f"sustained {summary['rate_achieved']:,.0f} req/s (the sender "
            f"{summary['behind_schedule_s']:,.0f} s behind: the server at its limit)"
            if summary.get("behind_schedule_s")
            else f"sustained {summary['rate_achieved']:,.0f} req/s"
        ),
    ]
    met: bool | None = (
        once and bool(b) and b["bounded"] and pct is not None and pct <= S6_RSS_GROWTH_PCT
    )
    if cfg.get("fraction", 1.0) < 1.0:
        met = None  # not the target's rate: nothing to judge
    return [(sid, name, "; ".join(parts), met)]


def backlog_targets(sid: str, s: dict[str, Any]) -> list[Target]:
    """S7: the backlog's events over the time from the workers' launch to the last one
    processed (their start-up counts: a real catch-up pays it), and the exactly-once
    check."""
    rates, c = s.get("rates"), s.get("checks")
    cfg = s.get("config", {})
    workers = cfg.get("workers", "?")
    name = f"≥ {S7_EVENTS_PER_S:,.0f} events/s draining a stored backlog ({workers} workers)"
    if not rates or not c:
        return [(sid, name, s.get("failed") or "failed", None)]
    span = rates.get("span_events_per_s")
    out: list[Target] = [
        (
            sid,
            name,
            f"{rates['events_per_s']:,.0f} events/s: {cfg.get('events', 0):,} in "
            f"{rates['seconds_from_launch']:.1f} s from the launch (first processed after "
            f"{rates['first_processed_after_s']:.1f} s; "
            + ("-" if span is None else f"{span:,.0f}")
            + " events/s first → last processed)",
            rates["events_per_s"] >= S7_EVENTS_PER_S,
        ),
        (
            sid,
            "every stored event processed exactly once (check)",
            f"{c['processed']:,} of {c['rows_total']:,} processed, {c['attempts_not_1']} with "
            f"attempts ≠ 1, {c['dead']} dead, {c['ledger_rows']:,} handler ledger rows",
            bool(c["once_ok"]),
        ),
    ]
    return out


JUDGES: list[tuple[str, Callable[[str, dict[str, Any]], list[Target]]]] = [
    ("S1", ingest_targets),
    ("S2", ingest_targets),
    ("S3", pipeline_targets),
    ("S4", reconcile_targets),
    ("S5", soak_targets),
    ("S6", quickstart_targets),
    ("S7", backlog_targets),
]


def targets(results: Results) -> list[Target]:
    """(scenario, target, measured, met) for every target of the issue."""
    out: list[Target] = []
    for sid, judge in JUDGES:
        s = results.get(sid)
        if s:
            out += judge(sid, s)
    return out
