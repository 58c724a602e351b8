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


@given(st.integers(min_value=0, max_value=2**48 - 1), st.integers(min_value=0, max_value=300))
def test_ids_minted_together_are_ids_of_their_millisecond(ms: int, n: int) -> None:
    minted = ids.new_ids(n, ms)
    assert len(minted) == n
    assert all(ids.is_id(m) and ids.id_time_ms(m) == ms for m in minted)


def test_ids_minted_together_differ_and_use_all_their_randomness() -> None:
    minted = ids.new_ids(10_000, 1_700_000_000_000)
    assert len(set(minted)) == 10_000
    # Each id has its own 80 random bits: every character of the random part varies.
    for position in range(10, 26):
        assert len({m[position] for m in minted}) == 32
