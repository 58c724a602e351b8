"""Shared fixtures: databases (SQLite and real PostgreSQL), sources, signing."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.config import Sources, parse_sources
from store import migrate
from tests.support import services

GITHUB_SECRET = "gh-test-secret"
STRIPE_SECRET = "whsec_test_stripe"
SLACK_SECRET = "slack-test-secret"
STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-test-secret-32-bytes!!").decode()

SOURCES_TOML = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{GITHUB_SECRET}"]

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]

[[sources]]
name = "slack"
provider = "slack"
secrets = ["{SLACK_SECRET}"]

[[sources]]
name = "standard"
provider = "standard"
secrets = ["{STANDARD_SECRET}"]
max_body_bytes = 4096
"""

SECRETS = {
    "github": GITHUB_SECRET,
    "stripe": STRIPE_SECRET,
    "slack": SLACK_SECRET,
    "standard": STANDARD_SECRET,
}


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
