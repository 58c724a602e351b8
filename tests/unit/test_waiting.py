"""The tests' polling helper: returns what it waited for, fails with what it last saw."""

from __future__ import annotations

import time

import pytest

from tests.support.waiting import wait_for, wait_for_sync

pytestmark = pytest.mark.anyio


async def test_returns_the_first_truthy_value_of_a_sync_predicate() -> None:
    calls: list[int] = []

    def third() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await wait_for(third, timeout_s=5, interval_s=0.001) == 3
    assert len(calls) == 3


async def test_awaits_an_async_predicate() -> None:
    calls: list[int] = []

    async def second() -> str | None:
        calls.append(1)
        return "ready" if len(calls) == 2 else None

    assert await wait_for(second, timeout_s=5, interval_s=0.001) == "ready"


async def test_timeout_says_the_message_and_the_last_value() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        await wait_for(lambda: [], timeout_s=0.1, interval_s=0.01, message="never filled")
    assert time.monotonic() - started >= 0.1
    assert "never filled" in str(failed.value)
    assert "last value: []" in str(failed.value)


async def test_a_callable_message_is_called_once_and_only_on_timeout() -> None:
    said: list[int] = []

    async def log() -> str:
        said.append(1)
        return "the log"

    assert await wait_for(lambda: True, timeout_s=1, message=log) is True
    assert said == []
    with pytest.raises(AssertionError, match="the log"):
        await wait_for(lambda: False, timeout_s=0.05, interval_s=0.01, message=log)
    assert said == [1]


async def test_an_assertion_in_the_predicate_fails_at_once() -> None:
    def dead() -> bool:
        raise AssertionError("the worker exited")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="the worker exited"):
        await wait_for(dead, timeout_s=30)
    assert time.monotonic() - started < 5


def test_sync_twin_returns_the_value_and_fails_on_timeout() -> None:
    calls: list[int] = []

    def second() -> int:
        calls.append(1)
        return len(calls) if len(calls) == 2 else 0

    assert wait_for_sync(second, timeout_s=5, interval_s=0.001) == 2
    with pytest.raises(AssertionError, match=r"last value: 0\): nothing came"):
        wait_for_sync(lambda: 0, timeout_s=0.05, interval_s=0.01, message=lambda: "nothing came")
