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
import signal
import sqlite3
import struct
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

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

    def probe(self, rows: list[NewRow]) -> None:
        conn = self._connect()
        try:
            with holding(self._turn_fd()):
                conn.execute("BEGIN IMMEDIATE")
                self._insert_rows(conn, rows)
                conn.execute("DELETE FROM events WHERE id = ?", (rows[0]["id"],))
                conn.execute(
                    "DELETE FROM event_keys WHERE source = ? AND dedupe_key = ?",
                    (rows[0]["source"], rows[0]["dedupe_key"]),
                )
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


# The writer process (``python -m store.intake.sqlite_write PATH``, started by
# ``hookd.runtime.sqlite_writer.SqliteProcessInserter``) reads requests on stdin and
# answers each on stdout, in order, after its commit. A frame is a 4-byte big-endian
# length, then a pickle: the request ``(op, rows)``, ``op`` being "insert" or "probe";
# the answer ``("ok", (created, unleased), existing)`` (``Written``) or ``("error",
# sqlite3 exception name, message)``. Both ends are hookd's own, over a pipe no one
# else holds.
FRAME = struct.Struct("!I")
INSERT = "insert"
PROBE = "probe"

Reply = tuple[str, Any, Any]


def answer(writer: SqliteWriter, op: str, rows: list[NewRow]) -> Reply:
    """One request's answer; a SQLite error is an answer too (the batch fails, the
    writer stays)."""
    try:
        if op == INSERT:
            created, existing, unleased = writer.write(rows)
        else:
            writer.probe(rows)
            created, existing, unleased = set(), {}, set()
    except sqlite3.Error as exc:
        return ("error", type(exc).__name__, str(exc))
    except (UnicodeError, ValueError, TypeError, OverflowError) as exc:
        # A value of the batch that SQLite cannot bind: the batch fails, the writer
        # stays, and the receiver commits the batch without that row.
        return ("error", "DataError", type(exc).__name__)
    return ("ok", (created, unleased), existing)


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
            op, rows = pickle.loads(data)  # noqa: S301 - our own pipe, from our own parent
            reply = pickle.dumps(answer(writer, op, rows), protocol=pickle.HIGHEST_PROTOCOL)
            answers.write(FRAME.pack(len(reply)) + reply)
            answers.flush()
    finally:
        writer.discard()


def main(argv: Sequence[str]) -> int:
    # The receiver decides when this process ends, by closing its stdin: a Ctrl-C
    # sent to the whole process group, or a SIGTERM sent to the whole cgroup, must
    # not cut a transaction short before the receiver has had its answer.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if len(argv) != 2:
        print("usage: python -m store.intake.sqlite_write PATH (started by hookd)", file=sys.stderr)
        return 2
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames goes to the pipe
    try:
        serve(argv[1], sys.stdin.buffer, answers)
    except BrokenPipeError:
        return 0  # the receiver went away mid-answer: it will not read it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
