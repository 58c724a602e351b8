"""PostgreSQL: the names of ``events``' partitions and what the catalog says of them
(``store.retention.partitions`` describes the whole).

A day's partition is ``events_pYYYYMMDD`` over the id range of that UTC day
(``bounds``); ``events_default`` takes any id no partition covers. This module reads
which partitions exist, what refers to ``events``, and what a partition holds (a few
index probes each, never a read of its rows).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import dialect
from store.ids import id_floor, id_time_ms
from store.models import EVENTS
from store.status import EventStatus

PARENT = "events"
DEFAULT = "events_default"
PREFIX = "events_p"
DROPPING = "_dropping"
COMPACTING = "_compacting"
_NAME = re.compile(r"events_p(\d{8})")
_LEFTOVER = re.compile(r"events_p(\d{8})_dropping")
_BOUND = re.compile(r"FOR VALUES FROM \((.+)\) TO \((.+)\)")
# migration 0005's early vacuum, per partition (a partitioned table takes none itself).
STORAGE = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_delay": "0",
}
NOT_FINAL = (EventStatus.PENDING, EventStatus.RETRYING, EventStatus.PROCESSING)
COLUMNS = ", ".join(c.name for c in EVENTS.columns)
Tx = Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]]


def storage_clause() -> str:
    return ", ".join(f"{k} = {v}" for k, v in STORAGE.items())


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def bounds(day: date) -> tuple[str, str]:
    """The id range of a UTC day: ``[lo, hi)``."""
    start = day_start(day)
    return _floor(start), _floor(start + timedelta(days=1))


def name_of(day: date) -> str:
    return f"{PREFIX}{day:%Y%m%d}"


def _floor(moment: datetime) -> str:
    return id_floor(int(moment.timestamp() * 1000))


def quoted(name: str) -> str:
    """A table name as SQL (names come from the catalog or from ``name_of``)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    lo: str | None  # None: MINVALUE, or the default partition
    hi: str | None  # None: MAXVALUE, or the default partition
    default: bool = False

    def overlaps(self, lo: str, hi: str) -> bool:
        if self.default:
            return False
        return (self.lo is None or self.lo < hi) and (self.hi is None or lo < self.hi)

    @property
    def day(self) -> date | None:
        """The day of one of hookd's own partitions (named and bounded as ``ensure``
        makes them); None for the default and any partition an operator made."""
        found = _NAME.fullmatch(self.name)
        if found is None:
            return None
        try:
            day = datetime.strptime(found.group(1), "%Y%m%d").date()
        except ValueError:
            return None
        return day if (self.lo, self.hi) == bounds(day) else None

    @property
    def end(self) -> datetime | None:
        ms = None if self.hi is None else id_time_ms(self.hi)
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


async def is_partitioned(conn: AsyncConnection) -> bool:
    if not dialect.is_postgres(conn):
        return False
    kind = (
        await conn.execute(
            sa.text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(:t)"), {"t": PARENT}
        )
    ).scalar()
    return kind == "p"


async def list_partitions(conn: AsyncConnection) -> list[Partition]:
    """The partitions of ``events``, by lower bound (the default last)."""
    result = await conn.execute(
        sa.text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": PARENT},
    )
    out = []
    for name, bound in result:
        if bound == "DEFAULT":
            out.append(Partition(name, None, None, default=True))
            continue
        found = _BOUND.fullmatch(bound)
        if found is None:
            raise RuntimeError(f"events: partition {name} has unexpected bounds {bound}")
        out.append(Partition(name, _bound_value(found.group(1)), _bound_value(found.group(2))))
    return sorted(out, key=lambda p: (p.default, p.lo or ""))


def _bound_value(text: str) -> str | None:
    if text in ("MINVALUE", "MAXVALUE"):
        return None
    if not (text.startswith("'") and text.endswith("'")):
        raise RuntimeError(f"events: unexpected partition bound {text}")
    return text[1:-1].replace("''", "'")


async def _unattached(conn: AsyncConnection, suffix: str) -> list[str]:
    """Tables named like a day of ``events`` ending in ``suffix``, not partitions of it."""
    result = await conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE :p "
            "AND NOT c.relispartition"
        ),
        {"p": f"{PREFIX}%{suffix}"},
    )
    return sorted(r[0] for r in result)


async def leftovers(conn: AsyncConnection) -> list[str]:
    """Partitions detached by a drop that stopped before the table was dropped."""
    return [name for name in await _unattached(conn, DROPPING) if _LEFTOVER.fullmatch(name)]


async def stale_staging(conn: AsyncConnection) -> list[str]:
    """Tables a compaction stopped while copying left (never attached): dropped."""
    return await _unattached(conn, COMPACTING)


@dataclass(frozen=True, slots=True)
class Reference:
    """A table whose foreign key (one column) refers to ``events``: both as SQL."""

    table: str
    column: str


async def references(conn: AsyncConnection) -> list[Reference]:
    """Every table that refers to ``events`` (the handler ledger, and whatever later
    migrations add), read from the catalog so that none is forgotten."""
    result = await conn.execute(
        sa.text(
            "SELECT c.conrelid::regclass::text, quote_ident(a.attname) FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "WHERE c.contype = 'f' AND c.confrelid = to_regclass(:t) "
            "AND cardinality(c.conkey) = 1 ORDER BY 1, 2"
        ),
        {"t": PARENT},
    )
    return [Reference(r[0], r[1]) for r in result]


async def columns_of(conn: AsyncConnection, table: str) -> str:
    """The stored columns of ``table`` (by the catalog, in its order) as a SQL list:
    what a copy names, whatever migrations added since this code was written."""
    found = await conn.execute(
        sa.text(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped "
            "AND attgenerated = ''"
        ),
        {"t": table},
    )
    columns = found.scalar()
    if not columns:
        raise RuntimeError(f"{table}: no columns found in the catalog")
    return str(columns)


async def first_value(conn: AsyncConnection, sql: str, **params: Any) -> Any:
    return (await conn.execute(sa.text(sql), params)).scalar()


async def unfinished(conn: AsyncConnection, table: str) -> str | None:
    """A status of ``NOT_FINAL`` that a row of ``table`` has; each probe reads the
    ``(status, next_attempt_at)`` index in its order, one entry at most."""
    for status in NOT_FINAL:
        found = await first_value(
            conn,
            f"SELECT 1 FROM {table} WHERE status = :s ORDER BY status, next_attempt_at LIMIT 1",  # noqa: S608 - a quoted catalog name
            s=status.value,
        )
        if found is not None:
            return status.value
    return None


async def distinct_in(conn: AsyncConnection, table: str, column: str) -> list[str]:
    """The values ``column`` has in ``table``: one probe per value of an index that begins
    with it (``(source, id)``, ``(status, …)``: a skip scan), not a read of the rows."""
    out: list[str] = []
    value = await first_value(conn, f"SELECT min({column}) FROM {table}")  # noqa: S608 - a quoted catalog name
    while value is not None:
        out.append(value)
        value = await first_value(
            conn,
            f"SELECT min({column}) FROM {table} WHERE {column} > :v",  # noqa: S608 - a quoted catalog name
            v=value,
        )
    return out
