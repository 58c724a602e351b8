"""Engines for SQLite (WAL, synchronous=FULL) and PostgreSQL (synchronous_commit=on).

A 2xx means the event is on disk, so neither database is allowed a weaker
durability setting than its safe default; group commit pays for the fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypedDict

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_only

from hookd.errors import ConfigError
from store import dialect
from store.intake.sqlite_write import SQLITE_PRAGMAS, open_turn


def check_url(url: str) -> sa.URL:
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigError(
            f"environment: HOOKD_DATABASE_URL: cannot parse {redact(url)!r}"
        ) from None
    if parsed.drivername not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        raise ConfigError(
            "environment: HOOKD_DATABASE_URL: use sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER@HOST/DB"
        )
    return parsed


def redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable>"


def sqlite_path(url: str) -> str | None:
    """The absolute path of a SQLite database file; None for PostgreSQL or in-memory SQLite."""
    parsed = check_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or parsed.query.get("uri") in ("true", "1"):
        return None  # a SQLite URI filename: its own rules, left to SQLite
    # SQLite opens a relative path from the current folder, as abspath resolves it.
    return os.path.abspath(database)


def start_sqlite_file(url: str) -> None:
    """Give a new SQLite database ``auto_vacuum = INCREMENTAL`` before its first table.

    SQLite can switch that mode only while a database has no table (or by a full
    ``VACUUM``), so this runs before the migrations create the first one. With it,
    ``PRAGMA incremental_vacuum`` (after a prune) hands freed pages back to the file
    system; without it, the file keeps its size and reuses them. A file that already
    has tables, or that cannot be opened (the migrations then say why), is left alone.
    """
    path = sqlite_path(url)
    if path is None or not os.path.isdir(os.path.dirname(path)):
        return
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error:
        return
    try:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")  # applies the mode to the empty file
    except sqlite3.Error:
        return
    finally:
        conn.close()


def describe(url: str) -> str:
    """How one line names a database: a SQLite file's absolute path, else the URL sans password."""
    path = sqlite_path(url)
    return f"SQLite file {path}" if path is not None else redact(url)


def require_existing(url: str) -> None:
    """Refuse a SQLite file that is not there: connecting would create an empty one.

    Only ``hookd db upgrade`` creates the file; every other command run from the
    wrong folder would otherwise leave a stray empty database behind and then send
    the user to migrate that one instead of finding theirs.
    """
    path = sqlite_path(url)
    if path is None or os.path.exists(path):
        return
    folder = os.path.dirname(path)
    relative = not os.path.isabs(check_url(url).database or "")
    where = " (a relative path: looked for from the current folder)" if relative else ""
    if not os.path.isdir(folder):
        raise ConfigError(
            f"database: SQLite file {path} does not exist, nor does its folder{where}: "
            "set HOOKD_DATABASE_URL to your database, or create the folder and run "
            "`hookd db upgrade`"
        )
    raise ConfigError(
        f"database: SQLite file {path} does not exist{where}: set HOOKD_DATABASE_URL to "
        "your database (or run hookd from its folder), or create it with `hookd db upgrade`"
    )


@contextlib.contextmanager
def opening(url: str) -> Iterator[None]:
    """Turn a failure to open the database into one ``ConfigError`` line: which, and what to do.

    Wraps the first connection of a command (the start-up check, ``db upgrade``),
    not the engine: once running, the receiver and workers keep treating a lost
    database as transient and retry.
    """
    try:
        yield
    except sa.exc.DBAPIError as exc:
        message = _open_failure(url, exc.orig)
        if message is None:
            raise
        raise ConfigError(message) from None
    except (OSError, ConnectionError) as exc:
        raise ConfigError(
            f"database {describe(url)}: cannot reach it: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())}: "
            "check that the server is running and HOOKD_DATABASE_URL's host and port"
        ) from None


def _open_failure(url: str, orig: BaseException | None) -> str | None:
    """The line for a database that refuses to open; None for any other error."""
    sqlite_error = getattr(orig, "sqlite_errorname", None)
    if isinstance(sqlite_error, str):
        return _sqlite_failure(url, sqlite_error)
    sqlstate = getattr(orig, "sqlstate", None)
    if not isinstance(sqlstate, str):
        return None
    # The server's own words name the database or role; they never carry the password.
    said = " ".join(str(orig).split())
    advice = _postgres_advice(make_url(url), sqlstate, said)
    return None if advice is None else f"database {describe(url)}: {said}: {advice}"


def _sqlite_failure(url: str, error: str) -> str | None:
    if error == "SQLITE_NOTADB":
        return (
            f"database: {describe(url)} is not a SQLite database: "
            "set HOOKD_DATABASE_URL to hookd's database file"
        )
    if error != "SQLITE_CANTOPEN":
        return None
    path = sqlite_path(url)
    if path is None:  # a URI filename: SQLite's own rules
        return f"database {redact(url)}: SQLite cannot open it: check HOOKD_DATABASE_URL"
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        return missing_folder(path)
    return (
        f"database: SQLite file {path}: cannot open it: check that this user may read "
        f"and write it and its folder {folder}"
    )


def missing_folder(path: str) -> str:
    """The line for a SQLite file whose folder does not exist."""
    folder = os.path.dirname(path)
    return (
        f"database: SQLite file {path}: its folder {folder} does not exist: create "
        f"it (mkdir -p {folder}), or set HOOKD_DATABASE_URL to another path"
    )


def _postgres_advice(parsed: sa.URL, sqlstate: str, said: str) -> str | None:
    """What to do about a refused connection, by its SQLSTATE; None: not a refusal."""
    if sqlstate == "3D000":  # invalid_catalog_name: no such database
        flags = "".join(
            f"{flag} {value} "
            for flag, value in (("-h", parsed.host), ("-p", parsed.port), ("-U", parsed.username))
            if value
        )
        return f"create it (e.g. `createdb {flags}{parsed.database}`), then run `hookd db upgrade`"
    if sqlstate == "28P01":  # invalid_password
        return "fix the password in HOOKD_DATABASE_URL"
    if sqlstate.startswith("28"):  # invalid_authorization_specification: no role, pg_hba.conf
        if "role" in said:
            return (
                f"create the role (e.g. `createuser {parsed.username or 'NAME'}`), "
                "or fix the user in HOOKD_DATABASE_URL"
            )
        return "check the user in HOOKD_DATABASE_URL and the server's pg_hba.conf"
    if sqlstate == "42501":
        # CONNECT on the database, or CREATE on schema public (PostgreSQL 15+) at upgrade.
        return (
            "grant that privilege to the role in HOOKD_DATABASE_URL "
            "(e.g. make it the database's owner)"
        )
    return None


def json_dumps(value: Any) -> str:
    """JSON columns' writer: orjson, or the standard encoder for what orjson refuses
    (integers beyond 64 bits), so that nothing the standard one wrote fails now."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


def json_loads(text: str | bytes) -> Any:
    """JSON columns' reader: orjson (every event's headers, every claim), or the
    standard parser for what orjson refuses."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


class _Codecs(TypedDict):
    """How the engine writes and reads JSON columns (``create_async_engine``'s keywords)."""

    json_serializer: Callable[[Any], str]
    json_deserializer: Callable[[str | bytes], Any]


def create_engine(url: str, *, pool_size: int = 10, connect_timeout_s: float = 5.0) -> AsyncEngine:
    parsed = check_url(url)
    codecs = _Codecs(json_serializer=json_dumps, json_deserializer=json_loads)
    if parsed.get_backend_name() == "sqlite":
        engine = create_async_engine(parsed, connect_args={"timeout": 5}, **codecs)

        @sa.event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            cursor = dbapi_conn.cursor()
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
            cursor.close()

        return engine
    return create_async_engine(
        parsed,
        **codecs,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_timeout=connect_timeout_s,
        connect_args={
            "timeout": connect_timeout_s,
            "command_timeout": 30,
            "server_settings": {
                "synchronous_commit": "on",
                "application_name": "hookd",
                # asyncpg prepares every statement; after five runs PostgreSQL may
                # switch to a generic plan that cannot see the batch's id array and
                # settles a batch by walking every "processing" index entry (dead
                # ones included) instead of 128 primary-key lookups.
                "plan_cache_mode": "force_custom_plan",
                # Short statements only: an estimate gone stale (no statistics yet)
                # must not make one pay for compiling it, tens of milliseconds.
                "jit": "off",
            },
        },
    )


TURN_KEY = "hookd.turn"


class _Turn:
    """One transaction's claim on the SQLite turn (``sqlite_write.turn_path``)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1

    async def take(self) -> None:
        if self._fd >= 0:
            return
        fd = open_turn(self._path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
            try:
                await asyncio.shield(waiting)
            except BaseException:
                # Cancelled while the thread waits: it still takes the turn, and closing
                # its descriptor once it has lets it go again.
                waiting.add_done_callback(lambda _: os.close(fd))
                raise
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def let_go(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # and with it the flock
            self._fd = -1


def _take_turn_first(
    conn: sa.Connection, _cursor: Any, _statement: str, _params: Any, _context: Any, _many: bool
) -> None:
    """Before a statement of a turn-taking transaction (``transaction``): the turn, if
    this transaction does not hold it yet. Event hooks run in SQLAlchemy's greenlet, so
    the wait is awaited as the driver's own calls are."""
    turn = conn.info.get(TURN_KEY)
    if turn is not None:
        await_only(turn.take())


@contextlib.asynccontextmanager
async def _turn_transaction(engine: AsyncEngine, path: str) -> AsyncIterator[AsyncConnection]:
    turn = _Turn(path)
    try:
        async with engine.begin() as conn:
            info = (await conn.get_raw_connection()).info
            info[TURN_KEY] = turn
            try:
                yield conn
            finally:
                # Committed or rolled back after this; the turn is let go after that.
                info.pop(TURN_KEY, None)
    finally:
        turn.let_go()


def transaction(
    engine: AsyncEngine,
) -> Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]]:
    """``engine.begin()`` for a busy writer (``async with transaction() as conn:``). On a
    SQLite file it holds the turn the receiver's writer also takes
    (``sqlite_write.turn_path``) from its first statement to after its commit: what it
    does before that statement (building the first statement, compiling it) waits for
    no one and keeps no one waiting. Elsewhere it is ``engine.begin()``."""
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is None:
        return engine.begin
    if not sa.event.contains(engine.sync_engine, "before_cursor_execute", _take_turn_first):
        sa.event.listen(engine.sync_engine, "before_cursor_execute", _take_turn_first)
    return lambda: _turn_transaction(engine, path)


async def ping(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))


async def autovacuum_on(engine: AsyncEngine) -> bool:
    """False only for a PostgreSQL server that runs with ``autovacuum = off``."""
    if not dialect.is_postgres(engine):
        return True
    async with engine.connect() as conn:
        value = (await conn.execute(sa.text("SHOW autovacuum"))).scalar()
    return str(value).lower() != "off"
