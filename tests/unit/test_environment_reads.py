"""Only ``hookd.settings`` reads hookd's configuration from the environment; everything
else is handed a ``Settings`` (or a value from one). The product's other uses of
``os.environ`` are listed here with the reason each one stays; a new one fails this
test, naming its file, until it moves into ``Settings`` or is added with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hookd", "ingest", "processing", "reconcile", "store")
NAMES = {"environ", "getenv", "putenv", "unsetenv"}

ALLOWED = {
    # The OpenTelemetry SDK's own standard variables (OTEL_*), which its exporters read
    # themselves too: one configuration, not split between the SDK and Settings.
    "hookd/tracing.py": "OTEL_* (OpenTelemetry's variables)",
    # The variables the sources file names for its secrets (secret_env = ...): named by
    # the operator, not hookd's settings; the reader takes any mapping (``env``).
    "hookd/sources/loader.py": "the sources file's secret variables",
    # Written, not read: --config handed to `serve --workers N`'s processes, which read
    # their settings again.
    "hookd/cli/main.py": "writes HOOKD_CONFIG for child processes",
    # hookd serve's processor sockets, handed by the parent to the receiver processes
    # uvicorn spawns (its app factory takes no arguments): process plumbing, not
    # configuration.
    "hookd/cli/serve.py": "clears the processor and writer sockets' hand-over",
    "hookd/runtime/app.py": "reads the processor sockets' hand-over",
    "hookd/runtime/processors.py": "writes the hand-over; PROMETHEUS_MULTIPROC_DIR",
    # The same for the socket of the box's one SQLite writer, which serve starts and
    # its receivers and processor processes reach.
    "hookd/runtime/sqlite_writer.py": "reads the SQLite writer socket's hand-over",
    # prometheus-client's own variable (it reads it itself to choose where values live).
    "ingest/metrics.py": "PROMETHEUS_MULTIPROC_DIR",
}


# Where a process reads its settings (Settings.from_env()): the roots each process
# starts from. Anything below them is handed its settings.
ROOTS = {
    "hookd/cli/main.py",  # every `hookd` command
    "hookd/runtime/app.py",  # the app factory of each receiver process uvicorn spawns
    "hookd/runtime/local.py",  # each processor process of `hookd serve`
}


def uses_the_environment(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in NAMES
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in NAMES for alias in node.names)
        ):
            return True
    return False


def test_only_the_listed_modules_touch_the_environment() -> None:
    found = {
        path.relative_to(ROOT).as_posix()
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if uses_the_environment(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert found - set(ALLOWED) == set(), "read the environment through hookd.settings"
    assert set(ALLOWED) - found == set(), "no longer touches the environment: unlist it"


def reads_the_settings(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_env"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "Settings"
        for node in ast.walk(tree)
    )


def test_settings_are_read_only_where_a_process_starts() -> None:
    found = {
        path.relative_to(ROOT).as_posix()
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if reads_the_settings(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert found == ROOTS, "hand the settings (or a value of them) in instead"
