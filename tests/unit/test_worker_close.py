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


async def swallows(left: list[int]) -> None:
    """A loop like arq's ``Worker.main`` whose next ``left[0]`` cancellations are caught
    below it: it polls on as if nothing happened."""
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if left[0] == 0:
                raise
            left[0] -= 1


@pytest.mark.anyio
async def test_a_loop_that_loses_a_cancellation_is_cancelled_again() -> None:
    left = [2]
    task = asyncio.get_running_loop().create_task(swallows(left))
    await asyncio.sleep(0.05)  # in its loop, as arq's main is when the signal comes
    assert await worker.cancelled(task, within_s=5.0)
    assert task.cancelled()
    assert left == [0]


@pytest.mark.anyio
async def test_a_loop_that_never_stops_is_left_after_the_limit() -> None:
    left = [10**6]
    loop = asyncio.get_running_loop()
    task = loop.create_task(swallows(left))
    await asyncio.sleep(0.05)
    began = loop.time()
    assert not await worker.cancelled(task, within_s=0.6)
    assert 0.6 <= loop.time() - began < 1.5
    assert not task.done()
    assert left[0] < 10**6 - 1  # cancelled again and again meanwhile
    left[0] = 0  # the test's own clean-up
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_a_task_that_stops_at_once_is_cancelled_once() -> None:
    task = asyncio.get_running_loop().create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    assert await worker.cancelled(task, within_s=5.0)
    assert task.cancelled()
