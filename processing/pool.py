"""Processors side by side in one process, the slots split between them.

Each member (``processing.processor.Processor``) has its own drain, owner and lease
fence; what wake-ups, sweeps and the shutdown call on a processor, a pool does on all
of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from processing.processor import Processor
from store.rows import EventRow


class ProcessorPool:
    """Processors side by side in one process, the slots split between them: each has
    its own drain, owner and lease fence, so a process keeps as many exchanges
    (a window's outcomes and a claim: one transaction each) in flight as it has members, where
    one processor has one at a time. What wake-ups, sweeps and the shutdown call on a
    processor, a pool does on all of them."""

    def __init__(self, members: list[Processor]) -> None:
        if not members:
            raise ValueError("a pool needs a processor")
        self.members = members

    def accept(self, rows: Sequence[EventRow]) -> int:
        """Handed events (``Processor.accept``), each to the member whose lease it has."""
        taken = 0
        for member in self.members:
            mine = [r for r in rows if r.lease_owner == member.owner]
            if mine:
                taken += member.accept(mine)
        return taken

    def has_room(self) -> bool:
        return all(m.has_room() for m in self.members)

    @property
    def owners(self) -> list[str]:
        return [m.owner for m in self.members]

    @property
    def owner(self) -> str:
        return ",".join(m.owner for m in self.members)

    @property
    def stopping(self) -> bool:
        return all(m.stopping for m in self.members)

    @property
    def pumping(self) -> bool:
        return any(m.pumping for m in self.members)

    def wake(self) -> None:
        for member in self.members:
            member.wake()

    def stop_claiming(self) -> None:
        for member in self.members:
            member.stop_claiming()

    @property
    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.members)

    def idle_s(self) -> float:
        return min(m.idle_s() for m in self.members)

    async def drain(self, max_s: float = 30.0) -> int:
        """Every member drains; the number claimed by all."""
        return sum(await asyncio.gather(*(m.drain(max_s) for m in self.members)))


def pool_of(make: Callable[[int], Processor], concurrency: int, members: int) -> ProcessorPool:
    """``members`` processors made by ``make(their share of concurrency)``, the shares
    adding up to ``concurrency`` (never fewer than one slot each)."""
    members = max(1, min(members, concurrency))
    shares = [concurrency // members + (i < concurrency % members) for i in range(members)]
    return ProcessorPool([make(share) for share in shares])
