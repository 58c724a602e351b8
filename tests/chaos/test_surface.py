"""Item 10 of issue 7 at CI counts: ``chaos.surface`` with its ``QUICK`` arguments."""

from __future__ import annotations

import asyncio

from chaos import surface
from tests.support import services


def test_admin_surface_refuses_without_token_and_nothing_secret_is_at_rest() -> None:
    services.require_pg()
    services.require_tool("pg_dump")
    figures = asyncio.run(surface.run(**surface.QUICK))
    failed = [name for name, ok in figures["checks"].items() if not ok]
    assert not failed, (failed, figures)
    # It did something: every credential variant reached every API operation and page.
    assert set(figures["api"]) == set(surface.BAD_AUTH)
    assert all(sum(seen.values()) >= 10 for seen in figures["api"].values())
    assert figures["rows"] == surface.QUICK["events"]
    assert "re-encrypted" in figures["rotate_output"]
    assert "| of them 2xx | **0** |" in surface.report(figures)
