"""Hostile input: tampered requests against a real receiver, and coverage-guided fuzzing of
every verifier, envelope and the config loader, each with its ``QUICK`` counts. Every check
must hold, and the figures must show that the work was done (else a pass proves nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos import fuzz, tamper, tamper_requests
from tests.support import services

pytestmark = pytest.mark.anyio


@pytest.fixture
def postgres() -> None:
    services.require_pg()


def failed(figures: dict[str, Any]) -> list[str]:
    return [name for name, ok in figures["checks"].items() if not ok]


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.usefixtures("postgres")
async def test_tampered_requests_are_refused_and_leave_nothing_behind() -> None:
    figures = await tamper.run(**tamper.QUICK)
    assert not failed(figures), (failed(figures), figures)
    assert tamper.report(figures)

    per_provider = tamper.QUICK["per_provider"]
    assert figures["sent"] == per_provider * len(tamper_requests.PROVIDERS)
    assert figures["accepted"] == 0
    assert figures["server_errors"] == 0
    assert figures["rows_before_controls"] == 0
    assert figures["jobs_before_controls"] == 0
    # The controls show the server would have stored and enqueued an authentic request.
    assert figures["controls"] == dict.fromkeys(tamper_requests.PROVIDERS, 202)
    assert figures["rows_after_controls"] == len(tamper_requests.PROVIDERS)
    assert figures["jobs_after_controls"] >= 1
    for provider in tamper_requests.PROVIDERS:
        categories = figures["providers"][provider]["categories"]
        assert set(categories) == set(tamper_requests.APPLIES[provider])
        assert all(c["sent"] > 0 for c in categories.values()), (provider, categories)
    # The v1a-only downgrade was refused for its signature, not for something incidental.
    downgrade = figures["providers"]["standard"]["categories"]["wrong_scheme"]
    assert downgrade["reasons"] == {"bad_signature": downgrade["sent"]}
    # Stale and future requests were refused for their timestamps.
    for provider in tamper_requests.TIMED:
        categories = figures["providers"][provider]["categories"]
        stale, future = categories["stale_timestamp"], categories["future_timestamp"]
        assert stale["reasons"] == {"timestamp_too_old": stale["sent"]}
        assert future["reasons"] == {"timestamp_in_future": future["sent"]}


# A fixed number of inputs per target (not a time budget): its time follows the
# machine's speed. 120 s was enough on a quiet machine and not on one at a third of it.
@pytest.mark.timeout(480)
async def test_fuzzing_finds_no_uncaught_exception() -> None:
    figures = await fuzz.run(**fuzz.QUICK)
    assert not failed(figures), (failed(figures), figures)
    assert fuzz.report(figures)

    requested = fuzz.QUICK["inputs_per_target"]
    assert set(figures["targets"]) == set(fuzz.TARGETS)
    for name, target in figures["targets"].items():
        # libFuzzer may run one unit past -runs (an empty input it adds to the corpus).
        assert requested <= target["inputs_run"] <= requested + 1, (name, target)
        assert target["uncaught_exceptions"] == 0, (name, target["error"])
        assert target["crash_files"] == [], name
        # Coverage-guided: the fuzzer saw code under ingest/ and kept inputs that reach it.
        assert target["coverage"] > 0, name
        assert target["corpus"] > 0, name
    assert requested * len(fuzz.TARGETS) <= figures["total_inputs"]
