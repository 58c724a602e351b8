"""What changes the database as a whole, beside its schema (``hookd db upgrade``): the
encryption of every stored body (``hookd keys rotate``), and the lease one pruning
process holds (``hookd prune``, which prunes through ``hookd.ops.prune``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from store.crypto import BodyCipher
from store.keys import BodyUnopened, Rotated, rotate_bodies
from store.retention import lease as prune_lease


@dataclass(frozen=True, slots=True)
class KeysRotated:
    """What a key rotation did (``done``), and where one asked to stop at the first body
    no key opens stopped: that event (None: it went to the end)."""

    done: Rotated
    stopped_at: str | None = None


class MaintenanceOps:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def rotate_keys(self, cipher: BodyCipher, *, stop_on_error: bool) -> KeysRotated:
        """Every stored body under the first key of ``cipher`` (``store.keys``); a body
        no key opens is skipped, or with ``stop_on_error`` the rotation stops there
        (what came before it stays committed)."""
        try:
            return KeysRotated(
                await rotate_bodies(self._engine, cipher, stop_on_error=stop_on_error)
            )
        except BodyUnopened as stop:
            return KeysRotated(stop.done, stopped_at=stop.event_id)

    async def prune_lease_holder(self) -> tuple[str | None, datetime | None]:
        """Which process holds the prune lease, and until when (None, None: none)."""
        return await prune_lease.lease_holder(self._engine)
