"""The record of built digests (pure): parse, encode, add, prune; and reading Kaniko's digest.

Properties over whole classes of input: any ConfigMap data whatever (a hostile or broken
record) parses without error and trusts only well-formed `sha256:` digests under tag keys;
adding builds never grows it past `max_entries` or the ConfigMap's 1 MiB, always keeps the tag
just built, and round-trips through its encoding.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.model.config import ImageTrustConfig
from launch_agent.model.digest_record import (
    PER_TAG,
    Entry,
    encode_record,
    parse_record,
    trusted,
    with_build,
)
from launch_agent.tracking.build_pods import pushed_digest

HEX = "0123456789abcdef"
tags = st.text(HEX, min_size=20, max_size=20)
digests = st.text(HEX, min_size=64, max_size=64).map(lambda h: f"sha256:{h}")
D1, D2, D3, D4 = (f"sha256:{c * 64}" for c in "1234")
TAG = "a" * 20
CONFIGMAP_LIMIT = 1024 * 1024


def test_a_build_is_recorded_newest_first_and_kept_per_tag() -> None:
    entries: dict[str, Entry] = {}
    for at, digest in enumerate((D1, D2, D3, D4), start=100):
        entries = with_build(entries, TAG, digest, at, 10)
    assert entries[TAG] == Entry(103, (D4, D3, D2)[:PER_TAG])
    assert trusted(entries, TAG, D4) and not trusted(entries, TAG, D1)
    assert not trusted(entries, "b" * 20, D4)  # a digest is trusted for its own tag only
    assert encode_record(entries) == {TAG: f"103 {D4} {D3} {D2}"}


def test_the_oldest_builds_are_pruned_first() -> None:
    entries: dict[str, Entry] = {}
    for n in range(5):
        entries = with_build(entries, f"{n:020x}", D1, 1000 + n, 3)
    assert sorted(entries) == [f"{n:020x}" for n in (2, 3, 4)]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x sha256:" + "1" * 64,  # no time
        "12 sha256:" + "1" * 63,  # short digest
        "12 SHA256:" + "1" * 64,
        "12 sha256:" + "G" * 64,
        "12 md5:abc",
        "1" * 16 + " sha256:" + "1" * 64,  # a time too long to be one
        " ",
    ],
)
def test_a_malformed_value_is_not_trusted(value: str) -> None:
    assert parse_record({TAG: value}) == {}


@pytest.mark.parametrize("key", ["", "A" * 20, "short", "../x", "a" * 65, "sha256:" + "a" * 20])
def test_a_key_that_is_not_a_tag_is_ignored(key: str) -> None:
    assert parse_record({key: f"1 {D1}"}) == {}


@given(
    st.dictionaries(
        st.one_of(st.text(), tags, st.integers()),
        st.one_of(st.text(), st.integers(), st.none(), st.lists(st.text())),
    )
)
def test_any_data_parses_and_trusts_only_well_formed_digests(data: dict[Any, Any]) -> None:
    entries = parse_record(data)
    for tag, entry in entries.items():
        assert len(tag) >= 8 and set(tag) <= set(HEX)
        assert 1 <= len(entry.digests) <= PER_TAG
        assert all(d.startswith("sha256:") and len(d) == 71 for d in entry.digests)


@given(st.lists(st.tuples(tags, digests, st.integers(0, 2**40)), max_size=60))
def test_adding_builds_stays_bounded_keeps_the_newest_and_round_trips(
    builds: list[tuple[str, str, int]],
) -> None:
    max_entries = 25
    entries: dict[str, Entry] = {}
    for tag, digest, now in builds:
        entries = with_build(entries, tag, digest, now, max_entries)
        assert trusted(entries, tag, digest)  # what was just built is always on it
        assert len(entries) <= max_entries
    assert parse_record(encode_record(entries)) == entries


def test_the_largest_record_fits_a_configmap() -> None:
    biggest = ImageTrustConfig.model_fields["max_record_entries"].metadata
    most = max(m.le for m in biggest if hasattr(m, "le"))
    entries = {
        f"{n:020x}": Entry(2**40, tuple(f"sha256:{n:064x}"[:-1] + c for c in "abc"))
        for n in range(most)
    }
    data = encode_record(entries)
    assert len(json.dumps(data)) < CONFIGMAP_LIMIT


def _pod(name: str, created: str, code: int, message: str | None) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code}
    if message is not None:
        terminated["message"] = message
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "status": {"containerStatuses": [{"name": "kaniko", "state": {"terminated": terminated}}]},
    }


@pytest.mark.parametrize(
    ("pods", "digest"),
    [
        ([_pod("p", "2024-01-01T00:00:00Z", 0, f"{D1}\n")], D1),
        ([_pod("p", "2024-01-01T00:00:00Z", 0, D1.upper().replace("SHA256", "sha256"))], D1),
        ([_pod("p", "2024-01-01T00:00:00Z", 1, D1)], None),  # the executor failed
        ([_pod("p", "2024-01-01T00:00:00Z", 0, None)], None),  # no --digest-file
        ([_pod("p", "2024-01-01T00:00:00Z", 0, f"{D1} {D2}")], None),  # not one digest
        ([_pod("p", "2024-01-01T00:00:00Z", 0, "pwned")], None),
        (
            [
                _pod("old", "2024-01-01T00:00:00Z", 0, D1),
                _pod("new", "2024-01-02T00:00:00Z", 0, D2),
            ],
            D2,
        ),
        ([{"status": {"containerStatuses": [{"name": "other", "state": {}}]}}], None),
        ([{"status": "nonsense"}], None),
    ],
)
def test_the_pushed_digest_is_the_executors_termination_message(
    pods: list[dict[str, Any]], digest: str | None
) -> None:
    assert pushed_digest(pods, "kaniko") == digest
