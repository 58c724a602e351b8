"""The Quickstart's handlers (``examples/hookd.toml`` names ``examples.handlers:…``)
must import from this repository even where an installed package is also called
``examples`` (paddle-python-sdk, a test dependency, ships one): a namespace package
loses to any regular package of the same name, wherever it is on the path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_examples_handlers_import_from_the_repository() -> None:
    code = "import examples.handlers as h; print(h.__file__)"
    # As scripts/quickstart.sh runs hookd: the repository first on PYTHONPATH.
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd="/",
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == ROOT / "examples" / "handlers.py"
