"""The store's raw SQL, by name, from the files in ``store/sql/``.

Most statements are built with SQLAlchemy's expression language. Those written as
SQL text (a PostgreSQL ``unnest`` over arrays, a statement handed to the SQLite driver
as it is, the catalogue reads) live in ``store/sql/<topic>.sql``, each after a line
``-- name: <name>`` and the comments that say why it is written so. A module loads its
file once, at import::

    SQL = queries.load("claims")
    LEDGER_PG = sa.text(SQL["ledger_pg"])

This module imports only the standard library: ``store.intake.sqlite_write``, which starts in
a process of its own, uses it too.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

SQL_DIR = Path(__file__).with_name("sql")
_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$")


class QueryFileError(ValueError):
    """A file of ``store/sql/`` that does not parse: a bug in the package, said at import."""


def parse(text: str, where: str) -> dict[str, str]:
    """``{name: statement}`` of a file's text. Whole-line comments are for the reader
    and are not sent (a colon in one would read as a bind parameter to ``sa.text``);
    blank lines around a statement are dropped."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        named = _NAME.match(line)
        if named:
            name = named.group(1)
            if name in queries:
                raise QueryFileError(f"{where}:{number}: query {name!r} is named twice")
            current = queries[name] = []
        elif current is not None:
            if not line.lstrip().startswith("--"):
                current.append(line)
        elif line.strip() and not line.startswith("--"):
            raise QueryFileError(f"{where}:{number}: SQL before the first '-- name:' line")
    statements = {name: "\n".join(lines).strip() for name, lines in queries.items()}
    for name, statement in statements.items():
        if not statement:
            raise QueryFileError(f"{where}: query {name!r} has no SQL")
    return statements


@functools.cache
def load(topic: str) -> dict[str, str]:
    """The queries of ``store/sql/<topic>.sql``."""
    path = SQL_DIR / f"{topic}.sql"
    return parse(path.read_text(encoding="utf-8"), f"store/sql/{path.name}")
