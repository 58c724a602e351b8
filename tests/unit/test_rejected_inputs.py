"""What of a refused request's signature is kept (``ingest.rejected.scheme_inputs``):
a signed timestamp, its skew and the names of a signature header's entries; nothing
of a header that may hold a secret in any shape (a shared token)."""

from __future__ import annotations

from hookd.providers import PROVIDERS
from ingest.rejected import scheme_inputs, signature_header_names


def test_a_header_of_entries_gives_its_timestamp_skew_and_entry_names() -> None:
    stripe = PROVIDERS["stripe"]
    headers = {"stripe-signature": ["t=100,v1=abcdef0123,v0=fedcba"]}
    assert scheme_inputs(stripe, headers, None, 160.5) == {
        "timestamp": 100,
        "skew_s": 60.5,
        "entries": ["t", "v0", "v1"],
    }
    assert signature_header_names(stripe) == ("stripe-signature",)


def test_a_shared_token_keeps_nothing_of_its_value() -> None:
    gitlab = PROVIDERS["gitlab"]
    token = "secretpart=rest,more=x"
    assert scheme_inputs(gitlab, {"x-gitlab-token": [token]}, None, 0.0) == {}
    assert signature_header_names(gitlab) == ("x-gitlab-token",)
