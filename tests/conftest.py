"""Shared fixtures: databases (SQLite and real PostgreSQL) and an engine on them,
sources, signing; and the list of files tests kept as artifacts, printed at the end of
a run.

``db_url`` (and ``engine`` on it) runs a test on both databases, each fresh and
migrated to head: SQLite in the test's own folder, PostgreSQL cloned from a template
migrated once a session. ``tests.support.services.ONLY_SQLITE`` / ``ONLY_POSTGRES`` narrow
a test (or a module's ``pytestmark``) to one of them. Without PostgreSQL a laptop skips
what needs it; under ``CI=true`` it fails instead (``tests.support.services``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Sources, parse_sources
from store import migrate
from tests.support import services
from tests.support.constants import SOURCES_TOML
from tests.support.data import engine_of


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sources_file(tmp_path: Path) -> Path:
    path = tmp_path / "hookd.toml"
    path.write_text(SOURCES_TOML)
    return path


@pytest.fixture
def sources(sources_file: Path) -> Sources:
    return parse_sources(sources_file.read_text(), sources_file, env={})


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hookd.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    services.require_pg()
    name = services.create_database()
    migrate.upgrade(services.sqlalchemy_url(name))
    yield name
    services.drop_database(name)


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    name = services.create_database(template=pg_template)
    yield services.sqlalchemy_url(name)
    services.drop_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """hookd's engine on the test's database (``db_url``), disposed after the test."""
    async with engine_of(db_url) as eng:
        yield eng


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The files tests kept (``record_property("artifact", path)``: the browser tests'
    screenshots), listed at the end of the run: under pytest-xdist a test's own output
    is not shown."""
    kept = [
        f"{report.nodeid}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "artifact"
    ]
    if kept:
        terminalreporter.write_sep("-", "test artifacts")
        for line in kept:
            terminalreporter.write_line(line)
