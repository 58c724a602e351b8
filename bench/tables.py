"""The Markdown of each scenario in ``bench/run.py``'s report and summary: its tables, and
its errors and warnings."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench.verdicts import ingest_rows, ratio


def n0(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def n2(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def ingest_tables(s: dict[str, Any]) -> str:
    rows = ingest_rows(s)
    lines = [
        "| deployment | hookd req/s | bare req/s | ratio to bare | hookd p50 ms | hookd p99 ms "
        "| server CPU per req (hookd / bare) | CPU other |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        h, b = row["hookd"], row["bare"]
        if not h or not b:
            lines.append(f"| {row['label']} | failed: {row['error']} | | | | | | |")
            continue
        lines.append(
            f"| {row['label']} | {n0(h['rps'])} | {n0(b['rps'])} | {row['ratio']:.2f}x "
            f"| {n2(h['latency_ms']['p50'])} | {n2(h['latency_ms']['p99'])} "
            f"| {h['cpu'].get('server_us_per_req', '-')} µs / "
            f"{b['cpu'].get('server_us_per_req', '-')} µs "
            f"| {h['cpu']['other_cpu_pct']:.0f}% / {b['cpu']['other_cpu_pct']:.0f}% |"
        )
    lines += [
        "",
        'Fixed rate, 70% of hookd\'s max (open loop; "from due" counts time waiting for a '
        "free connection when the server stalls):",
        "",
        "| deployment | asked req/s | got req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms "
        "| p99 from due ms | non-2xx | server CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    split = []
    for row in rows:
        f = row["fixed"]
        if not f:
            continue
        lat = f["latency_ms"]
        lines.append(
            f"| {row['label']} | {n0(f['rate_asked'])} | {n0(f['rate_achieved'])} "
            f"| {n2(lat['p50'])} | {n2(lat['p90'])} | {n2(lat['p99'])} | {n2(lat['p999'])} "
            f"| {n2(lat['max'])} | {n2(f['latency_from_due_ms']['p99'])} | {f['non_2xx']} "
            f"| {f['cpu']['server_cpu_pct']:.0f}% |"
        )
        bare, server = f.get("bare"), f.get("server")
        if bare and server:
            blat, commits = bare["latency_ms"], server["commits"]
            per = server["acks"] / commits if commits else None
            split.append(
                f"| {row['label']} | {n2(lat['p50'])} / {n2(lat['p99'])} "
                f"| {n2(blat['p50'])} / {n2(blat['p99'])} "
                f"| {n2(server['ack_ms']['p50'])} / {n2(server['ack_ms']['p99'])} "
                f"| {n2(server['commit_ms']['p50'])} / {n2(server['commit_ms']['p99'])} "
                f"| {n0(commits / max(f['seconds'], 1e-9))} | {n2(per)} |"
            )
    if split:
        lines += [
            "",
            "Where that latency goes, at the same fixed rate: the bare app driven by the same "
            "generator just after (the generator, loopback and the HTTP stack), and hookd's own "
            "`hookd_ack_seconds` (head read to answer) and `hookd_commit_seconds` (each group "
            "commit) over the run, as PromQL's `histogram_quantile` reads them (linear within "
            "a bucket, so no finer than the buckets):",
            "",
            "| deployment | hookd p50 / p99 ms (client) | bare p50 / p99 ms (client) "
            "| hookd ack p50 / p99 ms (server) | commit p50 / p99 ms | commits/s "
            "| events per commit |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            *split,
        ]
    events = [
        f"{row['label']}: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted((row["events"] or {}).items()))
        for row in rows
        if row["events"]
    ]
    if events:
        lines += ["", "Events by status when the server had stopped: " + "; ".join(events) + "."]
    return "\n".join(lines)


def pipeline_table(s: dict[str, Any]) -> str:
    bare = s.get("bare") or {}
    bare_rps = bare.get("rps")
    lines = [
        "| workers | events/s processed | ratio to bare | ingest req/s (workers stopped) "
        "| lag rate /s | lag p50 ms | lag p99 ms | one attempt each |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in s.get("runs", []):
        rr = ratio(r["throughput_events_per_s"], bare_rps)
        lines.append(
            f"| {r['workers']} | {n0(r['throughput_events_per_s'])} "
            f"| {'-' if rr is None else f'{rr:.2f}x'} | {n0(r.get('ingest_rps'))} "
            f"| {n0(r['lag_rate_per_s'])} | {n0(r['lag_p50_ms'])} | {n0(r['lag_p99_ms'])} "
            f"| {'yes' if r['every_event_one_attempt'] else 'NO'} |"
        )
    if bare_rps:
        cfg = s.get("config", {})
        lines += [
            "",
            f"Bare app, same {cfg.get('events', '?'):,} requests and client "
            f"({cfg.get('client_connections', 32)} connections, closed loop): "
            f"**{bare_rps:,.0f} req/s**.",
        ]
    return "\n".join(lines)


def reconcile_table(s: dict[str, Any]) -> str:
    lines = [
        "| provider | events | repaired | seconds | repaired/s | bare items/s | ratio to bare "
        "| API calls | calls per 1,000 checked |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in s.get("providers", []):
        b = p.get("bare") or {}
        lines.append(
            f"| {p['provider']} | {p['events']:,} | {p['repaired']:,} | {p['seconds']:.2f} "
            f"| {n0(p['repaired_per_s'])} | {n0(b.get('items_per_s'))} "
            f"| {n2(p.get('ratio_to_bare'))}x | {p['api_calls']:,} "
            f"| {p['api_calls_per_1000_checked']:,.1f} |"
        )
    return "\n".join(lines)


def soak_text(s: dict[str, Any]) -> str:
    lines = [s.get("table", "")]
    cfg = s.get("config", {})
    with_bare = any(r["target"] == "bare" for r in s.get("results", []))
    for r in s.get("results", []):
        m = r.get("max_measurement")
        quickstart = r.get("deployment") == "quickstart"
        if r["target"] == "hookd" and quickstart:
            lines += [
                "",
                "hookd as the Quickstart default: `hookd serve` alone with its default "
                "settings on a SQLite file, no Redis, no worker (RSS and CPU of serve with its "
                "children).",
            ]
        if r["target"] == "hookd" and m:
            e2e = m["end_to_end"]
            running = "serve processing" if quickstart else "the worker running"
            lines += [
                "",
                f"Rate: {cfg.get('fraction', 0.5):.0%} of {m['max_rps']:,.0f} req/s, the lower "
                f"of the receiver's maximum ({m['ack_rps']:,.0f} req/s, wrk with {running}) "
                f"and the rate at which that burst was stored and processed "
                f"({n0(e2e['events_per_s'])} events/s)."
                + (" The bare app got the same rate." if with_bare else ""),
            ]
        c = r.get("checks")
        if c:
            lines += [
                "",
                f"hookd: {c['accepted_2xx']:,} requests answered 2xx, {c['rows_added']:,} rows "
                f"added ({c['distinct_delivery_ids']:,} distinct delivery ids in "
                f"{c['rows_total']:,} rows), {c['processed']:,} processed, "
                f"{c['processed_attempts_not_1']} processed with attempts ≠ 1, "
                f"{c['dead']} dead, {c['ledger_rows']:,} handler ledger rows. Backlog drained "
                f"{r.get('drain_after_soak', {}).get('seconds', '?')} s after the last request.",
            ]
        b = (r.get("summary") or {}).get("backlog")
        if b:
            lines += [
                "",
                f"Backlog (events not yet processed), mean of the first and last comparison "
                f"windows: {b['first_mean']:,.0f} → {b['last_mean']:,.0f}, at most "
                f"{b['max']:,} in any sample: "
                + ("bounded." if b["bounded"] else "**growing** (processing fell behind)."),
            ]
        lag = (r.get("summary") or {}).get("processing_lag_ms")
        if lag:
            lines += [
                "",
                f"Processing lag over the soak (received → processed): p50 "
                f"{lag['p50_ms']:,.0f} ms, p99 {lag['p99_ms']:,.0f} ms, "
                f"max {lag['max_ms']:,.0f} ms.",
            ]
    return "\n".join(lines)


def backlog_text(s: dict[str, Any]) -> str:
    """S7: the script's own tables (rates; CPU and database work per event), and what
    was stored and how."""
    lines = [s.get("table", "")]
    store, cfg = s.get("store"), s.get("config", {})
    if store:
        lines += [
            "",
            f"{store['events']:,} signed GitHub `issues.opened` deliveries stored first by "
            f"the receiver's own insert, no receiver running ({store['events_per_s']:,.0f} "
            f"events/s in batches of {store['batch']:,}), then {cfg.get('workers', '?')} "
            "`hookd worker`s launched together with a private Redis and the no-op handler. "
            'CPU in µs per event (and % of one core); "steady" leaves out the start-up and '
            "the tail; PostgreSQL is this database's backends and the shared writers, less "
            "the benchmark's probe; xact and rows are `pg_stat_database` deltas over the "
            "drain, per event.",
        ]
    pg = s.get("postgres_settings")
    if pg:
        lines += [
            "",
            f"PostgreSQL {pg.get('server_version', '?').split()[0]}: autovacuum "
            f"{pg.get('autovacuum', '?')}, synchronous_commit {pg.get('synchronous_commit', '?')}"
            f", fsync {pg.get('fsync', '?')}.",
        ]
    return "\n".join(lines)


BUSY = re.compile(r"(other processes used|machine already) (\d+)%")


def condensed(warnings: list[str]) -> list[str]:
    """The "other load on the machine" warnings as one line; the rest as they are."""
    busy = [int(m.group(2)) for w in warnings if (m := BUSY.search(w))]
    rest = [w for w in warnings if not BUSY.search(w)]
    if busy:
        rest.insert(
            0,
            f"other processes on the machine used up to {max(busy)}% of a core "
            f"({len(busy)} warnings): these numbers are lower and noisier than on a quiet "
            "machine",
        )
    return rest


def problems_of(s: dict[str, Any]) -> tuple[list[str], list[str]]:
    errors, warnings = [], []
    if s.get("error"):
        errors.append(s["error"])
    for v in s.get("variants", []):
        errors += [f"{v['label']}: {e}" for e in v.get("errors", [])]
        warnings += [f"{v['label']}: {w}" for w in v.get("warnings", [])]
        if v.get("error"):
            errors.append(f"{v['label']}: {v['error']}")
    errors += s.get("errors", []) if "variants" not in s else []
    warnings += s.get("warnings", []) if "variants" not in s else []
    if s.get("exit_code") not in (0, None) and not errors:
        errors.append(f"exited with {s['exit_code']}")
    return errors, condensed(warnings)


# Each scenario's Markdown, by id: the page's sections and the printed summary.
RENDERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "S1": ingest_tables,
    "S2": ingest_tables,
    "S3": pipeline_table,
    "S4": reconcile_table,
    "S5": soak_text,
    "S6": soak_text,
    "S7": backlog_text,
}
