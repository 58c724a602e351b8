"""Event ids: ULIDs in Crockford base32, sorting by time of minting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store import ids


def reference(value: int) -> str:
    """The encoding by its definition: 26 groups of 5 bits, most significant first."""
    return "".join(ids._ALPHABET[(value >> (5 * (25 - i))) & 31] for i in range(26))


@given(st.integers(min_value=0, max_value=2**130 - 1))
def test_encoding_matches_the_definition(value: int) -> None:
    assert ids._encode(value) == reference(value)


@given(st.integers(min_value=0, max_value=2**48 - 1))
def test_an_id_carries_its_millisecond_and_sorts_by_it(ms: int) -> None:
    minted = ids.new_id(ms)
    assert ids.is_id(minted)
    assert ids.id_time_ms(minted) == ms
    assert ids.id_floor(ms) <= minted < ids.id_floor(ms + 1)


def test_ids_of_one_millisecond_differ() -> None:
    minted = {ids.new_id(1_700_000_000_000) for _ in range(10_000)}
    assert len(minted) == 10_000
