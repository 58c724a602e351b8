"""``hookd.tracing`` switched by the environment: off costs no import, a missing extra
is one line, and the standard switches that turn it off are honoured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hookd import tracing

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_tracing_off_imports_no_opentelemetry_module() -> None:
    code = """
import sys
import hookd.cli.main, hookd.runtime.app, ingest.receiver, processing.processor
import reconcile.poller
from hookd import tracing
assert tracing.setup("serve") is False
with tracing.span("hookd.receive", {"hookd.source": "github"}) as current:
    tracing.annotate(current, {"hookd.outcome": "accepted"})
    headers = {}
    tracing.inject(headers)
    assert headers == {} and tracing.traceparent() is None and current is None
assert tracing.clock() == 0
assert tracing.claimed("hookd.claim", {"hookd.claim.count": 1}, 0, [("e", "00-x")]) is None
with tracing.span("hookd.process", parent="00-x", link=None) as current:
    assert current is None
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_otel_set_without_the_extra_says_so_in_one_line_and_runs_untraced() -> None:
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if hookd[otel] were not installed
from hookd import logs, tracing
logs.configure("INFO")
assert tracing.setup("worker") is False
with tracing.span("hookd.process") as current:
    assert current is None
print("still running")
"""
    done = run_python(code, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "still running"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith(
        "warning hookd.tracing OTEL_* is set but hookd[otel] is not installed: "
        "pip install 'hookd[otel]'"
    )


def test_tracing_is_wanted_only_when_an_otel_switch_is_set_and_not_disabled() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_BSP_SCHEDULE_DELAY": "100"})
    assert tracing.wanted(endpoint)
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert tracing.wanted({"OTEL_SERVICE_NAME": "hookd"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.wanted({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
