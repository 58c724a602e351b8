"""supervise()'s back-off after Redis losses: grows with losses in a row, and starts again
after a connection that held (a fake arq worker; the loop and timing are real)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hookd.runtime import worker


class FakeWorker:
    """Runs for ``lives.pop(0)`` seconds, then fails as arq does when Redis goes away."""

    def __init__(self, lives: list[float]) -> None:
        self.life = lives.pop(0)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.pool = None

    async def main(self) -> None:
        await asyncio.sleep(self.life)
        raise ConnectionError("redis went away")

    async def close(self) -> None:
        return None


def test_backoff_grows_then_resets_after_a_stable_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lives = [0.0, 0.0, 0.0, 0.3, 0.0, 60.0]
    sweeps: list[float] = []
    stop = asyncio.Event()

    async def local_sweep(_runtime: Any, seconds: float, _stop: asyncio.Event) -> None:
        sweeps.append(seconds)
        if len(sweeps) == 5:
            stop.set()

    monkeypatch.setattr(worker, "arq_worker", lambda _runtime: FakeWorker(lives))
    monkeypatch.setattr(worker, "_local_sweep", local_sweep)
    monkeypatch.setattr(worker, "STABLE_S", 0.2)
    asyncio.run(worker.supervise(object(), stop))  # type: ignore[arg-type]
    # 2, 4, 8 s after three brief losses; the fourth connection held 0.3 s (> STABLE_S):
    # back to 2 s, then 4 s.
    assert sweeps == [2.0, 4.0, 8.0, 2.0, 4.0]
