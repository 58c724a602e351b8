"""The ``hookd`` command line in a process of its own, as a user runs it: this
checkout's code (``PYTHONPATH``), the test's environment plus what each call adds."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.server import ROOT


def hookd(
    url: str, *args: str, timeout: float = 60, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``hookd ARGS`` on the database at ``url``, waited for; ``extra`` is more
    environment (``HOOKD_CONFIG=…``)."""
    env = {**os.environ, "HOOKD_DATABASE_URL": url, "PYTHONPATH": str(ROOT), **extra}
    return subprocess.run(
        [sys.executable, "-m", "hookd.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def hookd_with_config(url: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hookd ARGS`` with the database at ``url`` and the sources file ``config``."""
    return hookd(url, *args, HOOKD_CONFIG=str(config))


async def hookd_async(env: Mapping[str, str], *args: str) -> tuple[int, str, str]:
    """``hookd ARGS`` without blocking the loop (which may be serving what the command
    talks to), with ``env`` added to the environment: its exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookd.cli",
        *args,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def last_line(stderr: str) -> str:
    """The command's own line: a PostgreSQL test database (autovacuum off) may warn first."""
    return stderr.rstrip("\n").rsplit("\n", 1)[-1]
