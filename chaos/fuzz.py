"""Coverage-guided fuzzing (atheris/libFuzzer) of every verifier, envelope and the config loader.

Each target runs in its own process (``python -c "...fuzz_target_main()" TARGET -runs=N``):
atheris instruments ``ingest`` before importing it (coverage counts edges there only: the
stdlib's TOML parser, pydantic and cryptography are not instrumented, which keeps the config
targets several times faster), then libFuzzer feeds the target ``N`` inputs. A target raises
only what it documents:

- ``verify-PROVIDER``: ``check_headers`` + ``verify`` on headers, body and timestamps built
  from the input, half of them near-valid (a correctly signed request, then mutated: bits
  flipped, headers dropped, doubled, emptied, truncated, another provider's added, timestamps
  moved, signatures by other or old keys added). Only ``SignatureError`` may escape, and a
  request that verifies must carry a genuine signature, by a configured key, over exactly the
  bytes it verified (``prefix + body``), inside the time window; then ``envelope`` may raise
  only ``PayloadError``.
- ``envelope-PROVIDER``: an authentic signature over a fuzzed body (raw bytes, JSON, a real
  payload with one field off, form-encoded, deeply nested) and fuzzed unsigned headers: it
  must verify, and ``envelope`` may raise only ``PayloadError`` or give a usable envelope.
- ``registry``: every other registered provider (the named senders, and ``hmac`` and
  ``token`` under fuzzed ``[sources.verify]`` settings), picked by the input: its own
  sample, signed by the configured or another sender's key, then mutated (a body bit
  flipped, the body replaced, headers dropped, doubled, emptied, truncated or replaced,
  the clock moved). Only ``SignatureError``/``PayloadError`` may escape; a request that
  verifies was signed with the configured key, and over an unchanged body wherever the
  provider's scheme covers the body (``tests.support.provider_matrix`` says where not).
- ``config-toml``: ``parse_sources`` on fuzzed text (raw, and valid configurations with one
  or two keys made odd, dropped or unknown, ``${VAR}`` references to fuzzed environment
  values, deep nesting, byte-level edits) and ``load_sources`` on raw bytes: only
  ``ConfigError``, and loaded sources are usable.
- ``config-env``: ``Settings.from_env`` on fuzzed ``HOOKD_*`` values and ``.env`` files:
  only ``ConfigError``.

Anything else is an uncaught exception: atheris prints it, libFuzzer writes the input as a
``crash-*`` file and the process exits non-zero.

This module drives the targets; they are ``chaos.fuzz_webhooks`` (built from the requests
of ``chaos.fuzz_requests``) and ``chaos.fuzz_config``.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chaos.fuzz_config import config_env_target, config_toml_target
from chaos.fuzz_requests import PROVIDERS
from chaos.fuzz_webhooks import envelope_target, registry_target, verify_target

TITLE = "Fuzzing: verifiers, envelopes and the config loader"
QUICK: dict[str, Any] = {"inputs_per_target": 10_000}
FULL: dict[str, Any] = {"inputs_per_target": 1_000_000}

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (
    *(f"verify-{p}" for p in PROVIDERS),
    *(f"envelope-{p}" for p in PROVIDERS),
    "registry",
    "config-toml",
    "config-env",
)
INSTRUMENTED = ["hookd"]


def build_target(name: str) -> Callable[[bytes], None]:
    kind, _, provider = name.partition("-")
    if kind == "verify":
        return verify_target(provider)
    if kind == "envelope":
        return envelope_target(provider)
    if name == "registry":
        return registry_target()
    if name == "config-toml":
        return config_toml_target()
    if name == "config-env":
        return config_env_target()
    raise ValueError(f"unknown target {name!r}")


def fuzz_target_main() -> None:
    """Entry point of one target's process: ``TARGET [libFuzzer flags...]``."""
    import atheris

    name, *flags = sys.argv[1:]
    with atheris.instrument_imports(include=INSTRUMENTED):
        import hookd.providers
        import hookd.sources  # noqa: F401
    target = build_target(name)
    runs = next((int(f.split("=", 1)[1]) for f in flags if f.startswith("-runs=")), 0)
    calls = 0
    started = 0.0

    def one(data: bytes) -> None:
        # libFuzzer reports whole seconds only: time the inputs here.
        nonlocal calls, started
        if not calls:
            started = time.perf_counter()
        calls += 1
        target(data)
        if calls == runs:
            elapsed = time.perf_counter() - started
            print(f"hookd-fuzz: {calls} inputs in {elapsed:.3f} s", file=sys.stderr, flush=True)

    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()


def seeds(directory: Path, target: str, count: int = 16) -> None:
    """A few random inputs to start from (libFuzzer grows the corpus from there)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{target}-seed")
    for i in range(count):
        size = rng.choice([16, 64, 256, 1024])
        (directory / f"seed-{i}").write_bytes(rng.randbytes(size))


STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.MULTILINE)
TIMED = re.compile(r"^hookd-fuzz: (\d+) inputs in ([\d.]+) s", re.MULTILINE)
DONE = re.compile(r"DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/")


async def fuzz_one(
    target: str, runs: int, work: Path, *, seed: int, max_len: int, timeout_s: int
) -> dict[str, Any]:
    directory = work / target
    corpus = directory / "corpus"
    artifacts = directory / "artifacts"
    seeds(corpus, target)
    artifacts.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOOKD_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from chaos.fuzz import fuzz_target_main; fuzz_target_main()",
        target,
        f"-runs={runs}",
        f"-seed={seed}",
        f"-max_len={max_len}",
        f"-timeout={timeout_s}",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
        str(corpus),
        cwd=directory,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    wall_s = time.monotonic() - started
    text = output.decode(errors="replace")
    (directory / "fuzz.log").write_text(text)
    stats = {name: int(value) for name, value in STAT.findall(text)}
    done = DONE.findall(text)
    crashes = sorted(p.name for p in artifacts.iterdir())
    uncaught = text.count("=== Uncaught Python exception: ===")
    error = ""
    if uncaught or proc.returncode:
        marker = text.find("=== Uncaught Python exception: ===")
        error = text[marker : marker + 3000] if marker >= 0 else text[-3000:]
    executed = stats.get("number_of_executed_units", 0)
    timed = TIMED.findall(text)
    fuzz_s = float(timed[-1][1]) if timed else wall_s
    return {
        "inputs_run": executed,
        "exec_per_s": round(executed / fuzz_s) if fuzz_s > 0 else 0,
        "fuzz_s": round(fuzz_s, 2),
        "wall_s": round(wall_s, 1),
        "coverage": int(done[-1][0]) if done else 0,
        "features": int(done[-1][1]) if done else 0,
        "corpus": int(done[-1][2]) if done else 0,
        "peak_rss_mb": stats.get("peak_rss_mb", 0),
        "uncaught_exceptions": uncaught,
        "crash_files": crashes,
        "exit_code": proc.returncode,
        "error": error,
    }


async def run(
    inputs_per_target: int = 10_000,
    targets: Sequence[str] = TARGETS,
    parallel: int = 2,
    seed: int = 1,
    max_len: int = 4096,
    timeout_s: int = 60,
) -> dict[str, Any]:
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise ValueError(f"unknown targets {unknown}")
    work = Path(tempfile.mkdtemp(prefix="hookd-fuzz-"))
    started = time.monotonic()
    gate = asyncio.Semaphore(parallel)

    async def gated(target: str) -> dict[str, Any]:
        async with gate:
            return await fuzz_one(
                target, inputs_per_target, work, seed=seed, max_len=max_len, timeout_s=timeout_s
            )

    # The config targets are the slowest (pydantic-settings, TOML): start them first.
    order = sorted(targets, key=lambda t: not t.startswith("config-"))
    try:
        outcomes = dict(zip(order, await asyncio.gather(*(gated(t) for t in order)), strict=True))
    finally:
        if os.environ.get("CHAOS_KEEP"):
            print(f"fuzz work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    per_target = {t: outcomes[t] for t in targets}
    checks = {
        "every_target_ran_all_inputs": all(
            t["inputs_run"] >= inputs_per_target for t in per_target.values()
        ),
        "no_uncaught_exception": all(t["uncaught_exceptions"] == 0 for t in per_target.values()),
        "no_crash_file": all(not t["crash_files"] for t in per_target.values()),
        "every_process_exited_0": all(t["exit_code"] == 0 for t in per_target.values()),
    }
    return {
        "inputs_per_target": inputs_per_target,
        "targets": per_target,
        "total_inputs": sum(t["inputs_run"] for t in per_target.values()),
        "wall_s": round(time.monotonic() - started, 1),
        "parallel": parallel,
        "checks": checks,
    }


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"{len(figures['targets'])} targets, {figures['inputs_per_target']:,} inputs each "
        f"(atheris, libFuzzer coverage-guided; {figures['total_inputs']:,} inputs in "
        f"{figures['wall_s']:,} s, {figures['parallel']} at a time). A target may raise only "
        "`SignatureError` (verify), `PayloadError` (envelope) or `ConfigError` (config); "
        "a verified request must carry a genuine signature over exactly the verified bytes.",
        "",
        "| target | inputs run | exec/s | coverage (edges) | corpus | uncaught exceptions "
        "| crash files |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in figures["targets"].items():
        lines.append(
            f"| {name} | {t['inputs_run']:,} | {t['exec_per_s']:,} | {t['coverage']:,} "
            f"| {t['corpus']:,} | {t['uncaught_exceptions']} | {len(t['crash_files'])} |"
        )
    lines.append("")
    lines.append(
        "Checks: " + ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in figures["checks"].items())
    )
    for name, t in figures["targets"].items():
        if t["error"]:
            lines += ["", f"`{name}` failed:", "", "```", t["error"].strip()[:1500], "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from chaos.harness import main

    main(__name__)
