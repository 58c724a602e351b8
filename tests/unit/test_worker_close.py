"""``_close`` when arq's close cancels a job in the middle of its Redis reply: arq gathers
the jobs it cancelled, so their CancelledError comes out of ``Worker.close``. Seen as a
worker's traceback and exit status 1 after SIGTERM, under load. The pool is still closed;
only a cancellation of the closing task itself goes on."""

from __future__ import annotations

import asyncio

import pytest

from hookd.runtime import worker


class Pool:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self, close_connection_pool: bool = False) -> None:
        self.closed = close_connection_pool


class ClosingWorker:
    """Closes as arq does: cancels its job in flight, then gathers it."""

    def __init__(self) -> None:
        self.pool = Pool()
        self.job = asyncio.get_running_loop().create_task(asyncio.sleep(10))

    async def close(self) -> None:
        self.job.cancel()
        await asyncio.gather(self.job)


@pytest.mark.anyio
async def test_a_job_cancelled_by_close_does_not_escape_it() -> None:
    arq = ClosingWorker()
    await asyncio.sleep(0)
    await worker._close(arq)  # type: ignore[arg-type]
    assert arq.pool.closed
    assert arq.job.cancelled()


@pytest.mark.anyio
async def test_a_cancellation_of_the_closing_task_still_goes_on() -> None:
    arq = ClosingWorker()
    closing = asyncio.create_task(worker._close(arq))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert arq.pool.closed
