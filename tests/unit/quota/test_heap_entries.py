"""The packed heap entries of `CandidateIndex._blocked_at` (`_entry`, `_unpack`).

The wake-up heaps used to hold tuples (-threshold, token, seq, kind); they now hold one int per
entry. The engine relies on two facts: the ints order exactly as the tuples did (the heap pops
the same entries in the same order, and `_wake_blocked` stops at the same threshold), and the
fields come back unchanged. Thresholds may be negative (a floor entry below the min), seq is
negative for a hopeless leaf's own entry (-node - 1), kind is 0-3.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.quota.candidates import _ENTRY_SHIFT, _entry, _unpack

thresholds = st.integers(min_value=-(10**30), max_value=10**30)
tokens = st.integers(min_value=0, max_value=2**63)
seqs = st.integers(min_value=-(2**40), max_value=2**60)
kinds = st.integers(min_value=0, max_value=3)
fields = st.tuples(thresholds, tokens, seqs, kinds)


@pytest.mark.parametrize(
    ("threshold", "token", "seq", "kind"),
    [
        (0, 0, 0, 0),
        (-5, 1, 3, 1),  # a floor entry below the min
        (7 * 10**9, 12, -1112, 2),  # a hopeless leaf's entry (seq = -node - 1)
        (10**25, 2**63, 2**60, 3),
        (-(10**25), 0, -(2**40), 0),
    ],
)
def test_round_trip(threshold: int, token: int, seq: int, kind: int) -> None:
    assert _unpack(_entry(threshold, token, seq, kind)) == (token, seq, kind)
    # The top part is -threshold: what the wake loop compares against.
    assert _entry(threshold, token, seq, kind) >> _ENTRY_SHIFT == -threshold


@given(fields)
def test_fields_come_back(entry: tuple[int, int, int, int]) -> None:
    threshold, token, seq, kind = entry
    assert _unpack(_entry(threshold, token, seq, kind)) == (token, seq, kind)


@given(fields, fields)
def test_ints_order_as_the_tuples(
    a: tuple[int, int, int, int], b: tuple[int, int, int, int]
) -> None:
    ta = (-a[0], a[1], a[2], a[3])
    tb = (-b[0], b[1], b[2], b[3])
    assert (_entry(*a) < _entry(*b)) == (ta < tb)
    assert (_entry(*a) == _entry(*b)) == (ta == tb)


@given(fields, st.integers(min_value=-(10**30), max_value=10**30))
def test_wake_limit(entry: tuple[int, int, int, int], used: int) -> None:
    """`_wake_blocked` pops while entry < (1 - used) << shift, i.e. while threshold >= used."""
    limit = (1 - used) << _ENTRY_SHIFT
    assert (_entry(*entry) < limit) == (entry[0] >= used)
