"""What a processor holds, and how its slots are shared: the read-ahead, the running
events per source, and how many events to claim for them.

``processing.processor`` runs the slot loop; ``Slots`` is its book: every event it
holds the lease of by id, those read ahead per source in claim order, and how many run
per source (a finished event waiting for its outcome window holds no slot).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections import deque

from hookd.sources import Sources
from processing.attempt import Held

log = logging.getLogger("hookd.processing")

# While events run, due ones are looked for at least this often besides every wake-up
# (a retry come due, an event a receiver elsewhere stored while Redis was away).
CLAIM_POLL_S = 1.0
# The read-ahead: what this processor finishes in this long (see ``ReadAhead``).
READ_AHEAD_S = 0.2
# The outcome window: the first finished event opens it; it is written, with every
# event that finished meanwhile, OUTCOME_WINDOW_S later or at OUTCOME_BATCH outcomes.
# A few milliseconds: a crash repeats at most the effects of the events that finished
# inside one window (plus its commit), while a busy processor still writes dozens of
# outcomes per transaction, as the batches did.
OUTCOME_WINDOW_S = 0.005
OUTCOME_BATCH = 256


def source_cap(concurrency: int) -> int:
    """The most slots one source may fill: a quarter of them stay for the others, so a
    source that floods, or whose handlers are slow, never holds every slot."""
    return concurrency - concurrency // 4 if concurrency >= 4 else concurrency


class ReadAhead:
    """How many events to claim ahead of a free slot, so that a slot that frees starts
    its next event at once, without waiting for a claim: as many as this processor
    finishes in READ_AHEAD_S, between a small floor (slow handlers hold few events
    that other workers could run) and two batches (quick handlers get claims of up to
    a batch, topped up at half, which is what keeps a busy processor's claims few)."""

    def __init__(self, concurrency: int, batch_size: int) -> None:
        self._floor = max(1, min(batch_size, concurrency // 4))
        self._ceiling = max(self._floor, 2 * batch_size)
        self._ended: deque[float] = deque()

    def ended(self, now: float) -> None:
        self._ended.append(now)
        while self._ended and self._ended[0] < now - 1.0:
            self._ended.popleft()

    def size(self, now: float) -> int:
        while self._ended and self._ended[0] < now - 1.0:
            self._ended.popleft()
        wanted = int(len(self._ended) * READ_AHEAD_S)
        return min(self._ceiling, max(self._floor, wanted))


def window(now: float, window_end: float, finished: int, busy: bool) -> tuple[float, bool]:
    """The outcome window (it opens with the first of ``finished`` events): when it
    closes, and whether its outcomes are to be written now (closed, full, or nothing
    else will finish soon: not ``busy``)."""
    if not finished:
        return math.inf, False
    if window_end == math.inf:
        window_end = now + OUTCOME_WINDOW_S
    due = now >= window_end or finished >= OUTCOME_BATCH or not busy
    return window_end, due


class Drain:
    """One drain's clock and count: until when it may claim and how many claims are
    left, whether the last claim took all that was due (``exhausted``: none until a
    wake-up or the poll), the next poll, heartbeat and outcome window's end."""

    def __init__(
        self, deadline: float, claims_left: float, once: bool, handed: bool, beat_every_s: float
    ) -> None:
        self.deadline = deadline
        self.claims_left = claims_left
        self.once = once
        # Started for handed events: no claim before the poll or a wake-up.
        self.exhausted = handed
        self.poll_at = time.monotonic() + CLAIM_POLL_S if handed else -math.inf
        self._beat_every_s = beat_every_s
        self.beat_at = time.monotonic() + beat_every_s
        self.window_end = math.inf
        self.total = 0

    def may_claim(self, now: float) -> bool:
        return now < self.deadline and self.claims_left > 0

    def claimed(self, counted: int, *, drained: bool) -> None:
        """A claim made: ``counted`` added; ``drained``, all that was due: no claim until
        a wake-up or the poll."""
        self.total += counted
        self.claims_left -= 1
        self.exhausted = drained
        self.poll_at = time.monotonic() + CLAIM_POLL_S

    def again(self, want: int) -> bool:
        """Whether a turn that asked for ``want`` events claims again at once."""
        return bool(want) and self.claims_left > 0

    def ended(self, *, claiming: bool, woken: bool) -> bool:
        """Whether a drain with nothing running is done: it claims no more, or the last
        claim took all that was due and no wake-up came since."""
        return not claiming or self.claims_left <= 0 or (self.exhausted and not woken)

    def beaten(self) -> None:
        self.beat_at = time.monotonic() + self._beat_every_s


class Slots:
    """The book of one processor's ``concurrency`` slots and the events it holds."""

    def __init__(self, sources: Sources, concurrency: int, batch_size: int) -> None:
        self._sources = sources
        self.concurrency = concurrency
        # The most one claim takes; a drain takes what its free slots need.
        self.batch_size = batch_size
        self.cap = source_cap(concurrency)
        self._read_ahead_of = ReadAhead(concurrency, batch_size)
        # Every event held by id; those read ahead, per source, in claim order; how
        # many run, per source.
        self.held: dict[str, Held] = {}
        self.ready: dict[str, deque[Held]] = {}
        self.running: collections.Counter[str] = collections.Counter()

    @property
    def read_ahead(self) -> int:
        return self._read_ahead_of.size(time.monotonic())

    def active(self) -> collections.Counter[str]:
        """Per source, the events read ahead or running here: what a source's room counts
        (a finished event waiting for its outcome window holds no slot)."""
        active = collections.Counter({s: len(q) for s, q in self.ready.items()})
        active.update(self.running)
        return active

    def add_ready(self, held: Held) -> None:
        """``held`` (its lease held here) read ahead, behind its source's others."""
        self.held[held.row.id] = held
        self.ready.setdefault(held.row.source, deque()).append(held)

    def want(self, running: int, *, looking: bool) -> int:
        """How many events to claim now, ``running`` of them running: the free slots that
        what is read ahead cannot fill, plus the read-ahead's gap; nothing while every
        slot is busy. Slots free only because the sources read ahead are at their cap
        are kept for the others: claimed for when ``looking`` (a wake-up came, or the
        poll is due), not at every turn."""
        free = self.concurrency - running
        if free <= 0:
            return 0
        startable = sum(
            min(len(queue), max(0, self.cap - self.running[source]))
            for source, queue in self.ready.items()
        )
        ready = sum(len(queue) for queue in self.ready.values())
        need = max(0, free - startable)
        if ready and not looking and startable < min(free, ready):
            need = 0  # the free slots are the reserve: nothing to claim for them yet
        read_ahead = self.read_ahead
        gap = max(0, read_ahead - ready)
        if not need and gap < max(1, read_ahead // 2):
            # Every free slot has its next event: top the read-ahead up in claims of at
            # least half of it, not one claim per event that ends.
            return 0
        want = min(need + gap, self.batch_size)
        # No more than the sources have room for (each its cap plus the read-ahead).
        held = self.active()
        limit = self.cap + read_ahead
        return min(want, sum(max(0, limit - held[s.name]) for s in self._sources))

    def next_ready(self, beat_every_s: float) -> Held | None:
        """The next event read ahead to start, counted as running: of the source running
        fewest, none past its cap. One whose lease may have run out (the database was
        away past its renewal) is dropped: whoever takes it over runs it."""
        while True:
            best: str | None = None
            for source, queue in self.ready.items():
                running = self.running[source]
                if queue and running < self.cap and (best is None or running < self.running[best]):
                    best = source
            if best is None:
                return None
            queue = self.ready[best]
            held = queue.popleft()
            if not queue:
                del self.ready[best]
            if time.monotonic() > held.lease_end - beat_every_s:
                self.held.pop(held.row.id, None)
                log.warning("read-ahead lease ran out", extra={"event_id": held.row.id})
                continue
            self.running[best] += 1
            return held

    def ended(self, held: Held) -> None:
        """``held`` stopped running (its outcome waits for the window)."""
        self._read_ahead_of.ended(time.monotonic())
        self.running[held.row.source] -= 1

    def unready(self, held: Held) -> None:
        """``held`` out of the read-ahead and out of the book (its lease is lost)."""
        queue = self.ready.get(held.row.source)
        if queue is not None and held in queue:
            queue.remove(held)
            if not queue:
                del self.ready[held.row.source]
        self.held.pop(held.row.id, None)

    def take_ready(self) -> list[Held]:
        """Everything read ahead, out of the read-ahead (to be given back)."""
        given = [held for queue in self.ready.values() for held in queue]
        self.ready.clear()
        return given
