"""Poisoned values (``chaos.poison``) with its ``QUICK`` counts, on PostgreSQL and SQLite:
every valid delivery of a commit group is acknowledged and stored whatever its neighbours
carry, and no request gets a 5xx."""

from __future__ import annotations

import pytest

from chaos import poison
from tests.support import services

pytestmark = pytest.mark.anyio


@pytest.fixture
def postgres() -> None:
    services.require_pg()


@pytest.mark.postgres
@pytest.mark.usefixtures("postgres")
async def test_hostile_values_in_a_commit_group_hurt_no_valid_delivery() -> None:
    figures = await poison.run(**poison.QUICK)
    failed = [name for name, ok in figures["checks"].items() if not ok]
    assert not failed, (failed, figures)
    assert poison.report(figures)
    for name in poison.DATABASES:
        done = figures["databases"][name]
        # The work was done: every pair sent, and both answers seen.
        assert done["valid"] > 0
        assert done["hostile"] == poison.QUICK["groups"] * poison.HOSTILE_PER_GROUP
        assert set(done["hostile_statuses"]) == {"202", "400"}, done
        assert done["valid_202"] == done["valid_stored"] == done["valid"]
