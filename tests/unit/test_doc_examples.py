"""The Python examples in the README and ``docs/``: code a new user copies into a file.

Each must parse, and be as ``ruff format`` writes it (the project's own style): a
copied example then passes the reader's formatter and linter as it is.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for number, match in enumerate(BLOCK.finditer(text), start=1):
            found.append((f"{path.relative_to(ROOT)}#{number}", match.group(1)))
    return found


def test_the_readme_has_a_python_example() -> None:
    assert any(name.startswith("README.md#") for name, _ in examples())


@pytest.mark.parametrize(("name", "code"), examples(), ids=[n for n, _ in examples()])
def test_an_example_parses_and_is_formatted(name: str, code: str) -> None:
    ast.parse(code, filename=name)
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--diff", "--stdin-filename", "example.py", "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert checked.returncode == 0, f"{name} is not as ruff format writes it:\n{checked.stdout}"
