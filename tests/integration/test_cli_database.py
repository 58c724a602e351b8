"""A database hookd cannot open, as a new user meets it: one line and exit 2, no traceback.

Runs the installed ``hookd`` console script, as a user does, with only the
environment each case sets.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.support import services
from tests.support.server import ROOT, HookdServer, HookdWorker, free_port

HOOKD = Path(sys.executable).with_name("hookd")
PASSWORD = "never-shown-pw"
UNKNOWN_ID = "01J0000000000000000000000A"


def run_hookd(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKD_")}
    return subprocess.run(
        [str(HOOKD), *args],
        cwd=cwd,
        # This tree's hookd, whichever checkout the console script was installed from.
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``hookd:`` line of a refused start, checked to be the whole output."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hookd: "), result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.fixture
def pg() -> None:
    services.require_pg()


def pg_url(database: str, user: str | None = None) -> str:
    url = make_url(services.sqlalchemy_url(database)).set(password=PASSWORD)
    if user is not None:
        url = url.set(username=user)
    return url.render_as_string(hide_password=False)


PG_COMMANDS = [["db", "upgrade"], ["events", "list"], ["serve", "--port", "1"], ["worker"]]


@pytest.mark.postgres
@pytest.mark.parametrize("args", PG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_postgres_database_is_one_line(
    pg: None, tmp_path: Path, sources_file: Path, args: list[str]
) -> None:
    name = f"hookd_missing_{uuid.uuid4().hex[:12]}"
    result = run_hookd(
        tmp_path,
        *args,
        HOOKD_DATABASE_URL=pg_url(name),
        HOOKD_CONFIG=str(sources_file),
        HOOKD_REDIS_URL="redis://127.0.0.1:6379/0",  # worker's own check comes first
    )
    line = one_line(result)
    assert f'database "{name}" does not exist' in line
    assert "createdb " in line and line.count(name) >= 2, "names the database and the fix"
    assert PASSWORD not in result.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("args", PG_COMMANDS[:2], ids=" ".join)
def test_a_missing_postgres_role_is_one_line(
    pg: None, tmp_path: Path, sources_file: Path, args: list[str]
) -> None:
    role = f"hookd_nobody_{uuid.uuid4().hex[:8]}"
    result = run_hookd(
        tmp_path,
        *args,
        HOOKD_DATABASE_URL=pg_url("postgres", user=role),
        HOOKD_CONFIG=str(sources_file),
    )
    line = one_line(result)
    assert f'role "{role}" does not exist' in line
    assert f"createuser {role}" in line
    assert PASSWORD not in result.stderr


@pytest.mark.parametrize("args", [["db", "upgrade"], ["events", "list"]], ids=" ".join)
def test_a_sqlite_path_in_a_missing_folder_is_one_line(tmp_path: Path, args: list[str]) -> None:
    folder = tmp_path / "not-there"
    result = run_hookd(
        tmp_path, *args, HOOKD_DATABASE_URL=f"sqlite+aiosqlite:///{folder / 'hookd.db'}"
    )
    line = one_line(result)
    assert str(folder.resolve() / "hookd.db") in line
    assert "folder" in line
    assert not folder.exists()


READ_COMMANDS = [
    ["events", "list"],
    ["events", "show", UNKNOWN_ID],
    ["sources", "list"],
    ["wait", UNKNOWN_ID, "--timeout", "1"],
    ["replay", UNKNOWN_ID],
    ["serve", "--port", "1"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_command_in_a_folder_without_the_database_creates_none(
    tmp_path: Path, sources_file: Path, args: list[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # No HOOKD_DATABASE_URL: the default, ./hookd.db, is looked for in this folder.
    result = run_hookd(elsewhere, *args, HOOKD_CONFIG=str(sources_file))
    line = one_line(result)
    assert str(elsewhere.resolve() / "hookd.db") in line
    assert "hookd db upgrade" in line
    assert sorted(p.name for p in elsewhere.iterdir()) == [], "no stray database file"


def test_db_upgrade_creates_the_file_and_names_it(tmp_path: Path, sources_file: Path) -> None:
    made = run_hookd(tmp_path, "db", "upgrade")
    assert made.returncode == 0, made.stderr
    assert str(tmp_path.resolve() / "hookd.db") in made.stdout
    listed = run_hookd(tmp_path, "events", "list", HOOKD_CONFIG=str(sources_file))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1] == "(none)"


@pytest.fixture
def empty_pg(pg: None) -> Iterator[str]:
    """A database of its own, created empty for the test and dropped after it."""
    name = services.create_database()
    yield name
    services.drop_database(name)


def autovacuum_off() -> bool:
    async def show() -> str:
        conn = await asyncpg.connect(services.PG_DSN, timeout=5)
        try:
            return str(await conn.fetchval("SHOW autovacuum"))
        finally:
            await conn.close()

    return asyncio.run(show()) == "off"


AUTOVACUUM = "hookd: warning: PostgreSQL has autovacuum off"
MISSPELT = '[[sources]]\nname = "gh"\nprovider = "githb"\nsecrets = ["s"]\n'


@pytest.mark.postgres
def test_the_autovacuum_warning_is_said_by_db_upgrade_and_not_by_every_command(
    empty_pg: str, tmp_path: Path, sources_file: Path
) -> None:
    if not autovacuum_off():
        pytest.skip("this PostgreSQL server runs autovacuum: nothing to warn about")
    env = {"HOOKD_DATABASE_URL": pg_url(empty_pg), "HOOKD_CONFIG": str(sources_file)}
    made = run_hookd(tmp_path, "db", "upgrade", **env)
    assert made.returncode == 0, made.stderr
    [warning] = made.stderr.splitlines()
    assert warning.startswith(AUTOVACUUM)
    listed = run_hookd(tmp_path, "events", "list", **env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    # A configuration error is the one line, with no warning before it.
    bad = tmp_path / "bad.toml"
    bad.write_text(MISSPELT)
    for args in (["coverage", "gh"], ["sources", "list"], ["serve", "--port", str(free_port())]):
        refused = run_hookd(tmp_path, *args, **{**env, "HOOKD_CONFIG": str(bad)})
        assert "did you mean 'github'?" in one_line(refused)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = run_hookd(tmp_path, "serve", "--port", port, **env)
        assert f"127.0.0.1:{port}" in one_line(busy)
        busy = run_hookd(
            tmp_path,
            "worker",
            **env,
            HOOKD_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
            HOOKD_WORKER_METRICS_PORT=port,
        )
        assert port in one_line(busy)


@pytest.mark.postgres
def test_serve_and_worker_warn_of_autovacuum_once_at_start(
    empty_pg: str, tmp_path: Path, sources_file: Path
) -> None:
    if not autovacuum_off():
        pytest.skip("this PostgreSQL server runs autovacuum: nothing to warn about")
    url = pg_url(empty_pg)
    assert run_hookd(tmp_path, "db", "upgrade", HOOKD_DATABASE_URL=url).returncode == 0
    env = {
        "HOOKD_DATABASE_URL": url,
        "HOOKD_CONFIG": str(sources_file),
        # Unreachable: the worker warns and runs on (processing from the database).
        "HOOKD_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    with HookdServer(env, tmp_path, workers=2) as server:
        server.stop()
    lines = server.log_path.read_text().splitlines()
    [warning] = [line for line in lines if line.startswith(AUTOVACUUM)]
    assert lines.index(warning) < next(i for i, li in enumerate(lines) if "serving on" in li)
    with HookdWorker(env, tmp_path) as worker:
        worker.wait_for_line(lambda line: "Redis is unreachable" in line)
        worker.stop()
    lines = worker.log_path.read_text().splitlines()
    assert len([line for line in lines if line.startswith(AUTOVACUUM)]) == 1


async def pg_execute(database: str, *statements: str) -> list[str]:
    """Run statements in a test's own database; the names of its tables, after."""
    dsn = services.PG_DSN.rsplit("/", 1)[0] + f"/{database}"
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
        rows = await conn.fetch(
            "SELECT table_schema || '.' || table_name AS name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
        )
        return [row["name"] for row in rows]
    finally:
        await conn.close()


@pytest.mark.postgres
def test_db_upgrade_refuses_a_postgres_database_that_holds_other_tables(
    empty_pg: str, tmp_path: Path
) -> None:
    """A wrong HOOKD_DATABASE_URL (the `postgres` database, another application's) is
    not filled with hookd's tables; --yes says it is meant."""
    theirs = asyncio.run(pg_execute(empty_pg, "CREATE TABLE accounts (id int)"))
    assert theirs == ["public.accounts"]
    url = pg_url(empty_pg)
    refused = run_hookd(tmp_path, "db", "upgrade", HOOKD_DATABASE_URL=url)
    line = one_line(refused)
    assert line.startswith(f"hookd: database '{empty_pg}' on 127.0.0.1:5432 holds 1 table ")
    assert "(accounts) and no hookd schema" in line
    assert "--yes" in line and "createdb" in line
    assert PASSWORD not in refused.stderr
    assert asyncio.run(pg_execute(empty_pg)) == theirs, "nothing was migrated"

    meant = run_hookd(tmp_path, "db", "upgrade", "--yes", HOOKD_DATABASE_URL=url)
    assert meant.returncode == 0, meant.stderr
    assert "public.alembic_version" in asyncio.run(pg_execute(empty_pg))
    again = run_hookd(tmp_path, "db", "upgrade", HOOKD_DATABASE_URL=url)
    assert again.returncode == 0, again.stderr  # hookd's schema now: no question asked


@pytest.mark.postgres
def test_db_upgrade_refuses_another_applications_alembic_revision(
    empty_pg: str, tmp_path: Path
) -> None:
    asyncio.run(
        pg_execute(
            empty_pg,
            "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)",
            "INSERT INTO alembic_version VALUES ('1f2e3d4c5b6a')",
            "CREATE TABLE orders (id int)",
        )
    )
    for args in (["db", "upgrade"], ["db", "upgrade", "--yes"]):
        line = one_line(run_hookd(tmp_path, *args, HOOKD_DATABASE_URL=pg_url(empty_pg)))
        assert "Alembic revision '1f2e3d4c5b6a', which is not one of hookd's" in line
    assert asyncio.run(pg_execute(empty_pg)) == ["public.alembic_version", "public.orders"]


def test_db_upgrade_refuses_a_sqlite_file_that_holds_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id integer)")
    conn.close()
    url = f"sqlite+aiosqlite:///{path}"
    line = one_line(run_hookd(tmp_path, "db", "upgrade", HOOKD_DATABASE_URL=url))
    assert line == (
        f"hookd: database SQLite file {path.resolve()} holds 1 table (notes) and no hookd "
        "schema: it looks like another application's database; set HOOKD_DATABASE_URL to a "
        "new file for hookd, or pass --yes to add hookd's tables to this one"
    )
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    conn.close()
    meant = run_hookd(tmp_path, "db", "upgrade", "--yes", HOOKD_DATABASE_URL=url)
    assert meant.returncode == 0, meant.stderr
    assert run_hookd(tmp_path, "db", "upgrade", HOOKD_DATABASE_URL=url).returncode == 0
