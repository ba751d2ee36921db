"""The TTL hold's patches (`runtime/ttl_hold.py`), applied the way the API server applies a merge
patch (RFC 7386) to a Job, and the annotation read back only when it is a plain count."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.runtime.ttl_hold import (
    TTL_HELD,
    hold_patch,
    merged,
    release_patch,
    ttl_held_on,
    ttl_of,
)
from launch_agent.sandbox.kube.patch import merge_patch

REPORTED = "launch-agent.io/reported"


def job(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "annotations": {"a": "b"}}, "spec": dict(spec)}


def test_a_hold_takes_the_ttl_off_and_the_release_puts_it_back() -> None:
    before = job(ttlSecondsAfterFinished=3600, backoffLimit=0)
    held = merge_patch(before, hold_patch(3600))
    assert "ttlSecondsAfterFinished" not in held["spec"] and held["spec"]["backoffLimit"] == 0
    assert ttl_held_on(held) == 3600 and ttl_of(held) is None
    marked = {"metadata": {"annotations": {REPORTED: "failed"}}}
    released = merge_patch(held, merged(marked, release_patch(3600)))
    assert released["spec"] == before["spec"]
    assert released["metadata"]["annotations"] == {"a": "b", REPORTED: "failed"}
    assert ttl_held_on(released) is None


@pytest.mark.parametrize(
    "value",
    ["", "-1", "1e9", "²", "٣", " 60", "60\n", "0x10", "9" * 10, None, 60, True],
)
def test_only_a_plain_count_of_seconds_is_taken_back(value: Any) -> None:
    """Anyone who may patch the Job may write the annotation; what is not a count is ignored
    (the Job then keeps whatever TTL it has, and the agent's clean-up proceeds as usual)."""
    assert ttl_held_on({"metadata": {"annotations": {TTL_HELD: value}}}) is None


@pytest.mark.parametrize("value", [None, "60", -1, True, 1.5])
def test_a_ttl_that_is_not_a_count_is_not_held(value: Any) -> None:
    assert ttl_of(job(ttlSecondsAfterFinished=value)) is None


def test_merged_patches_keep_both_sides() -> None:
    a = {"metadata": {"annotations": {"x": "1"}}}
    b = {"metadata": {"annotations": {"y": None}}, "spec": {"t": 1}}
    assert merged(a, b) == {"metadata": {"annotations": {"x": "1", "y": None}}, "spec": {"t": 1}}
    assert a == {"metadata": {"annotations": {"x": "1"}}}  # not changed in place
