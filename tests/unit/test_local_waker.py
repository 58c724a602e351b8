"""``LocalWaker``: the receivers' wake-up of ``hookd serve``'s processor processes.
Real Unix datagram sockets."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from processing.wakeups import LocalWaker

pytestmark = pytest.mark.anyio


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A Unix socket's path must fit in about 100 bytes; pytest's own can be longer.
    path = Path(tempfile.mkdtemp(prefix="lw-"))
    yield path
    shutil.rmtree(path)


@pytest.fixture
def receivers(short_dir: Path) -> Iterator[list[socket.socket]]:
    socks = []
    for i in range(2):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(short_dir / f"p{i}.sock"))
        sock.setblocking(False)
        socks.append(sock)
    yield socks
    for sock in socks:
        sock.close()


def received(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            sock.recv(64)
        except BlockingIOError:
            return count
        count += 1


async def test_a_thousand_commits_in_one_loop_turn_send_one_datagram_per_processor(
    receivers: list[socket.socket],
) -> None:
    waker = LocalWaker([s.getsockname() for s in receivers])
    for _ in range(1000):
        await waker.on_commit(["id"])  # never yields: all in one turn of the loop
    await asyncio.sleep(0.05)
    counts = [received(s) for s in receivers]
    assert counts == [1, 1], counts
    assert waker.sent == 2
    await waker.close()


async def test_commits_that_keep_coming_are_coalesced_and_the_last_one_is_woken_for(
    receivers: list[socket.socket],
) -> None:
    waker = LocalWaker([s.getsockname() for s in receivers], interval_s=0.05)
    loop = asyncio.get_running_loop()
    end = loop.time() + 0.3
    commits = 0
    while loop.time() < end:
        await waker.on_commit(["id"])
        commits += 1
        await asyncio.sleep(0)  # a new loop turn each time
    await asyncio.sleep(0.1)
    counts = [received(s) for s in receivers]
    assert commits > 100
    # One per 50 ms over 300 ms, and one after the last commit.
    assert all(2 <= c <= 9 for c in counts), counts
    # After a quiet spell, a commit is sent at once, not after a whole interval.
    await asyncio.sleep(0.1)
    await waker.on_commit(["id"])
    await asyncio.sleep(0.01)
    assert [received(s) for s in receivers] == [1, 1]
    await waker.close()


async def test_send_errors_are_swallowed(short_dir: Path) -> None:
    missing = str(short_dir / "gone.sock")  # ENOENT: a processor restarting
    plain = short_dir / "plain"
    plain.write_text("")  # ECONNREFUSED: not a socket
    busy = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    busy.bind(str(short_dir / "busy.sock"))  # never read: its queue fills (EAGAIN)
    unbound = short_dir / "unbound.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(unbound))
    stale.close()  # a socket file nobody listens on any more: ECONNREFUSED
    # The sends run as loop callbacks: an exception there reaches the loop's handler.
    loop = asyncio.get_running_loop()
    raised: list[object] = []
    loop.set_exception_handler(lambda _loop, context: raised.append(context.get("exception")))
    try:
        waker = LocalWaker([missing, str(plain), str(busy.getsockname()), str(unbound)], 0.0)
        for _ in range(2000):
            await waker.on_commit(["id"])
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        await waker.close()
        assert raised == []
        assert 0 < waker.sent < 2000  # the busy one took some, then its queue was full
    finally:
        loop.set_exception_handler(None)
        busy.close()
