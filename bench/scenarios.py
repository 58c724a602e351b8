"""Running the scenarios of ``bench/run.py``: the machine's description, the checks before a
run, each benchmark script in its own session, and its numbers in ``bench/results/``.

S1 and S2 share ``bench/ingest.py`` runs (one per deployment, the bare app each time); S3
is ``bench/pipeline.py``, S4 ``bench/reconcile.py``, S5 ``bench/soak.py``, S6 ``bench/soak.py
--deployment quickstart``, S7 ``bench/backlog.py``. Each writes
``bench/results/<scenario>.json`` with the script's own output under ``raw/``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
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

from bench.common import (
    BENCH_DIR,
    PY,
    RAW,
    REPO_DIR,
    RESULTS,
    SCENARIOS,
    TITLES,
    read_json,
    write_json,
)

# Databases of this script's runs; other benchmark runs use other names.
PG_INGEST_DB = "hookd_run_ingest"
PG_PIPELINE_PREFIX = "hookd_run_pipe"
PG_RECONCILE_PREFIX = "hookd_run_reconcile"
PG_SOAK_DB = "hookd_run_soak"
PG_BACKLOG_DB = "hookd_run_backlog"


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
    # S6 alone (SQLite, serve alone) needs neither PostgreSQL nor Redis.
    postgres = bool({"S1", "S2", "S3", "S4", "S5", "S7"} & set(wanted))
    tools = {"psql"} if postgres else set()
    if {"S1", "S2", "S5", "S6"} & set(wanted):
        tools.add("wrk")
    if {"S1", "S3", "S5", "S7"} & set(wanted):
        tools.add("redis-server")
    problems += [f"{tool} not found" for tool in sorted(tools) if shutil.which(tool) is None]
    if postgres and shutil.which("psql"):
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


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler while a step runs."""
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
    "in_process": "hookd serve alone (no Redis: it processes too, in its processor process)",
}
INGEST_LABELS = {
    ("S1", "ingest_only"): "PostgreSQL, ingest only",
    ("S1", "in_process"): "PostgreSQL, hookd serve alone (processing too)",
    ("S2", "ingest_only"): "SQLite, ingest only",
    ("S2", "in_process"): "SQLite, hookd serve alone (the Quickstart default)",
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


# The soak scenarios: S5 hookd + Redis + one worker at half its max, S6 the Quickstart
# default (SQLite, serve alone) at its max. Raw output file, and soak.py's options.
SOAKS: dict[str, tuple[str, list[str]]] = {
    "S5": ("soak.json", ["--pg-db", PG_SOAK_DB]),
    "S6": (
        "soak_quickstart.json",
        ["--deployment", "quickstart", "--fraction", "1.0", "--targets", "hookd"],
    ),
}


def run_soak(args: argparse.Namespace, info: dict[str, Any], sid: str = "S5") -> bool:
    name, options = SOAKS[sid]
    out = RAW / name
    out.unlink(missing_ok=True)
    cmd = [PY, str(BENCH_DIR / "soak.py"), *options, "--out", str(out)]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--minutes", str(args.soak_minutes)] if args.soak_minutes else []
    started = time.monotonic()
    code = run_step(cmd)
    scenario: dict[str, Any] = {
        "scenario": sid,
        "title": TITLES[sid],
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
    write_json(RESULTS / f"{SCENARIOS[sid]}.json", scenario)
    return code == 0


def run_backlog(args: argparse.Namespace, info: dict[str, Any]) -> bool:
    """S7: ``bench/backlog.py``, 100,000 stored events (quick: 20,000) drained by two
    workers, no receiver."""
    out = RAW / "backlog.json"
    out.unlink(missing_ok=True)
    cmd = [PY, str(BENCH_DIR / "backlog.py"), "--pg-db", PG_BACKLOG_DB, "--out", str(out)]
    # The drain shares the machine's cores with whatever else runs: like ingest, it waits
    # for a quiet moment (after storing, before the launch).
    cmd += ["--wait-quiet", str(args.wait_quiet)]
    cmd += ["--quick"] if args.quick else []
    started = time.monotonic()
    code = run_step(cmd)
    scenario: dict[str, Any] = {
        "scenario": "S7",
        "title": TITLES["S7"],
        "when": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
        "machine": info,
        "exit_code": code,
    }
    if out.exists():
        scenario |= {k: v for k, v in read_json(out).items() if k != "when"}
    else:
        scenario["error"] = f"backlog.py exited with {code} and wrote no results"
    write_json(RESULTS / f"{SCENARIOS['S7']}.json", scenario)
    return code == 0


def steps(args: argparse.Namespace, info: dict[str, Any]) -> list[tuple[str, Callable[[], bool]]]:
    """The runs ``args.wanted`` asks for, in order, each named for the progress lines; S1
    and S2 are one step, as they share their ``ingest.py`` runs."""
    out: list[tuple[str, Callable[[], bool]]] = []
    ingest = [s for s in ("S1", "S2") if s in args.wanted]
    if ingest:
        out.append(("+".join(ingest), lambda: run_ingest(ingest, args, info)))
    if "S3" in args.wanted:
        out.append(("S3", lambda: run_pipeline(args, info)))
    if "S4" in args.wanted:
        out.append(("S4", lambda: run_reconcile(args, info)))
    if "S5" in args.wanted:
        out.append(("S5", lambda: run_soak(args, info, "S5")))
    if "S6" in args.wanted:
        out.append(("S6", lambda: run_soak(args, info, "S6")))
    if "S7" in args.wanted:
        out.append(("S7", lambda: run_backlog(args, info)))
    return out
