"""The SQLite insert of the receiver's hot path, synchronous, on stdlib and orjson only.

``store.intake.fastpath.SqliteInserter`` runs it on a thread of the receiver's process;
``hookd.runtime.sqlite_writer`` runs it in a process of its own, which imports this
module and nothing heavier (it starts in a few tens of milliseconds). In one ``BEGIN IMMEDIATE``
transaction: a multi-row ``INSERT INTO event_keys … RETURNING``, the ``events`` rows of
the new keys, and the lookup of the others, with the same pragmas as the engine (WAL,
``synchronous=FULL``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import selectors
import signal
import socket
import sqlite3
import struct
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from store import queries

if TYPE_CHECKING:
    from store.intake.events import NewRow

# Every SQLite connection hookd opens (the engine's, this writer's, prune's) sets these.
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
)

COLUMNS = (
    "id",
    "source",
    "provider",
    "dedupe_key",
    "type",
    "origin",
    "received_at",
    "occurred_at",
    "verified_with",
    "headers",
    "body",
    "body_encrypted",
    "status",
    "attempts",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "traceparent",
    "lease_owner",
    "lease_expires_at",
)

KEY_COLUMNS = ("source", "dedupe_key", "event_id", "received_at")
# Written only by a batch that holds an event of a source with [sources.order]; every
# other batch's statements are the ones without them, unchanged.
OBJECT_COLUMNS = ("object_key", "object_version", "payload_hash")

# SQLite allows 32,766 parameters per statement; a larger batch is split into
# statements of this many rows inside one transaction.
SQLITE_ROWS = 32_766 // len(COLUMNS)
SQLITE_KEY_ROWS = 32_766 // len(KEY_COLUMNS)

# A window's outcomes (``SqliteWriter.settle``): the statements the processor runs on
# SQLite itself when it writes them (``store.claims``), as the driver takes them.
LEDGER_INSERT = queries.load("claims")["ledger_insert_sqlite"]
ATTEMPTS_INSERT = queries.load("history")["attempts_sqlite"]
# The words they store (``store.status``, ``store.claims.history``: a unit test keeps
# them equal; this module imports nothing of hookd's, to start fast).
PROCESSED = "processed"
PROCESSING = "processing"
LEASE_LOST = "lease_lost"
ATTEMPT = "attempt"
# Where the outcome is in an attempt's parameters (``ATTEMPTS_INSERT``'s order).
OUTCOME_AT = 7


def processed_sql(count: int) -> str:
    """Marking ``count`` events processed, fenced on their lease (``lease_owner`` and
    ``status``, as every outcome is): the ids it marked."""
    placeholders = ", ".join("?" * count)  # placeholders only: the ids are parameters
    return (
        "UPDATE events SET status = ?, processed_at = ?, last_error = NULL, "  # noqa: S608
        "last_error_handler = NULL, last_error_type = NULL, lease_owner = NULL, "
        "lease_expires_at = NULL, updated_at = ? "
        f"WHERE id IN ({placeholders}) AND lease_owner = ? AND status = ? "
        "RETURNING id"
    )


# A processor's window of events that all succeeded (``processing.outcomes``): its owner,
# the time (``sqlite_time``), the (event id, handler) pairs of the ledger, the ids to mark
# processed, and an attempt row per id (``ATTEMPTS_INSERT``'s parameters, outcome
# "processed").
Settlement = tuple[str, str, list[tuple[str, str]], list[str], list[tuple[object, ...]]]


# store.delivery.destinations.WHOLE_SOURCE: a pause's destination when the whole source is paused
# (this module imports nothing of hookd's, to start fast).
WHOLE_SOURCE = ""

# What a batch's write answers: the ids of the new rows, the ids the other keys hold,
# and the new rows committed pending though the batch was leased (a paused source).
Written = tuple[set[str], dict[tuple[str, str], str], set[str]]


def _pending(row: NewRow) -> NewRow:
    """``row`` as an insert that is not claimed writes it: pending, no attempt, no lease."""
    return {
        **row,
        "status": "pending",  # type: ignore[typeddict-item]
        "attempts": 0,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def with_objects(rows: list[NewRow]) -> bool:
    """Whether a row of the batch names an object ([sources.order])."""
    return any(row["object_key"] is not None for row in rows)


def sqlite_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def sqlite_params(
    rows: list[NewRow], *, objects: bool = False
) -> list[str | int | float | bytes | None]:
    """The rows' values, flat, in ``COLUMNS`` order (then ``OBJECT_COLUMNS``'s)."""
    params: list[str | int | float | bytes | None] = []
    for r in rows:
        params += (
            r["id"],
            r["source"],
            r["provider"],
            r["dedupe_key"],
            r["type"],
            r["origin"],
            sqlite_time(r["received_at"]),
            sqlite_time(r["occurred_at"]),
            r["verified_with"],
            orjson.dumps(r["headers"]).decode(),
            r["body"],
            int(r["body_encrypted"]),
            r["status"],
            r["attempts"],
            sqlite_time(r["next_attempt_at"]),
            sqlite_time(r["created_at"]),
            sqlite_time(r["updated_at"]),
            r["traceparent"],
            r["lease_owner"],
            sqlite_time(r["lease_expires_at"]),
        )
        if objects:
            params += (r["object_key"], r["object_version"], r["payload_hash"])
    return params


def sqlite_key_params(rows: list[NewRow]) -> list[str | None]:
    """The rows' keys, flat, in ``KEY_COLUMNS`` order."""
    params: list[str | None] = []
    for r in rows:
        params += (r["source"], r["dedupe_key"], r["id"], sqlite_time(r["received_at"]))
    return params


def turn_path(db_path: str) -> str:
    """The file beside the database whose lock orders hookd's busy writers.

    SQLite's own wait for its write lock sleeps (1, 2, 5 … up to 100 ms between tries),
    so a writer can sleep on a lock that is long free. The receiver's writer and the
    processor take an exclusive ``flock`` on this file first: a waiter is woken by the
    kernel the moment the holder lets go, and the two take turns instead of backing
    off. SQLite's lock stays the authority; this only orders who asks for it."""
    return db_path + "-turn"


def open_turn(db_path: str) -> int:
    """The turn file's descriptor. A file that cannot be opened fails the transaction as
    SQLite's own errors do (``sqlite3.OperationalError``), with what to do."""
    path = turn_path(db_path)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise sqlite3.OperationalError(
            f"cannot open {path} ({exc.strerror or exc}), the lock file hookd keeps beside "
            "the database: let hookd's user create and write files in that folder"
        ) from exc


@contextlib.contextmanager
def holding(fd: int) -> Iterator[None]:
    """The turn, held for the ``with`` block (waits for it, in this thread)."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class SqliteWriter:
    """One connection, used by one thread at a time; batches run one at a time."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._turn: int | None = None
        self._statements: dict[tuple[str, int, int], str] = {}

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, timeout=5, isolation_level=None)
            for pragma in SQLITE_PRAGMAS:
                conn.execute(pragma)
            self._conn = conn
        return self._conn

    def _turn_fd(self) -> int:
        if self._turn is None:
            self._turn = open_turn(self._path)
        return self._turn

    def _statement(self, table: str, columns: Sequence[str], n: int) -> str:
        """A multi-row insert of ``n`` rows; into event_keys, the new keys returned."""
        sql = self._statements.get((table, len(columns), n))
        if sql is None:
            one = "(" + ",".join("?" * len(columns)) + ")"
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES {','.join([one] * n)}"  # noqa: S608 - constants and placeholders only
            if table == "event_keys":
                sql += " ON CONFLICT (source, dedupe_key) DO NOTHING RETURNING event_id"
            self._statements[(table, len(columns), n)] = sql
        return sql

    def _insert_rows(self, conn: sqlite3.Connection, rows: list[NewRow]) -> Written:
        """The batch's keys, then the rows of the new ones, then the ids of the others;
        inside the caller's transaction. Also the new ones committed pending though the
        batch was leased (their source is paused)."""
        created: set[str] = set()
        key_params = sqlite_key_params(rows)
        width = len(KEY_COLUMNS)
        step = SQLITE_KEY_ROWS * width
        for i in range(0, len(key_params), step):
            chunk = key_params[i : i + step]
            sql = self._statement("event_keys", KEY_COLUMNS, len(chunk) // width)
            created.update(row[0] for row in conn.execute(sql, chunk).fetchall())
        new = [r for r in rows if r["id"] in created]
        unleased = set()
        if any(r["lease_owner"] is not None for r in new):
            # A source paused whole is never handed over: what a claim would leave,
            # read in this transaction, so a pause committed before it is never crossed.
            paused = {
                row[0]
                for row in conn.execute(
                    "SELECT source FROM pauses WHERE destination = ? AND paused",
                    (WHOLE_SOURCE,),
                )
            }
            if paused:
                new = [_pending(r) if r["source"] in paused else r for r in new]
                unleased = {r["id"] for r in new if r["source"] in paused}
        objects = with_objects(new)
        columns = COLUMNS + OBJECT_COLUMNS if objects else COLUMNS
        row_params = sqlite_params(new, objects=objects)
        width = len(columns)
        step = (32_766 // width) * width
        for i in range(0, len(row_params), step):
            part = row_params[i : i + step]
            conn.execute(self._statement("events", columns, len(part) // width), part)
        existing: dict[tuple[str, str], str] = {}
        for r in rows:
            if r["id"] in created:
                continue
            found = conn.execute(
                "SELECT event_id FROM event_keys WHERE source = ? AND dedupe_key = ?",
                (r["source"], r["dedupe_key"]),
            ).fetchone()
            if found is not None:
                existing[(r["source"], r["dedupe_key"])] = found[0]
        return created, existing, unleased

    def write(self, rows: list[NewRow]) -> Written:
        conn = self._connect()
        try:
            # One transaction: under SQLite's single writer nothing can change a key
            # between its insert and its lookup.
            with holding(self._turn_fd()):
                conn.execute("BEGIN IMMEDIATE")
                written = self._insert_rows(conn, rows)
                conn.execute("COMMIT")
        except Exception:  # a SQLite error, or a value it cannot bind (a lone surrogate)
            self.discard()  # closing rolls back an open transaction
            raise
        return written

    def settle(self, conn: sqlite3.Connection, settlement: Settlement) -> set[str]:
        """A window's outcomes, inside the caller's transaction: the ledger, the events
        marked processed where ``owner`` still holds them, their attempts; the ids it
        held. One it no longer held records ``lease_lost``, unless this owner's attempt
        is recorded processed already: an earlier request of the same window committed,
        and its answer was lost with a writer killed before it could send it."""
        owner, at, ledger, succeeded, attempts = settlement
        if ledger:
            conn.executemany(LEDGER_INSERT, [(event_id, name, at) for event_id, name in ledger])
        owned: set[str] = set()
        step = 32_766 - 4
        for i in range(0, len(succeeded), step):
            chunk = succeeded[i : i + step]
            params = (PROCESSED, at, at, *chunk, owner, PROCESSING)
            owned.update(row[0] for row in conn.execute(processed_sql(len(chunk)), params))
        rows = []
        for row in attempts:
            event_id = row[0]
            if event_id in owned:
                rows.append(row)
            elif self._recorded(conn, row):
                owned.add(str(event_id))
            else:
                rows.append((*row[:OUTCOME_AT], LEASE_LOST, *row[OUTCOME_AT + 1 :]))
        if rows:
            conn.executemany(ATTEMPTS_INSERT, rows)
        return owned

    @staticmethod
    def _recorded(conn: sqlite3.Connection, row: tuple[object, ...]) -> bool:
        event_id, _kind, _at, _finished, attempt, worker = row[:6]
        found = conn.execute(
            "SELECT 1 FROM event_history WHERE event_id = ? AND kind = ? AND attempt = ? "
            "AND worker = ? AND outcome = ?",
            (event_id, ATTEMPT, attempt, worker, PROCESSED),
        ).fetchone()
        return found is not None

    def window(self, requests: Sequence[tuple[str, Any]]) -> list[Reply]:
        """Requests of any clients in one transaction, each in a savepoint of its own: a
        request that fails (a SQLite error, a value SQLite cannot bind) is rolled back
        alone and answered with its error; the others commit. Only the transaction's own
        failure (its ``BEGIN`` or ``COMMIT``: the disk, the lock) fails them all."""
        conn = self._connect()
        replies: list[Reply] = []
        try:
            with holding(self._turn_fd()):
                conn.execute("BEGIN IMMEDIATE")
                for op, payload in requests:
                    conn.execute("SAVEPOINT request")
                    reply = self._one(conn, op, payload)
                    if reply[0] == "ok":
                        conn.execute("RELEASE request")
                    else:
                        conn.execute("ROLLBACK TO request")
                        conn.execute("RELEASE request")
                    replies.append(reply)
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self.discard()  # closing rolls back an open transaction
            failed: Reply = ("error", type(exc).__name__, str(exc))
            return [failed] * len(requests)
        return replies

    def _one(self, conn: sqlite3.Connection, op: str, payload: Any) -> Reply:
        """One request of a window, in its savepoint; a SQLite error is an answer too."""
        try:
            if op == INSERT:
                created, existing, unleased = self._insert_rows(conn, payload)
                return ("ok", (created, unleased), existing)
            if op == SETTLE:
                return ("ok", self.settle(conn, payload), None)
            if op == PROBE:
                self._probe_rows(conn, payload)
                return ("ok", (set(), set()), {})
        except sqlite3.Error as exc:
            return ("error", type(exc).__name__, str(exc))
        except (UnicodeError, ValueError, TypeError, OverflowError) as exc:
            return ("error", "DataError", type(exc).__name__)
        return ("error", "ProgrammingError", f"unknown request {op!r}")

    def _probe_rows(self, conn: sqlite3.Connection, rows: list[NewRow]) -> None:
        self._insert_rows(conn, rows)
        conn.execute("DELETE FROM events WHERE id = ?", (rows[0]["id"],))
        conn.execute(
            "DELETE FROM event_keys WHERE source = ? AND dedupe_key = ?",
            (rows[0]["source"], rows[0]["dedupe_key"]),
        )

    def probe(self, rows: list[NewRow]) -> None:
        conn = self._connect()
        try:
            with holding(self._turn_fd()):
                conn.execute("BEGIN IMMEDIATE")
                self._probe_rows(conn, rows)
                conn.execute("COMMIT")
        except sqlite3.Error:
            self.discard()  # closing rolls back an open transaction
            raise

    def discard(self) -> None:
        if self._turn is not None:
            os.close(self._turn)
            self._turn = None
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


# The writer process reads requests and answers each, in order, after the commit of
# the transaction it was part of. ``python -m store.intake.sqlite_write PATH``, started
# by ``hookd.runtime.sqlite_writer.SqliteProcessInserter`` for one receiver, reads them
# on stdin and answers on stdout; ``python -m store.intake.sqlite_write --listen SOCKET
# PATH``, started by ``hookd serve`` as the box's one writer (``hookd.runtime.sqlite_writer``),
# takes any number of clients on a Unix socket (receivers' inserts, processors'
# outcomes) and commits what they sent meanwhile in one transaction, each request in a
# savepoint of its own. A frame is a 4-byte big-endian length, then a pickle: the
# request ``(op, payload)``, ``op`` being "insert" or "probe" (rows) or "settle" (a
# ``Settlement``); the answer ``("ok", first, second)`` (an insert's ``((created,
# unleased), existing)``, a settlement's ``(owned, None)``) or ``("error", sqlite3
# exception name, message)``. Both ends are hookd's own, over a pipe or a socket in a
# directory only hookd's user may enter.
FRAME = struct.Struct("!I")
INSERT = "insert"
PROBE = "probe"
SETTLE = "settle"

Reply = tuple[str, Any, Any]


def frame(value: object) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


def _read(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def serve(path: str, requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer requests until ``requests`` ends (the receiver closed it, or died)."""
    writer = SqliteWriter(path)
    try:
        while (head := _read(requests, FRAME.size)) is not None:
            data = _read(requests, FRAME.unpack(head)[0])
            if data is None:
                break  # cut off mid-request: nothing of it was written
            op, payload = pickle.loads(data)  # noqa: S301 - our own pipe, from our own parent
            [reply] = writer.window([(op, payload)])
            answers.write(frame(reply))
            answers.flush()
    finally:
        writer.discard()


class _Client:
    """A connection to the box's writer, and what it sent that is not whole yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.gone = False

    def receive(self) -> list[tuple[str, Any]]:
        """Whatever arrived; the requests now whole, in order."""
        while True:
            try:
                data = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self.gone = True
                break
            self.buffer += data
        requests = []
        while len(self.buffer) >= FRAME.size:
            (size,) = FRAME.unpack_from(self.buffer)
            if len(self.buffer) < FRAME.size + size:
                break
            data = bytes(self.buffer[FRAME.size : FRAME.size + size])
            del self.buffer[: FRAME.size + size]
            requests.append(pickle.loads(data))  # noqa: S301 - hookd's own processes
        return requests

    def send(self, replies: list[Reply]) -> None:
        try:
            self.sock.sendall(b"".join(frame(reply) for reply in replies))
        except OSError:
            self.gone = True  # it went away: what it asked is committed, unread


def listen(socket_path: str) -> socket.socket:
    """The box writer's socket at ``socket_path`` (a stale one, left by a killed
    predecessor, is replaced), for hookd's user only."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o600)
    listener.listen(128)
    return listener


def _commit(writer: SqliteWriter, window: list[tuple[_Client, tuple[str, Any]]]) -> None:
    """A window's requests in one transaction; each client's answers, in its order."""
    replies = writer.window([request for _, request in window])
    answers: dict[int, tuple[_Client, list[Reply]]] = {}
    for (client, _), reply in zip(window, replies, strict=True):
        answers.setdefault(id(client), (client, []))[1].append(reply)
    for client, theirs in answers.values():
        client.send(theirs)


def serve_box(path: str, listener: socket.socket, parent: BinaryIO) -> None:
    """The box's one writer: every request its clients sent while the last transaction
    ran goes into the next (``SqliteWriter.window``); the answers after its commit. Ends
    when ``parent`` (``hookd serve``'s pipe on stdin) reaches its end: serve stopped it
    after its receivers and processors, or died."""
    writer = SqliteWriter(path)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    selector.register(parent, selectors.EVENT_READ, "parent")
    clients: dict[int, _Client] = {}
    try:
        while True:
            stop = False
            window: list[tuple[_Client, tuple[str, Any]]] = []
            for key, _ in selector.select():
                if key.data is None:
                    sock, _address = listener.accept()
                    sock.setblocking(True)
                    client = _Client(sock)
                    clients[sock.fileno()] = client
                    selector.register(sock, selectors.EVENT_READ, client)
                elif key.data == "parent":
                    stop = not os.read(parent.fileno(), 4096)
                else:
                    client = key.data
                    window += [(client, request) for request in client.receive()]
            if window:
                _commit(writer, window)
            for fd, client in list(clients.items()):
                if client.gone:
                    selector.unregister(client.sock)
                    client.sock.close()
                    del clients[fd]
            if stop:
                return
    finally:
        writer.discard()
        for client in clients.values():
            client.sock.close()
        listener.close()


def main(argv: Sequence[str]) -> int:
    # Its parent decides when this process ends, by closing its stdin: a Ctrl-C sent to
    # the whole process group, or a SIGTERM sent to the whole cgroup, must not cut a
    # transaction short before the receivers and processors have had their answers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args = list(argv[1:])
    if len(args) == 3 and args[0] == "--listen":
        try:
            listener = listen(args[1])
        except OSError as exc:
            print(
                f"hookd: cannot listen on {args[1]} ({exc.strerror or exc}): the SQLite "
                "writer is started by hookd serve, in a directory it creates",
                file=sys.stderr,
            )
            return 2
        serve_box(args[2], listener, sys.stdin.buffer)
        return 0
    if len(args) != 1:
        print(
            "usage: python -m store.intake.sqlite_write [--listen SOCKET] PATH (started by hookd)",
            file=sys.stderr,
        )
        return 2
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames goes to the pipe
    try:
        serve(args[0], sys.stdin.buffer, answers)
    except BrokenPipeError:
        return 0  # the receiver went away mid-answer: it will not read it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
