"""Lint gate: no file cites a document that is not in the repository.

A reader of a docstring, the README or ``docs/`` cannot open "CONTRACT §3" or
``ARCHITECTURE.md``: they were design notes kept outside the repository. Say
the fact itself where it is needed instead. ``tests/`` is left out: this gate
has to name what it looks for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"CONTRACT\s*§|ARCHITECTURE\.md")


def repository_files() -> list[Path]:
    """Tracked files and new ones git does not ignore, as a clone would have them."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the repository's .git to list its files")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def test_no_file_outside_tests_cites_an_outside_document() -> None:
    found = []
    for path in repository_files():
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "tests" or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "say the fact itself instead of citing it:\n" + "\n".join(found)
