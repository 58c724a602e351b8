"""What the runner, the verdicts, the report and the plots of ``bench/run.py`` share: where
results, plots and the page live, the scenarios' ids and titles, and the result files."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
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
    "S6": "s6_soak_quickstart",
    "S7": "s7_backlog",
}
TITLES = {
    "S1": "Ingest on PostgreSQL",
    "S2": "Ingest on SQLite",
    "S3": "End to end: PostgreSQL + Redis + workers",
    "S4": "Reconciliation",
    "S5": "Soak",
    "S6": "Quickstart default sustained",
    "S7": "Draining a backlog",
}

# Each scenario's last result by id ("S1"...): what the runner wrote to its JSON file.
Results = dict[str, dict[str, Any]]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def load_results() -> Results:
    """The last result of every scenario that has one, by scenario id."""
    found = {}
    for sid, name in SCENARIOS.items():
        path = RESULTS / f"{name}.json"
        if path.exists():
            with contextlib.suppress(ValueError, OSError):
                found[sid] = read_json(path)
    return found
