"""All of hookd's benchmarks in one command, each next to a bare baseline, and the report.

    .venv/bin/python bench/run.py                  # everything: about 35-40 minutes
    .venv/bin/python bench/run.py --quick          # smoke test: under 6 minutes
    .venv/bin/python bench/run.py --only S1,S3     # some scenarios (the others' last
                                                   # results stay in the report)
    .venv/bin/python bench/run.py --report-only    # plots and docs from the last results

Scenarios, each measured together with a baseline that does nothing, in the same run,
with the same load and server settings:

S1  signed GitHub webhooks acknowledged by hookd on PostgreSQL (``bench/ingest.py``), in
    two deployments: "ingest only" (``HOOKD_REDIS_URL`` set, no worker: the receiver only
    stores) and "in-process processing" (no Redis: the receiver also processes). Max
    req/s with wrk, then p99 latency at a fixed 70% of hookd's max. Baseline: the bare
    Starlette app (``bench/bare_app.py``).
S2  the same on SQLite (ingest only; single box with in-process processing).
S3  end to end on PostgreSQL + Redis + ``hookd worker`` + no-op handler
    (``bench/pipeline.py``): events/s processed, lag at 50% of that. Baseline: the bare
    app's req/s with the same sending client.
S4  reconciliation repairing 10,000 missing events from the emulators
    (``bench/reconcile.py``): repaired/s and API calls. Baseline: a plain client paging
    through the same emulator, storing nothing.
S5  soak (``bench/soak.py``): hookd + one worker at 50% of a measured max for 10 minutes;
    RSS and latency over time. Baseline: the bare app at the same rate.

Writes ``bench/results/s*_*.json`` (raw numbers; gitignored), ``docs/img/bench_*.png`` and
``docs/benchmarks.md``. Text between ``<!-- analysis -->`` and ``<!-- /analysis -->`` in
that page is written by hand and kept.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
RAW = RESULTS / "raw"
DOCS = REPO_DIR / "docs"
IMG = DOCS / "img"
PAGE = DOCS / "benchmarks.md"
PY = sys.executable

SCENARIOS = {
    "S1": "s1_ingest_postgres",
    "S2": "s2_ingest_sqlite",
    "S3": "s3_pipeline",
    "S4": "s4_reconcile",
    "S5": "s5_soak",
}
TITLES = {
    "S1": "Ingest on PostgreSQL",
    "S2": "Ingest on SQLite",
    "S3": "End to end: PostgreSQL + Redis + workers",
    "S4": "Reconciliation",
    "S5": "Soak",
}
# Databases of this script's runs; other benchmark runs use other names.
PG_INGEST_DB = "hookd_run_ingest"
PG_PIPELINE_PREFIX = "hookd_run_pipe"
PG_RECONCILE_PREFIX = "hookd_run_reconcile"
PG_SOAK_DB = "hookd_run_soak"

TIMES = "\N{MULTIPLICATION SIGN}"
ANALYSIS_START, ANALYSIS_END = "<!-- analysis -->", "<!-- /analysis -->"
ANALYSIS_PLACEHOLDER = """
_Not written yet._ For each scenario: what bounds it (the receiver's event loop, PostgreSQL,
the worker, the load generator, the emulator...), with the evidence (CPU columns, profiles),
and what would move it.
"""

# The targets.
S1_RATIO, S1_P99_MS = 0.70, 10.0
S2_RATIO = 0.60
S3_EVENTS_PER_S, S3_LAG_P99_MS = 2000.0, 1000.0
S4_REPAIRED_PER_S, S4_CALLS_PER_1000 = 1000.0, 12.0
S5_RSS_GROWTH_PCT, S5_DRIFT = 10.0, 1.5


def load_module(name: str, path: Path) -> ModuleType:
    """A bench script as a module, under a name that cannot shadow hookd's packages."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- environment


def machine() -> dict[str, Any]:
    """Where and on what the numbers were measured (no host names, no paths)."""
    ib = load_module("hookd_bench_ingest", BENCH_DIR / "ingest.py")
    info: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    info["cores"] = os.cpu_count()
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
    info["kernel"] = platform.release()
    info["python"] = platform.python_version()
    for dist in (
        "uvicorn",
        "uvloop",
        "httptools",
        "starlette",
        "sqlalchemy",
        "asyncpg",
        "aiosqlite",
        "arq",
        "redis",
        "httpx",
    ):
        with contextlib.suppress(Exception):
            info[dist] = version(dist)
    env = ib.environment()
    info["sqlite"] = env.get("sqlite")
    wrk = re.search(r"wrk (?:debian/)?(\S+)", env.get("wrk") or "")
    info["wrk"] = f"wrk {wrk.group(1)}" if wrk else env.get("wrk")
    info["commit"] = env.get("commit")
    info["modified_files"] = env.get("modified_files")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "SHOW server_version"],
            capture_output=True,
            text=True,
            check=False,
            env=ib.clean_env(),
        )
        info["postgresql"] = out.stdout.strip().split()[0] if out.stdout.strip() else None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=False
        )
        match = re.search(r"v=(\S+)", out.stdout)
        info["redis"] = match.group(1) if match else None
    return info


def preflight(wanted: list[str]) -> list[str]:
    problems = []
    tools = {"psql"}
    if {"S1", "S2", "S5"} & set(wanted):
        tools.add("wrk")
    if {"S1", "S3", "S5"} & set(wanted):
        tools.add("redis-server")
    problems += [f"{tool} not found" for tool in sorted(tools) if shutil.which(tool) is None]
    if shutil.which("psql"):
        done = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "SELECT 1"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            problems.append(
                "PostgreSQL at 127.0.0.1:5432 does not accept user postgres without a "
                f"password: {done.stderr.strip()}"
            )
    return problems


# --------------------------------------------------------------------------- running steps


class Terminated(Exception):
    """SIGTERM: stop the current step, let it clean up, then stop."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def shown(cmd: list[str]) -> str:
    """The command as typed from the repository root."""
    out = []
    for part in cmd:
        if part == PY:
            out.append(".venv/bin/python")
            continue
        try:
            out.append(str(Path(part).relative_to(REPO_DIR)))
        except ValueError:
            out.append(part)
    return " ".join(out)


def run_step(cmd: list[str]) -> int:
    """Run one benchmark script, its output going to ours.

    The script runs in its own session, so a Ctrl-C reaches only this process, which
    then sends the script exactly one SIGINT: the scripts clean up on KeyboardInterrupt
    (stop servers, drop databases), and a second Ctrl-C could cut that short.
    """
    print(f"\n$ {shown(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO_DIR, start_new_session=True)
    try:
        return proc.wait()
    except (KeyboardInterrupt, Terminated):
        print(f"\nstopping: {shown(cmd[:2])} is cleaning up...", file=sys.stderr, flush=True)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    soak = load_module("hookd_bench_soak", BENCH_DIR / "soak.py")
    redis = soak.start_redis()
    try:
        yield str(redis.url)
    finally:
        soak.stop_proc(redis.proc)


# --------------------------------------------------------------------------- scenarios


INGEST_VARIANTS = {
    "ingest_only": "ingest only (HOOKD_REDIS_URL set, no worker)",
    "in_process": "with in-process processing (no Redis)",
}
INGEST_LABELS = {
    ("S1", "ingest_only"): "PostgreSQL, ingest only",
    ("S1", "in_process"): "PostgreSQL, in-process processing",
    ("S2", "ingest_only"): "SQLite, ingest only",
    ("S2", "in_process"): "SQLite, single box (in-process processing)",
}


def run_ingest(wanted: list[str], args: argparse.Namespace, info: dict[str, Any]) -> bool:
    """S1 and S2: ``bench/ingest.py`` once per deployment, bare app included each time."""
    targets = ["bare"] + (["postgres"] if "S1" in wanted else [])
    targets += ["sqlite"] if "S2" in wanted else []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raws: dict[str, dict[str, Any]] = {}
    codes: dict[str, int] = {}
    started = time.monotonic()
    for variant in INGEST_VARIANTS:
        out = RAW / f"ingest_{variant}.json"
        out.unlink(missing_ok=True)
        cmd = [PY, str(BENCH_DIR / "ingest.py"), "--targets", ",".join(targets)]
        cmd += ["--pg-db", PG_INGEST_DB, "--out", str(out), "--rounds", str(args.rounds)]
        cmd += ["--wait-quiet", str(args.wait_quiet)]
        cmd += ["--quick"] if args.quick else []
        with contextlib.ExitStack() as stack:
            if variant == "ingest_only":
                url = stack.enter_context(private_redis())
                cmd += ["--hookd-env", f"HOOKD_REDIS_URL={url}"]
            codes[variant] = run_step(cmd)
        if out.exists():
            raws[variant] = read_json(out)
    seconds = round(time.monotonic() - started, 1)
    ok = True
    for sid, target in (("S1", "postgres"), ("S2", "sqlite")):
        if sid not in wanted:
            continue
        variants = []
        for variant, description in INGEST_VARIANTS.items():
            raw = raws.get(variant)
            entry: dict[str, Any] = {
                "name": variant,
                "label": INGEST_LABELS[(sid, variant)],
                "description": description,
                "exit_code": codes.get(variant),
            }
            if raw is None:
                entry["error"] = "ingest.py wrote no results"
            else:
                by = {r["target"]: r for r in raw["results"]}
                entry["bare"] = by.get("bare")
                entry["hookd"] = by.get(target)
                entry["config"] = raw["config"]
                # ingest.py ran every target; keep what concerns this scenario's.
                mine = re.compile(rf"^(round \d+: )?(bare|{target})\b")
                entry["errors"] = [e for e in raw["errors"] if mine.match(e)]
                entry["warnings"] = [w for w in raw["warnings"] if mine.match(w)]
                entry["rounds"] = [
                    {k: r.get(k) for k in ("target", "round", "max", "error")}
                    for r in raw["rounds"]
                    if r["target"] in ("bare", target)
                ]
            variants.append(entry)
        scenario = {
            "scenario": sid,
            "title": TITLES[sid],
            "when": stamp,
            "quick": args.quick,
            "seconds_for_s1_and_s2": seconds,
            "machine": info,
            "command": shown([PY, str(BENCH_DIR / "run.py"), *sys.argv[1:]]),
            "variants": variants,
        }
        write_json(RESULTS / f"{SCENARIOS[sid]}.json", scenario)
        ok = ok and all(v.get("exit_code") == 0 for v in variants)
    return ok


def run_pipeline(args: argparse.Namespace, info: dict[str, Any]) -> bool:
    out = RAW / "pipeline.json"
    out.unlink(missing_ok=True)
    cmd = [PY, str(BENCH_DIR / "pipeline.py"), "--bare", "--db-prefix", PG_PIPELINE_PREFIX]
    cmd += ["--out", str(out)]
    # pipeline.py --quick stores 2,000 events: a burst of a fraction of a second,
    # too short for the bare app's rate to mean much. 5,000 take a few seconds.
    cmd += ["--events", "5000", "--lag-seconds", "5"] if args.quick else []
    started = time.monotonic()
    code = run_step(cmd)
    scenario: dict[str, Any] = {
        "scenario": "S3",
        "title": TITLES["S3"],
        "when": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
        "machine": info,
        "exit_code": code,
    }
    if out.exists():
        scenario |= read_json(out)
    else:
        scenario["error"] = f"pipeline.py exited with {code} and wrote no results"
    write_json(RESULTS / f"{SCENARIOS['S3']}.json", scenario)
    return code == 0


def run_reconcile(args: argparse.Namespace, info: dict[str, Any]) -> bool:
    out = RAW / "reconcile.json"
    out.unlink(missing_ok=True)
    events = 2000 if args.quick else 10_000
    cmd = [PY, str(BENCH_DIR / "reconcile.py"), "--bare", "--events", str(events)]
    cmd += ["--db-prefix", PG_RECONCILE_PREFIX, "--out", str(out)]
    started = time.monotonic()
    code = run_step(cmd)
    scenario: dict[str, Any] = {
        "scenario": "S4",
        "title": TITLES["S4"],
        "when": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
        "machine": info,
        "exit_code": code,
        "events": events,
    }
    if out.exists():
        scenario["providers"] = read_json(out)
    else:
        scenario["error"] = f"reconcile.py exited with {code} and wrote no results"
    write_json(RESULTS / f"{SCENARIOS['S4']}.json", scenario)
    return code == 0


def run_soak(args: argparse.Namespace, info: dict[str, Any]) -> bool:
    out = RAW / "soak.json"
    out.unlink(missing_ok=True)
    cmd = [PY, str(BENCH_DIR / "soak.py"), "--pg-db", PG_SOAK_DB, "--out", str(out)]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--minutes", str(args.soak_minutes)] if args.soak_minutes else []
    started = time.monotonic()
    code = run_step(cmd)
    scenario: dict[str, Any] = {
        "scenario": "S5",
        "title": TITLES["S5"],
        "when": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
        "machine": info,
        "exit_code": code,
    }
    if out.exists():
        scenario |= {k: v for k, v in read_json(out).items() if k != "when"}
    else:
        scenario["error"] = f"soak.py exited with {code} and wrote no results"
    write_json(RESULTS / f"{SCENARIOS['S5']}.json", scenario)
    return code == 0


# --------------------------------------------------------------------------- numbers


def load_results() -> dict[str, dict[str, Any]]:
    found = {}
    for sid, name in SCENARIOS.items():
        path = RESULTS / f"{name}.json"
        if path.exists():
            with contextlib.suppress(ValueError, OSError):
                found[sid] = read_json(path)
    return found


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


def targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, bool | None]]:
    """(scenario, target, measured, met) for every target of the issue."""
    out: list[tuple[str, str, str, bool | None]] = []
    for sid, need in (("S1", S1_RATIO), ("S2", S2_RATIO)):
        s = results.get(sid)
        if not s:
            continue
        for row in ingest_rows(s):
            r = row["ratio"]
            out.append(
                (
                    sid,
                    f"{row['label']}: req/s ≥ {need:.2f} {TIMES} bare",
                    "failed"
                    if r is None
                    else f"{r:.2f}{TIMES} "
                    f"({row['hookd_rps']:,.0f} vs {row['bare_rps']:,.0f} req/s)",
                    None if r is None else r >= need,
                )
            )
            if sid == "S1":
                f = row["fixed"]
                if not f:
                    out.append((sid, f"{row['label']}: p99 ack ≤ 10 ms at 70%", "no run", None))
                    continue
                due, sent = f["latency_from_due_ms"]["p99"], f["latency_ms"]["p99"]
                out.append(
                    (
                        sid,
                        f"{row['label']}: p99 ack ≤ {S1_P99_MS:.0f} ms at 70% of hookd's max",
                        f"{due:.1f} ms from due ({sent:.1f} ms from send) "
                        f"at {f['rate_achieved']:,.0f} req/s",
                        due <= S1_P99_MS,
                    )
                )
    s3 = results.get("S3")
    if s3:
        best = pipeline_best(s3)
        if best is None:
            out.append(("S3", "pipeline", "failed", None))
        else:
            w = best["workers"]
            out.append(
                (
                    "S3",
                    f"≥ {S3_EVENTS_PER_S:,.0f} events/s processed",
                    f"{best['throughput_events_per_s']:,.0f} events/s ({w} worker"
                    f"{'s' if w > 1 else ''}, the best)",
                    best["throughput_events_per_s"] >= S3_EVENTS_PER_S,
                )
            )
            out.append(
                (
                    "S3",
                    f"p99 lag ≤ {S3_LAG_P99_MS / 1000:.0f} s at 50% of that rate",
                    f"{best['lag_p99_ms']:,.0f} ms at {best['lag_rate_per_s']:,.0f} events/s",
                    best["lag_p99_ms"] <= S3_LAG_P99_MS,
                )
            )
    s4 = results.get("S4")
    if s4:
        by = {p["provider"]: p for p in s4.get("providers", [])}
        for provider in ("github", "stripe"):
            p = by.get(provider)
            if p is None:
                out.append(("S4", f"{provider}", "no result", None))
                continue
            out.append(
                (
                    "S4",
                    f"{provider}: ≥ {S4_REPAIRED_PER_S:,.0f} events/s repaired",
                    f"{p['repaired_per_s']:,.0f} events/s",
                    p["repaired_per_s"] >= S4_REPAIRED_PER_S,
                )
            )
            out.append(
                (
                    "S4",
                    f"{provider}: ≤ {S4_CALLS_PER_1000:.0f} API calls per 1,000 checked",
                    f"{p['api_calls_per_1000_checked']:,.1f}",
                    p["api_calls_per_1000_checked"] <= S4_CALLS_PER_1000,
                )
            )
    s5 = results.get("S5")
    if s5:
        hookd = next((r for r in s5.get("results", []) if r["target"] == "hookd"), None)
        summary = (hookd or {}).get("summary")
        if not summary:
            out.append(("S5", "soak", "failed", None))
        else:
            for key in ("server", "worker"):
                g = summary["rss"].get(key) or {}
                pct = g.get("growth_pct")
                out.append(
                    (
                        "S5",
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
                    "S5",
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
                        "S5",
                        "every 2xx'd event stored and processed exactly once (check)",
                        f"{c['rows_added']:,} rows for {c['accepted_2xx']:,} 2xx; "
                        f"{c['processed']:,} of {c['rows_total']:,} processed, "
                        f"{c['processed_attempts_not_1']} with attempts ≠ 1",
                        ok,
                    )
                )
    return out


# --------------------------------------------------------------------------- tables


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
    for r in s.get("results", []):
        m = r.get("max_measurement")
        if r["target"] == "hookd" and m:
            e2e = m["end_to_end"]
            lines += [
                "",
                f"Rate: {cfg.get('fraction', 0.5):.0%} of {m['max_rps']:,.0f} req/s, the lower "
                f"of the receiver's maximum ({m['ack_rps']:,.0f} req/s, wrk with the worker "
                f"running) and the rate at which that burst was stored and processed "
                f"({n0(e2e['events_per_s'])} events/s). The bare app got the same rate.",
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
        lag = (r.get("summary") or {}).get("processing_lag_ms")
        if lag:
            lines += [
                "",
                f"Processing lag over the soak (received → processed): p50 "
                f"{lag['p50_ms']:,.0f} ms, p99 {lag['p99_ms']:,.0f} ms, "
                f"max {lag['max_ms']:,.0f} ms.",
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


# --------------------------------------------------------------------------- plots


def plots(results: dict[str, dict[str, Any]]) -> list[str]:
    """PNG files in docs/img; returns their names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMG.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    plt.rcParams.update({"figure.dpi": 110, "font.size": 9})

    def plain_log(ax: Any) -> None:
        """Log scale labelled 5, 10, 20 rather than in scientific notation."""
        from matplotlib import ticker

        ax.set_yscale("log")
        plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        low, high = ax.get_ylim()
        few = low > 0 and high / low < 100
        ax.yaxis.set_minor_formatter(plain if few else ticker.NullFormatter())

    def save(fig: Any, name: str) -> None:
        for ax in fig.axes:
            if ax.get_yscale() == "log":
                plain_log(ax)
        fig.tight_layout()
        fig.savefig(IMG / name)
        plt.close(fig)
        made.append(name)

    quick = any(s.get("quick") for s in results.values())
    note = " (quick run)" if quick else ""

    rows = [row for sid in ("S1", "S2") if sid in results for row in ingest_rows(results[sid])]
    rows = [r for r in rows if r["hookd_rps"] and r["bare_rps"]]
    if rows:
        fig, ax = plt.subplots(figsize=(8, 4))
        x = range(len(rows))
        ax.bar(
            [i - 0.2 for i in x], [r["bare_rps"] for r in rows], 0.4, label="bare app", color="#999"
        )
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
        save(fig, "bench_ingest_throughput.png")

    fixed = [r for r in rows if r["fixed"]]
    if fixed:
        names = ["p50", "p90", "p99", "p999", "max"]
        fig, ax = plt.subplots(figsize=(8, 4))
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
        ax.axhline(
            S1_P99_MS, color="red", linestyle="--", linewidth=1, label="S1 target: p99 10 ms"
        )
        ax.set_yscale("log")
        ax.set_xticks(range(6), ["p50", "p90", "p99", "p99.9", "max", "p99 from due"])
        ax.set_ylabel("ms")
        ax.set_title("Ack latency at 70% of hookd's max (open loop)" + note)
        ax.legend(fontsize=7)
        save(fig, "bench_ingest_latency.png")

    s3 = results.get("S3")
    if s3 and s3.get("runs"):
        runs = s3["runs"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
        labels = [f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}" for r in runs]
        a1.bar(
            labels, [r["throughput_events_per_s"] for r in runs], label="hookd events/s processed"
        )
        bare_rps = (s3.get("bare") or {}).get("rps")
        if bare_rps:
            a1.axhline(
                bare_rps, color="#555", label=f"bare app req/s, same client ({bare_rps:,.0f})"
            )
        a1.axhline(
            S3_EVENTS_PER_S, color="red", linestyle="--", linewidth=1, label="target 2,000/s"
        )
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
        save(fig, "bench_pipeline.png")

    s4 = results.get("S4")
    if s4 and s4.get("providers"):
        ps = s4["providers"]
        fig, ax = plt.subplots(figsize=(7, 3.8))
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
        ax.axhline(
            S4_REPAIRED_PER_S, color="red", linestyle="--", linewidth=1, label="target 1,000/s"
        )
        ax.set_yscale("log")
        ax.set_xticks(list(x), [p["provider"] for p in ps])
        ax.set_ylabel("events/s")
        ax.set_title(f"Reconciliation of {ps[0]['events']:,} missing events (emulators)" + note)
        ax.legend(fontsize=7)
        save(fig, "bench_reconcile.png")

    s5 = results.get("S5")
    soaked = [r for r in (s5 or {}).get("results", []) if r.get("samples")]
    if soaked:
        cfg = s5.get("config", {}) if s5 else {}

        def spans(ax: Any) -> None:
            w, c, total = cfg.get("warmup"), cfg.get("compare"), cfg.get("seconds")
            if w is None or c is None or total is None:
                return
            ax.axvspan(w, w + c, color="green", alpha=0.08, label="first window")
            ax.axvspan(total - c, total, color="orange", alpha=0.1, label="last window")

        fig, ax = plt.subplots(figsize=(8, 3.8))
        for r in soaked:
            t = [x["t_s"] for x in r["samples"]]
            for key in r["samples"][0]["rss_mb"]:
                ax.plot(
                    t,
                    [x["rss_mb"].get(key) for x in r["samples"]],
                    marker=".",
                    label=f"{r['target']} {key}",
                )
        spans(ax)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS, MB (with children)")
        ax.set_title(f"Soak at {cfg.get('rate', 0):,.0f} req/s: memory" + note)
        ax.legend(fontsize=7)
        save(fig, "bench_soak_rss.png")

        fig, ax = plt.subplots(figsize=(8, 3.8))
        for r in soaked:
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
        spans(ax)
        ax.set_yscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("ack latency per window, ms")
        ax.set_title(f"Soak at {cfg.get('rate', 0):,.0f} req/s: latency" + note)
        ax.legend(fontsize=7)
        save(fig, "bench_soak_latency.png")

        hookd = next((r for r in soaked if r["target"] == "hookd"), None)
        if hookd and any("lag_p99_ms" in x for x in hookd["samples"]):
            fig, a1 = plt.subplots(figsize=(8, 3.8))
            t = [x["t_s"] for x in hookd["samples"]]
            a1.plot(
                t,
                [x.get("lag_p99_ms") for x in hookd["samples"]],
                marker=".",
                label="lag p99 (by window received)",
            )
            a1.plot(
                t, [x.get("lag_p50_ms") for x in hookd["samples"]], linestyle=":", label="lag p50"
            )
            a1.set_yscale("log")
            a1.set_xlabel("seconds")
            a1.set_ylabel("received → processed, ms")
            a2 = a1.twinx()
            a2.plot(
                t,
                [x.get("processed_per_s") for x in hookd["samples"]],
                color="green",
                label="processed/s",
            )
            a2.plot(
                t,
                [x.get("rps") for x in hookd["samples"]],
                color="grey",
                linestyle="--",
                label="acknowledged req/s",
            )
            a2.set_ylabel("per second")
            a2.set_ylim(bottom=0)
            h1, l1 = a1.get_legend_handles_labels()
            h2, l2 = a2.get_legend_handles_labels()
            a1.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
            a1.set_title("Soak: processing lag and throughput (hookd + 1 worker)" + note)
            save(fig, "bench_soak_processing.png")
    return made


# --------------------------------------------------------------------------- the page


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


def page(results: dict[str, dict[str, Any]], images: list[str]) -> str:
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
    out += [
        "## How to run",
        "",
        "```sh",
        "apt-get install -y wrk postgresql-client redis-server   # wrk 4.1 from Debian",
        ".venv/bin/python bench/run.py --quick        # smoke test, under 6 minutes",
        ".venv/bin/python bench/run.py                # everything, about 35-40 minutes",
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
        "worker) and with in-process processing; max req/s (wrk, 64 connections), then a "
        "fixed rate at 70% of hookd's max | `bench/ingest.py` | `bench/bare_app.py`: reads the "
        "body, answers 202 |",
        "| S2 | the same on SQLite | `bench/ingest.py` | the same |",
        "| S3 | end to end: receiver + Redis + `hookd worker` (1 and 2) + no-op handler; "
        "events/s processed, then lag at 50% of that | `bench/pipeline.py` | bare app's req/s "
        "with the same client |",
        "| S4 | one `hookd reconcile` pass repairing 10,000 missing events from the emulators "
        "| `bench/reconcile.py` | a plain httpx client paging through the same emulator, "
        "storing nothing |",
        "| S5 | soak: receiver + Redis + one worker at 50% of a measured max for 10 minutes, "
        "sampled every 10 s | `bench/soak.py` | bare app at the same rate |",
        "",
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
        "S1's latency target is judged on p99 measured from when each request was due (the "
        "open-loop generator's schedule), which also counts time a request waited for a free "
        "connection while the server stalled; p99 from when it was written is shown next to "
        "it. " + soak_windows_note(results.get("S5")),
        "",
    ]
    sections: list[tuple[str, Callable[[dict[str, Any]], str], list[str]]] = [
        ("S1", ingest_tables, ["bench_ingest_throughput.png", "bench_ingest_latency.png"]),
        ("S2", ingest_tables, []),
        ("S3", pipeline_table, ["bench_pipeline.png"]),
        ("S4", reconcile_table, ["bench_reconcile.png"]),
        (
            "S5",
            soak_text,
            ["bench_soak_rss.png", "bench_soak_latency.png", "bench_soak_processing.png"],
        ),
    ]
    for sid, render, pictures in sections:
        out += [f"## {sid}. {TITLES[sid]}", ""]
        s = results.get(sid)
        if s is None:
            out += ["_Not run yet._", ""]
            continue
        out += [when_line(s), ""]
        try:
            out += [render(s), ""]
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


def report() -> tuple[dict[str, dict[str, Any]], str]:
    results = load_results()
    images = plots(results) if results else []
    text = page(results, images)
    PAGE.write_text(text, encoding="utf-8")
    return results, text


def summary(results: dict[str, dict[str, Any]], wanted: list[str]) -> str:
    """What run.py prints at the end: the targets, and each scenario's main table."""
    lines = ["", "=" * 78, "TARGETS", "", "| | target | measured | |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {sid} | {t} | {m} | {verdict(ok).strip('*')} |"
        for sid, t, m, ok in targets(results)
        if sid in wanted
    ]
    renders: dict[str, Callable[[dict[str, Any]], str]] = {
        "S1": ingest_tables,
        "S2": ingest_tables,
        "S3": pipeline_table,
        "S4": reconcile_table,
        "S5": soak_text,
    }
    for sid in wanted:
        s = results.get(sid)
        if s is None:
            continue
        lines += ["", f"{sid}. {TITLES[sid]}", ""]
        with contextlib.suppress(KeyError, TypeError, ValueError):
            lines.append(renders[sid](s))
        errors, warnings = problems_of(s)
        lines += [f"  ERROR: {e}" for e in errors] + [f"  warning: {w}" for w in warnings]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run hookd's benchmarks (S1-S5), each next to a bare baseline, and "
        "write docs/benchmarks.md and docs/img/bench_*.png."
    )
    p.add_argument("--quick", action="store_true", help="smoke test: under 6 minutes")
    p.add_argument("--only", help="comma-separated scenarios, e.g. S1,S3 (default: all)")
    p.add_argument(
        "--report-only", action="store_true", help="no runs: the page and plots from results"
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="ingest rounds per target, least disturbed kept"
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        help="ingest: wait up to this many seconds for a quiet machine (default 60; quick 2)",
    )
    p.add_argument("--soak-minutes", type=float, help="soak length (default 10; quick 1)")
    args = p.parse_args(argv)
    wanted = [s.strip().upper() for s in (args.only or ",".join(SCENARIOS)).split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        p.error(f"--only: unknown {unknown}; choose from {', '.join(SCENARIOS)}")
    args.wanted = [s for s in SCENARIOS if s in wanted]
    if args.wait_quiet is None:
        args.wait_quiet = 2.0 if args.quick else 60.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        results, _ = report()
        print(summary(results, list(results)))
        print(f"\nwrote {PAGE.relative_to(REPO_DIR)} and docs/img/bench_*.png")
        return 0
    problems = preflight(args.wanted)
    if problems:
        for line in problems:
            print(f"cannot run: {line}", file=sys.stderr)
        return 2
    info = machine()
    print(f"hookd benchmarks {','.join(args.wanted)}{' (quick)' if args.quick else ''}", flush=True)
    print(f"machine: {info}", flush=True)
    RAW.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    took: dict[str, float] = {}
    ok = True
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        steps: list[tuple[str, Callable[[], bool]]] = []
        ingest = [s for s in ("S1", "S2") if s in args.wanted]
        if ingest:
            steps.append(("+".join(ingest), lambda: run_ingest(ingest, args, info)))
        if "S3" in args.wanted:
            steps.append(("S3", lambda: run_pipeline(args, info)))
        if "S4" in args.wanted:
            steps.append(("S4", lambda: run_reconcile(args, info)))
        if "S5" in args.wanted:
            steps.append(("S5", lambda: run_soak(args, info)))
        for name, step in steps:
            t0 = time.monotonic()
            ok = step() and ok
            took[name] = round(time.monotonic() - t0, 1)
            print(f"--- {name} done in {took[name]:.0f} s", flush=True)
    except (KeyboardInterrupt, Terminated):
        print("\ninterrupted: the running scenario has cleaned up", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    results, _ = report()
    print(summary(results, args.wanted))
    total = time.monotonic() - started
    print(
        f"\ntook {total / 60:.1f} min ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
        + ")"
    )
    print(f"wrote bench/results/s*_*.json, {PAGE.relative_to(REPO_DIR)}, docs/img/bench_*.png")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
