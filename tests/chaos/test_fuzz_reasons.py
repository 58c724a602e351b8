"""The fuzz targets judge a refusal by the reason codes hookd documents: their list is
the receiver's own, so a reason a new provider raises is neither undocumented nor
reported by the fuzzer as a crash."""

from __future__ import annotations

from chaos.fuzz_webhooks import SIGNATURE_REASONS as FUZZ_REASONS
from ingest.metrics import SIGNATURE_REASONS


def test_the_fuzzers_reasons_are_the_documented_ones() -> None:
    assert set(SIGNATURE_REASONS) == FUZZ_REASONS
