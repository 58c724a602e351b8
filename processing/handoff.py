"""Insert as claimed: ``hookd serve`` without Redis hands new events to its processors.

A receiver commits a batch's new events already leased to one processor process
(``store.intake.events.Lease``: processing, attempt 1, that processor's owner) and then
hands it their rows over a Unix stream socket, so the processor neither claims them
nor reads them back: one write per event fewer, and none of SQLite's lock passed
around for it. Each processor process listens beside its wake-up socket
(``handoff_path``); a receiver keeps one connection to each.

The protocol, one connection per receiver and processor:

- the processor speaks first, one line: ``hookd-handoff 1 <lease seconds> <owners>``,
  the owners of its processors (comma-separated), which batches are leased to in turn;
- the receiver sends frames: a 4-byte big-endian length, then a 4-byte length of a
  JSON header (each row's columns but its body, and the body's length), the header,
  and the bodies one after the other;
- the processor sends one byte whenever it changes its mind: ``F`` (full: hand me
  nothing more for now) or ``R`` (ready again). While it is full, and while no
  processor is connected, receivers commit new events pending, as before, and wake
  the processors to claim them.

Nothing here is needed for correctness. The database stays the truth: a row handed
to a processor that died, or lost with a connection, is leased to that processor's
owner and is taken over when its lease expires, as any claim of a dead process is;
the sweep finds the events that were committed pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

import orjson

from store.intake.events import Lease, NewRow
from store.intake.sqlite_write import COLUMNS
from store.rows import EventRow

log = logging.getLogger("hookd.processing")

HELLO = b"hookd-handoff 1"
FULL = b"F"
READY = b"R"
# A frame carries at most about this much (more rows go in more frames; one row
# larger than this goes alone), and a processor refuses a frame larger than
# MAX_FRAME: not a frame this protocol writes.
FRAME_TARGET = 1 << 20
MAX_FRAME = 1 << 28
# A connection whose unsent bytes reach this is treated as full: the processor reads
# slower than events come.
MAX_UNSENT = 8 << 20
RECONNECT_S = 0.5
# How often a processor looks at how much it holds (besides after every frame).
ROOM_CHECK_S = 0.05

_LEN = struct.Struct(">I")
# The row's columns a frame's header carries: those every insert writes, but the body
# (it goes beside the header). A handed row has no object: events of a source with
# [sources.order] are never committed leased (``store.intake.events.Lease``).
_FIELDS = tuple(c for c in COLUMNS if c != "body")


def handoff_path(wake_socket: str) -> str:
    """Where the processor whose wake-up socket is ``wake_socket`` takes handed rows."""
    return wake_socket + ".rows"


# -- frames ------------------------------------------------------------------------


def encode(rows: Sequence[NewRow]) -> list[bytes]:
    """``rows`` as frames of about FRAME_TARGET bytes at most (a larger row alone)."""
    frames: list[bytes] = []
    part: list[NewRow] = []
    size = 0
    for row in rows:
        if part and size + len(row["body"]) > FRAME_TARGET:
            frames.append(_frame(part))
            part, size = [], 0
        part.append(row)
        size += len(row["body"]) + 512
    if part:
        frames.append(_frame(part))
    return frames


def _header(row: Mapping[str, object]) -> dict[str, object]:
    """The row's columns but its body (sent after the header), by name."""
    return {f: row[f] for f in _FIELDS}


def _frame(rows: Sequence[NewRow]) -> bytes:
    header = orjson.dumps([{**_header(row), "body_len": len(row["body"])} for row in rows])
    payload = b"".join([_LEN.pack(len(header)), header, *(row["body"] for row in rows)])
    return _LEN.pack(len(payload)) + payload


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def _when(value: str | None) -> datetime | None:
    return None if value is None else _at(value)


def parse_hello(line: bytes) -> tuple[list[str], float]:
    """A processor's first line: (its owners, the lease seconds); ValueError if not one."""
    words = line.split()
    if len(words) != 4 or b" ".join(words[:2]) != HELLO:
        raise ValueError("not a hookd processor")
    owners = [o for o in words[3].decode().split(",") if o]
    if not owners:
        raise ValueError("a hello without owners")
    return owners, float(words[2])


def event_row(row: NewRow) -> EventRow:
    """A row as committed (``store.intake.events.prepare``) as the row a claim would return."""
    return EventRow(
        id=row["id"],
        source=row["source"],
        provider=row["provider"],
        dedupe_key=row["dedupe_key"],
        type=row["type"],
        origin=row["origin"],
        received_at=row["received_at"],
        occurred_at=row["occurred_at"],
        verified_with=row["verified_with"],
        headers=row["headers"],
        body=row["body"],
        body_encrypted=row["body_encrypted"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        last_error=None,
        last_error_handler=None,
        last_error_type=None,
        processed_at=None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        object_key=row["object_key"],
        object_version=row["object_version"],
        payload_hash=row["payload_hash"],
        traceparent=row["traceparent"],
    )


def decode(payload: bytes) -> list[EventRow]:
    """A frame's payload (after its length) as the rows a claim would have returned."""
    (header_len,) = _LEN.unpack_from(payload, 0)
    start = _LEN.size + header_len
    items = orjson.loads(payload[_LEN.size : start])
    rows: list[EventRow] = []
    for item in items:
        end = start + item["body_len"]
        body = payload[start:end]
        start = end
        rows.append(
            EventRow(
                id=item["id"],
                source=item["source"],
                provider=item["provider"],
                dedupe_key=item["dedupe_key"],
                type=item["type"],
                origin=item["origin"],
                received_at=_at(item["received_at"]),
                occurred_at=_when(item["occurred_at"]),
                verified_with=item["verified_with"],
                headers=item["headers"],
                body=body,
                body_encrypted=item["body_encrypted"],
                status=item["status"],
                attempts=item["attempts"],
                next_attempt_at=_at(item["next_attempt_at"]),
                lease_owner=item["lease_owner"],
                lease_expires_at=_when(item["lease_expires_at"]),
                last_error=None,
                last_error_handler=None,
                last_error_type=None,
                processed_at=None,
                created_at=_at(item["created_at"]),
                updated_at=_at(item["updated_at"]),
                object_key=None,
                object_version=None,
                payload_hash=None,
                traceparent=item["traceparent"],
            )
        )
    if start != len(payload):
        raise ValueError("frame length does not match its rows")
    return rows


# -- the processor's side -------------------------------------------------------------


class HandoffServer:
    """A processor process's listener: says who it is, takes frames, says when it is full.

    ``accept`` gets each frame's rows (``Processor.accept``); ``room`` says whether the
    processor takes more (checked after every frame and every ROOM_CHECK_S)."""

    def __init__(
        self,
        path: str,
        *,
        owners: Sequence[str],
        lease_s: float,
        accept: Callable[[list[EventRow]], object],
        room: Callable[[], bool],
    ) -> None:
        self._path = path
        self._hello = b"%s %r %s\n" % (HELLO, lease_s, ",".join(owners).encode())
        self._accept = accept
        self._room = room
        self._full = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._checker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)
        self._server = await asyncio.start_unix_server(
            self._client, self._path, limit=1 << 16, start_serving=True
        )
        os.chmod(self._path, 0o600)
        self._checker = asyncio.create_task(self._check_room(), name="hookd-handoff-room")

    async def close(self) -> None:
        """Stop taking rows (what a receiver hands after this is leased to this owner
        and taken over when the lease expires; receivers stop handing at EOF)."""
        if self._checker is not None:
            self._checker.cancel()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)

    async def _check_room(self) -> None:
        while True:
            await asyncio.sleep(ROOM_CHECK_S)
            self._signal()

    def _signal(self) -> None:
        full = not self._room()
        if full == self._full:
            return
        self._full = full
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.write(FULL if full else READY)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            writer.write(self._hello)
            if self._full:
                writer.write(FULL)
            while True:
                try:
                    (size,) = _LEN.unpack(await reader.readexactly(_LEN.size))
                    if size > MAX_FRAME:
                        raise ValueError(f"frame of {size} bytes")
                    payload = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    return  # the receiver closed
                rows = decode(payload)
                self._accept(rows)
                self._signal()
        except (ConnectionError, ValueError, KeyError, TypeError) as exc:
            log.warning("handoff connection dropped", extra={"error": type(exc).__name__})
        finally:
            self._writers.discard(writer)
            writer.close()


# -- the receiver's side --------------------------------------------------------------


class Local(Protocol):
    """What ``InProcess`` hands to: a ``Processor`` or a ``ProcessorPool``."""

    @property
    def stopping(self) -> bool: ...

    @property
    def owners(self) -> list[str]: ...

    def accept(self, rows: Sequence[EventRow]) -> int: ...

    def has_room(self) -> bool: ...


class InProcess:
    """The handoff when processing runs in the receiver's own event loop
    (``HOOKD_PROCESSORS=0``, or an app built outside ``hookd serve``): the committed
    rows go straight to the processor, leased to its members in turn."""

    def __init__(self, processor: Local, lease_s: float) -> None:
        self._processor = processor
        self._lease_s = lease_s
        self._turn = itertools.cycle(processor.owners)
        self.handed = 0

    def choose(self) -> InProcess | None:
        if self._processor.stopping or not self._processor.has_room():
            return None
        return self

    def lease(self) -> Lease:
        return Lease(next(self._turn), datetime.now(UTC) + timedelta(seconds=self._lease_s))

    def hand(self, rows: Sequence[NewRow]) -> None:
        if rows:
            self.handed += self._processor.accept([event_row(r) for r in rows])


class Target:
    """One processor process, as a receiver sees it through its connection."""

    def __init__(self, owners: list[str], lease_s: float, writer: asyncio.StreamWriter) -> None:
        self.owners = owners
        self.lease_s = lease_s
        self._turn = itertools.cycle(owners)
        self.writer = writer
        self.full = False
        self.handed = 0  # rows handed, for tests and debugging

    def usable(self) -> bool:
        return (
            not self.full
            and not self.writer.is_closing()
            and self.writer.transport.get_write_buffer_size() < MAX_UNSENT
        )

    def lease(self) -> Lease:
        return Lease(next(self._turn), datetime.now(UTC) + timedelta(seconds=self.lease_s))

    def hand(self, rows: Sequence[NewRow]) -> None:
        """The committed rows leased to this processor, written to its socket (buffered,
        never waited for: a commit's acknowledgements do not wait on a processor)."""
        if not rows:
            return
        try:
            for frame in encode(rows):
                self.writer.write(frame)
            self.handed += len(rows)
        except Exception as exc:  # closed meanwhile: the lease expiry recovers them
            log.warning(
                "events not handed over",
                extra={"count": len(rows), "error": type(exc).__name__},
            )


class HandoffClient:
    """A receiver's connections to the processor processes: which one takes the next
    batch (``choose``, in turn among those connected and not full), reconnecting to
    one that restarts."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._paths = list(paths)
        self._targets: dict[str, Target] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._turn = itertools.count()
        self._closing = False

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._keep(path), name="hookd-handoff") for path in self._paths
        ]

    def choose(self) -> Target | None:
        usable = [t for t in self._targets.values() if t.usable()]
        if not usable:
            return None
        return usable[next(self._turn) % len(usable)]

    @property
    def targets(self) -> list[Target]:
        return list(self._targets.values())

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for target in self._targets.values():
            target.writer.close()
        self._targets.clear()

    async def _keep(self, path: str) -> None:
        """Connect to one processor, follow what it says, and connect again once it is
        gone (it restarts with a new owner: a new hello)."""
        while not self._closing:
            try:
                reader, writer = await asyncio.open_unix_connection(handoff_path(path))
            except OSError:
                await asyncio.sleep(RECONNECT_S)
                continue
            try:
                owners, lease_s = parse_hello(await reader.readline())
                target = Target(owners, lease_s, writer)
                self._targets[path] = target
                while True:
                    said = await reader.read(64)
                    if not said:
                        break
                    target.full = said[-1:] == FULL
            except (OSError, ValueError) as exc:
                log.debug("handoff connection lost", extra={"error": type(exc).__name__})
            finally:
                self._targets.pop(path, None)
                writer.close()
            await asyncio.sleep(RECONNECT_S)
