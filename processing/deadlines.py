"""Deadlines enforced from outside the code they bound.

``asyncio.timeout`` around an ``await`` only asks the awaited code to stop (it
cancels it): a handler that catches the cancellation and carries on, or a peer that
trickles one byte per read timeout under httpx's per-read timeouts, keeps the
attempt alive past its limit. ``within`` runs the work as a task of its own and
stops waiting for it at the deadline, whatever the work does with the cancellation;
``off_loop`` runs a blocking function in a thread so it cannot stall the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger("hookd.processing")

T = TypeVar("T")

# After its deadline, cancelled work has this long to end before it is left behind.
CANCEL_GRACE_S = 0.5

# Blocking transforms run here, never on the event loop; one that hangs keeps a
# thread until it returns (Python cannot stop a thread), and the attempt has ended.
_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hookd-blocking")


class DeadlineExceeded(TimeoutError):
    """The work did not finish within ``timeout_s``."""

    def __init__(self, timeout_s: float, what: str | None = None) -> None:
        text = f"did not finish within {timeout_s:g}s"
        super().__init__(f"{what} {text}" if what else text)
        self.timeout_s = timeout_s
        self.what = what


async def within(work: Awaitable[T], timeout_s: float, *, what: str = "work") -> T:
    """``await work``, but for at most ``timeout_s``: then it is cancelled and, if it
    has not ended ``CANCEL_GRACE_S`` later, left to end on its own (logged), and
    ``DeadlineExceeded`` is raised here either way. Cancelling the caller cancels it."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    task.cancel()
    ended, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    if ended:
        _consume(task)
    else:
        log.warning("abandoned after its deadline", extra={"work": what})
        task.add_done_callback(_consume)
    raise DeadlineExceeded(timeout_s)


def _consume(task: asyncio.Future[Any]) -> None:
    """Read a finished task's outcome so that asyncio does not report it as lost."""
    if task.done() and not task.cancelled():
        task.exception()


async def off_loop(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread, with the caller's context variables."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    return await loop.run_in_executor(_THREADS, functools.partial(context.run, func, *args))
