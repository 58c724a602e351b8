"""The PostgreSQL/SQLite differences the store's statements share, in one place.

hookd runs on both; most statements are the same SQL, and where they differ the
difference is one of a few kinds, each a function here:

- ``is_postgres``: whether the connection (or engine, or dialect) is PostgreSQL;
- ``insert``: the dialect's ``INSERT`` construct, the one that has
  ``on_conflict_do_nothing`` / ``on_conflict_do_update``;
- ``locked``: ``SELECT … FOR UPDATE`` (``skip_locked``, ``FOR SHARE`` with ``read``)
  on PostgreSQL; on SQLite the statement as it is, the database's one write lock
  serialising writers instead;
- ``one_of``: ``column IN values``, one array parameter on PostgreSQL.

Statements that differ as a whole (an ``unnest`` join on PostgreSQL, a statement
written for the SQLite driver) keep their two texts side by side, chosen with
``is_postgres``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Bind = AsyncConnection | AsyncEngine | sa.Connection | sa.Engine | sa.Dialect
Query = TypeVar("Query", bound=sa.Select[Any])


def is_postgres(bind: Bind) -> bool:
    dialect = bind if isinstance(bind, sa.Dialect) else bind.dialect
    return dialect.name == "postgresql"


def insert(bind: Bind, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """``INSERT INTO table`` in the dialect's own construct (with ``ON CONFLICT``)."""
    return postgresql.insert(table) if is_postgres(bind) else sqlite.insert(table)


def locked(bind: Bind, query: Query, *, skip_locked: bool = False, read: bool = False) -> Query:
    """``query`` locking the rows it reads on PostgreSQL; unchanged on SQLite."""
    if not is_postgres(bind):
        return query
    return query.with_for_update(skip_locked=skip_locked, read=read)


def one_of(
    bind: Bind, column: sa.ColumnElement[str], values: Iterable[str]
) -> sa.ColumnElement[bool]:
    """``column IN values``; on PostgreSQL one array parameter (``= ANY($1)``), so a
    batch of a few hundred ids is neither a few hundred parameters nor a new plan."""
    if is_postgres(bind):
        return column == sa.any_(
            sa.bindparam(None, list(values), type_=postgresql.ARRAY(sa.String))
        )
    return column.in_(list(values))
