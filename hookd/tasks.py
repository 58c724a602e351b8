"""Stopping the background tasks a process runs: each ``stop`` of a service that owns one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (a failure of its own is raised)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def finish(task: asyncio.Task[Any], grace_s: float) -> None:
    """Let ``task`` end on its own within ``grace_s``, then cancel it."""
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), grace_s)
    await cancel(task)
