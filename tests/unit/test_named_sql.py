"""The store's raw SQL files: each parses, each query is named once and used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store import queries

STORE = Path(queries.__file__).parent


def test_a_file_is_split_into_named_statements_without_its_comments() -> None:
    text = (
        "-- a header\n\n-- name: first\n-- why: it is so\nSELECT 1\n\n"
        "-- name: second\nSELECT :a\n  -- inside\nFROM t\n"
    )
    assert queries.parse(text, "x.sql") == {"first": "SELECT 1", "second": "SELECT :a\nFROM t"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("SELECT 1\n-- name: a\nSELECT 2\n", "x.sql:1: SQL before the first '-- name:' line"),
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x.sql:3: query 'a' is named twice"),
        ("-- name: a\n-- only a comment\n", "x.sql: query 'a' has no SQL"),
    ],
)
def test_a_malformed_file_is_refused_with_where(text: str, says: str) -> None:
    with pytest.raises(queries.QueryFileError) as caught:
        queries.parse(text, "x.sql")
    assert str(caught.value) == says


@pytest.mark.parametrize("path", sorted(queries.SQL_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_every_query_is_loaded_by_its_module_and_used(path: Path) -> None:
    named = queries.load(path.stem)
    assert named
    users = [p for p in STORE.rglob("*.py") if f'queries.load("{path.stem}")' in p.read_text()]
    assert users, f"no module of store/ loads {path.name}"
    code = "\n".join(p.read_text() for p in users)
    for name in named:
        assert re.search(rf"\[\"{name}\"\]", code), f"{path.name}: {name} is not used"
