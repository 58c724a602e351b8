"""The status and origin words of ``store.status`` are the schema's, and the typed
rows of ``store.rows`` are their tables' columns.

The CHECK constraints and the runnable index's predicate are read from the
migrations' source (as text: importing a migration needs Alembic's context), so
an enum member added, renamed or dropped without a migration fails here, and so
does a migration that changes the words without the code.
"""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from pathlib import Path

import pytest

from store.models import EVENTS, ORIGINS, RECONCILE_RUNS, RECONCILE_STATE, STATUSES
from store.rows import EventRow, RunRow, SourceStateRow
from store.status import (
    DONE_RUN_STATUSES,
    DONE_STATUSES,
    RUNNABLE_STATUSES,
    UNFINISHED_RUN_STATUSES,
    AlertStatus,
    BreakerState,
    CoverageOutcome,
    EventOrigin,
    EventStatus,
    NotificationStatus,
    OperationAction,
    OperationStatus,
    RunStatus,
    sql_in,
)

VERSIONS = Path(__file__).resolve().parents[2] / "store" / "migrations" / "versions"
IN_LIST = re.compile(r"^\s*(\w+)\s+IN\s*\(([^)]*)\)\s*$")


def _in_list(sql: str) -> tuple[str, list[str]]:
    """``col IN ('a','b')`` -> ("col", ["a", "b"]), in the order written."""
    match = IN_LIST.match(sql)
    assert match is not None, f"not a plain IN list: {sql!r}"
    return match[1], re.findall(r"'([^']*)'", match[2])


def _check_constraints() -> dict[str, str]:
    """Every named ``CheckConstraint(...)`` in the migrations: name -> its SQL, as the
    latest migration to make it says (one that makes it again drops it first)."""
    found: dict[str, str] = {}
    for path in sorted(VERSIONS.glob("*.py")):
        text = path.read_text()
        made: set[str] = set()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func  # sa.CheckConstraint(...) or CheckConstraint(...)
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called != "CheckConstraint":
                continue
            names = [k.value for k in node.keywords if k.arg == "name"]
            assert len(names) == 1 and isinstance(names[0], ast.Constant), ast.unparse(node)
            name, sql = names[0].value, node.args[0]
            assert isinstance(name, str) and isinstance(sql, ast.Constant), ast.unparse(node)
            assert isinstance(sql.value, str), ast.unparse(node)
            assert name not in made, f"{name} is created twice in {path.name}"
            again = f'drop_constraint("{name}"' in text
            assert name not in found or again, f"{name} is created again, not dropped first"
            made.add(name)
            found[name] = sql.value
    return found


@pytest.mark.parametrize(
    ("constraint", "column", "enum"),
    [
        ("ck_events_status", "status", EventStatus),
        ("ck_events_origin", "origin", EventOrigin),
        ("ck_reconcile_runs_status", "status", RunStatus),
        ("ck_operations_status", "status", OperationStatus),
        ("ck_operations_action", "action", OperationAction),
        ("ck_destination_breakers_state", "state", BreakerState),
        ("ck_reconcile_coverage_outcome", "outcome", CoverageOutcome),
        ("ck_alerts_status", "status", AlertStatus),
        ("ck_notifications_status", "status", NotificationStatus),
    ],
)
def test_enum_values_are_the_check_constraint_values(
    constraint: str, column: str, enum: type[StrEnum]
) -> None:
    checks = _check_constraints()
    assert constraint in checks, f"no migration creates {constraint}"
    checked_column, allowed = _in_list(checks[constraint])
    assert checked_column == column
    assert [member.value for member in enum] == allowed


def test_the_migrations_check_nothing_else_the_enums_would_miss() -> None:
    """A new CHECK constraint on a status-like column needs a place in this test."""
    assert set(_check_constraints()) == {
        "ck_events_status",
        "ck_events_origin",
        "ck_reconcile_runs_status",
        "ck_operations_status",
        "ck_operations_action",
        "ck_destination_breakers_state",
        "ck_reconcile_coverage_outcome",
        "ck_alerts_status",
        "ck_notifications_status",
    }


def test_runnable_index_predicate_is_the_runnable_statuses() -> None:
    """ix_events_runnable must cover exactly what claims read as runnable, in the
    migration that creates it and in the model the schema test compares."""
    source = (VERSIONS / "0004_runnable_index.py").read_text()
    (predicate,) = re.findall(r'sa\.text\("([^"]*)"\)', source)
    assert predicate == sql_in("status", RUNNABLE_STATUSES)
    assert _in_list(predicate) == ("status", ["pending", "retrying"])


def test_runnable_indexes_split_the_runnable_events_by_object() -> None:
    """Since 0012 ([sources.order]) ix_events_runnable holds the runnable events of no
    object, ix_events_object_due those of one: the same predicates in the migration
    that makes them and in the model the schema test compares."""
    source = (VERSIONS / "0012_operations.py").read_text()
    runnable = sql_in("status", RUNNABLE_STATUSES)
    assert f'RUNNABLE = "{runnable}"' in source
    assert 'RUNNABLE_UNORDERED = f"{RUNNABLE} AND object_key IS NULL"' in source
    assert 'RUNNABLE_ORDERED = f"{RUNNABLE} AND object_key IS NOT NULL"' in source
    wanted = {
        "ix_events_runnable": f"{runnable} AND object_key IS NULL",
        "ix_events_object_due": f"{runnable} AND object_key IS NOT NULL",
    }
    for name, predicate in wanted.items():
        index = next(i for i in EVENTS.indexes if i.name == name)
        for dialect in ("postgresql", "sqlite"):
            assert str(index.dialect_options[dialect]["where"]) == predicate


def test_status_groups() -> None:
    assert set(RUNNABLE_STATUSES) == {EventStatus.PENDING, EventStatus.RETRYING}
    assert set(DONE_STATUSES) == {EventStatus.PROCESSED, EventStatus.DEAD, EventStatus.SUPERSEDED}
    assert not set(RUNNABLE_STATUSES) & set(DONE_STATUSES)
    assert set(UNFINISHED_RUN_STATUSES) == {RunStatus.QUEUED, RunStatus.RUNNING}
    assert set(UNFINISHED_RUN_STATUSES) | set(DONE_RUN_STATUSES) == set(RunStatus)
    assert not set(UNFINISHED_RUN_STATUSES) & set(DONE_RUN_STATUSES)


def test_members_are_the_plain_strings() -> None:
    """Rows hold the strings the database returned: members must equal and hash as them."""
    dead: str = "dead"  # typed str: the row's field, not a literal
    assert dead == EventStatus.DEAD and hash(dead) == hash(EventStatus.DEAD)
    assert dead in {EventStatus.DEAD}
    assert "retrying" in RUNNABLE_STATUSES and "processed" in DONE_STATUSES
    assert f"{RunStatus.LEASE_HELD}" == "lease_held"


def test_old_tuples_are_plain_strings_in_schema_order() -> None:
    assert STATUSES == ("pending", "processing", "retrying", "processed", "dead", "superseded")
    assert ORIGINS == ("webhook", "reconcile", "replay")
    assert all(type(s) is str for s in (*STATUSES, *ORIGINS))


@pytest.mark.parametrize(
    ("row", "table"),
    [(EventRow, EVENTS), (SourceStateRow, RECONCILE_STATE), (RunRow, RECONCILE_RUNS)],
)
def test_typed_rows_are_their_tables_columns_in_order(row: type, table: object) -> None:
    assert row._fields == tuple(table.c.keys())  # type: ignore[attr-defined]
