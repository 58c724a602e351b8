"""``hookd.runtime.lifecycle``: services started in order, stopped in the reverse order,
also when a later one fails to start; ``Adapted`` for other classes' own calls."""

from __future__ import annotations

import pytest

from hookd.runtime.lifecycle import Adapted, Service, running

pytestmark = pytest.mark.anyio


class Recorded:
    def __init__(self, name: str, calls: list[str], *, fail: bool = False) -> None:
        self.name = name
        self.calls = calls
        self.fail = fail

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError(self.name)
        self.calls.append(f"start {self.name}")

    async def stop(self) -> None:
        self.calls.append(f"stop {self.name}")


async def test_started_in_order_and_stopped_last_first() -> None:
    calls: list[str] = []
    services: list[Service] = [Recorded(name, calls) for name in ("a", "b", "c")]
    async with running(services):
        calls.append("body")
    assert calls == ["start a", "start b", "start c", "body", "stop c", "stop b", "stop a"]


async def test_a_failed_start_stops_those_already_started() -> None:
    calls: list[str] = []
    services: list[Service] = [Recorded("a", calls), Recorded("b", calls, fail=True)]
    with pytest.raises(RuntimeError, match="b"):
        async with running(services):
            calls.append("body")
    assert calls == ["start a", "stop a"]


async def test_an_error_in_the_body_still_stops_everything() -> None:
    calls: list[str] = []
    services: list[Service] = [Recorded(name, calls) for name in ("a", "b")]
    with pytest.raises(ValueError, match="boom"):
        async with running(services):
            raise ValueError("boom")
    assert calls == ["start a", "start b", "stop b", "stop a"]


async def test_adapted_calls_a_plain_start_a_coroutine_one_or_none() -> None:
    calls: list[str] = []

    async def close() -> None:
        calls.append("close")

    async def opened() -> None:
        calls.append("async start")

    services: list[Service] = [
        Adapted(close),
        Adapted(close, lambda: calls.append("plain start")),
        Adapted(close, opened),
    ]
    async with running(services):
        pass
    assert calls == ["plain start", "async start", "close", "close", "close"]
