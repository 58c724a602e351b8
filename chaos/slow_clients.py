"""The clients and gauges of ``chaos.slow``: the receiver's memory from ``/proc``, raw
HTTP/1.1 clients that upload too much or trickle, signed deliveries at a steady rate,
and the database's own commit time beside them.

Clients here are raw sockets: an early answer followed by a close with unread data in
the server's buffer ends in a TCP reset, and a client that gives up on the connection at
its first failed write never reads the answer that is already on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from chaos.harness import Delivery, Result
from hookd.providers.signing import sample_event
from tests.support.constants import SECRETS

KIB = 1024
MIB = 1024 * KIB
MAX_BODY = 1 * MIB
PROBE_EVERY_S = 0.05
ANSWER_TIMEOUT_S = 20.0
FRAME = b"%x\r\n" % (64 * KIB) + b"x" * (64 * KIB) + b"\r\n"


# --- the receiver's memory ------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (bytes) of ``pid``; empty if it is gone."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) * KIB
    except OSError:
        return {}
    return values


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (``5`` in ``clear_refs``, Linux ≥ 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` that could answer requests: all but the processor
    processes ``hookd serve`` runs beside its receiver (``HOOKD_PROCESSORS``)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            pids = [int(word) for word in listing.read().split()]
    except OSError:
        return []
    return [child for child in pids if not _is_processor(child)]


def _is_processor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"hookd.runtime.local" in cmdline.read().split(b"\0")
    except OSError:
        return False


@dataclass
class RssWatch:
    """Samples VmRSS every ``period_s``; with VmHWM it gives the peak of a phase."""

    pid: int
    period_s: float = 0.02
    peak: int = 0
    samples: int = 0
    hwm_reset: bool = False
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.hwm_reset = reset_peak(self.pid)
        self.peak = proc_status(self.pid).get("VmRSS", 0)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, proc_status(self.pid).get("VmRSS", 0))
            self.samples += 1
            await asyncio.sleep(self.period_s)

    async def stop(self) -> int:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        status = proc_status(self.pid)
        if self.hwm_reset:
            self.peak = max(self.peak, status.get("VmHWM", 0))
        return self.peak


# --- raw HTTP/1.1 clients ---------------------------------------------------------------


def request_head(path: str, headers: dict[str, str], *extra: tuple[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in (*headers.items(), *extra)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def connect(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


async def read_status(sock: socket.socket) -> tuple[int, str]:
    """The status code of the answer, or 0 with what ended the connection instead."""
    loop = asyncio.get_running_loop()
    got = b""
    try:
        while b"\r\n" not in got:
            data = await loop.sock_recv(sock, 4096)
            if not data:
                return 0, "closed"
            got += data
    except ConnectionResetError:
        return 0, "reset"
    except OSError as exc:
        return 0, type(exc).__name__
    parts = got.split(b"\r\n", 1)[0].split(b" ")
    return (int(parts[1]), "answered") if len(parts) > 1 and parts[1].isdigit() else (0, "garbled")


@dataclass
class Upload:
    kind: str
    status: int
    ending: str
    body_sent: int  # bytes of body the client had written when the answer came
    answer_s: float


def signed_headers(seq: int) -> dict[str, str]:
    headers, _ = sample_event("github", SECRETS["github"], seq)
    return headers


@dataclass
class Hold:
    """Chunked uploads pause just under the limit until all of them are there, and a
    moment more, so the receiver holds every one of their bodies at the same time."""

    parties: int
    pid: int
    at: int = MAX_BODY - 64 * KIB
    arrived: int = 0
    all_arrived: bool = False
    rss_held: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, timeout_s: float = 15.0) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_arrived = True
            await asyncio.sleep(0.5)  # the receiver reads what is on the wire
            self.rss_held = proc_status(self.pid).get("VmRSS", 0)
            self.released.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.released.wait(), timeout_s)


async def oversized_upload(
    port: int, kind: str, seq: int, stream_bytes: int, hold: Hold | None = None
) -> Upload:
    loop = asyncio.get_running_loop()
    headers = signed_headers(seq)
    started = time.perf_counter()
    sock = await connect(port)
    sent = 0
    try:
        if kind == "declared":
            declared = ("Content-Length", str(64 * MAX_BODY))
            await loop.sock_sendall(sock, request_head("/hooks/github", headers, declared))
            status, ending = await asyncio.wait_for(read_status(sock), ANSWER_TIMEOUT_S)
            return Upload(kind, status, ending, 0, time.perf_counter() - started)
        if kind == "endless_head":
            await loop.sock_sendall(sock, b"POST /hooks/github HTTP/1.1\r\nX-Long: ")
            frame = b"a" * (64 * KIB)
        else:
            extra = [("Transfer-Encoding", "chunked")]
            if kind == "conflicting":
                extra.insert(0, ("Content-Length", "100"))
            await loop.sock_sendall(sock, request_head("/hooks/github", headers, *extra))
            frame = FRAME
        answer = asyncio.create_task(read_status(sock))

        async def pump() -> None:
            nonlocal sent
            held = hold is None or kind != "chunked"
            while sent < stream_bytes and not answer.done():
                if not held and hold is not None and sent >= hold.at:
                    held = True
                    await hold.wait()
                await loop.sock_sendall(sock, frame)
                sent += 64 * KIB

        pumping = asyncio.create_task(pump())
        try:
            await asyncio.wait_for(asyncio.shield(answer), ANSWER_TIMEOUT_S)
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await pumping
        status, ending = answer.result()
        return Upload(kind, status, ending, sent, time.perf_counter() - started)
    except TimeoutError:
        return Upload(kind, 0, "no answer", sent, time.perf_counter() - started)
    finally:
        sock.close()


@dataclass
class Trickle:
    kind: str  # "body": head, then a byte a second; "head": the head a byte a second
    connected: bool
    status: int = 0
    ending: str = "open"  # answered, closed, reset, open (never cut)
    cut_s: float = 0.0  # from the first byte sent to the answer or close
    trickled: int = 0


async def trickler(
    port: int, kind: str, seq: int, give_up_s: float, ready: asyncio.Event
) -> Trickle:
    loop = asyncio.get_running_loop()
    try:
        sock = await connect(port)
    except OSError:
        return Trickle(kind, connected=False, ending="refused")
    result = Trickle(kind, connected=True)
    try:
        started = time.monotonic()
        if kind == "body":
            head = request_head("/hooks/github", signed_headers(seq), ("Content-Length", "4096"))
            await loop.sock_sendall(sock, head)
            byte = b"{"
        else:
            await loop.sock_sendall(sock, b"POST /hooks/github HTTP/1.1\r\nX-Slow: ")
            byte = b"a"
        answer = asyncio.create_task(read_status(sock))
        await ready.wait()
        while not answer.done() and time.monotonic() - started < give_up_s:
            done, _ = await asyncio.wait({answer}, timeout=1.0)
            if done:
                break
            try:
                await loop.sock_sendall(sock, byte)
                result.trickled += 1
            except OSError:
                await asyncio.wait({answer}, timeout=2.0)
                break
        if answer.done():
            result.status, result.ending = answer.result()
            result.cut_s = time.monotonic() - started
        else:
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
    finally:
        sock.close()
    return result


async def steady_deliveries(base_url: str, items: Sequence[Delivery], rate: float) -> list[Result]:
    """Open loop: request ``i`` starts at ``i / rate`` s whatever happened to the others."""

    async def one(client: httpx.AsyncClient, item: Delivery) -> Result:
        started = time.perf_counter()
        try:
            response = await client.post(
                f"/hooks/{item.source}", content=item.body, headers=item.headers
            )
        except httpx.HTTPError as exc:
            return Result(item, 0, time.perf_counter() - started, error=type(exc).__name__)
        event_id = None
        if response.status_code in (200, 202):
            event_id = response.json()["event_id"]
        return Result(item, response.status_code, time.perf_counter() - started, event_id)

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        tasks: list[asyncio.Task[Result]] = []
        start = time.monotonic()
        for i, item in enumerate(items):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(client, item)))
        return list(await asyncio.gather(*tasks))


# --- the database alone -------------------------------------------------------------


async def commit_probe(url: str, stop: asyncio.Event) -> list[float]:
    """The time of each durable one-row commit on ``url``'s database, every
    ``PROBE_EVERY_S`` until ``stop``: what the database alone takes meanwhile."""
    import asyncpg  # the driver hookd itself uses on PostgreSQL

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    took: list[float] = []
    try:
        # A logged table (a temporary one skips the WAL) in this run's own database.
        await conn.execute("CREATE TABLE IF NOT EXISTS chaos_probe (n int)")
        while not stop.is_set():
            started = time.perf_counter()
            await conn.execute("INSERT INTO chaos_probe VALUES (1)")
            took.append(time.perf_counter() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_EVERY_S)
    finally:
        await conn.close()
    return took


async def drained(url: str, timeout_s: float = 60.0) -> None:
    """Wait until no event of ``url``'s database is left to process."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = await conn.fetchval(
                "SELECT count(*) FROM events WHERE status IN ('pending', 'processing')"
            )
            if not left:
                return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
