"""Warnings are reported once per run, keyed by what went wrong and where."""

from __future__ import annotations

from datetime import timedelta

import pytest

from launch_agent.model.run_state import Diagnosis, Reason, Severity
from launch_agent.tracking import new_warnings, pod_warnings
from tests.unit.tracking.shapes import NOW, container_status, pod, unschedulable_pod


def warn(
    reason: Reason, container: str | None = "main", pod_name: str = "p1", code: int | None = None
) -> Diagnosis:
    return Diagnosis(
        reason,
        f"{reason} in {container}",
        Severity.WARNING,
        pod=pod_name,
        container=container,
        exit_code=code,
    )


OOM = warn(Reason.OOM_KILLED, code=137)
OOM_RETRY = warn(Reason.OOM_KILLED, pod_name="p2", code=137)
OOM_SIDECAR = warn(Reason.OOM_KILLED, container="sidecar", code=137)
EXIT1 = warn(Reason.EXIT_CODE, code=1)
EXIT2 = warn(Reason.EXIT_CODE, code=2)
TERMINAL = Diagnosis(Reason.IMAGE_PULL, "pull", Severity.TERMINAL, container="main")


@pytest.mark.parametrize(
    ("candidates", "reported", "fresh"),
    [
        ([OOM], frozenset(), [OOM]),
        ([OOM], frozenset({OOM.key}), []),
        ([OOM, OOM_RETRY], frozenset(), [OOM]),  # same OOM in the retried pod: once
        ([OOM, OOM_SIDECAR], frozenset(), [OOM, OOM_SIDECAR]),  # another container: twice
        ([EXIT1, EXIT2], frozenset(), [EXIT1, EXIT2]),  # another exit code: twice
        ([None, TERMINAL, EXIT1], frozenset(), [EXIT1]),  # terminal goes another way
    ],
    ids=["new", "already", "retried pod", "other container", "other exit code", "skip terminal"],
)
def test_new_warnings(
    candidates: list[Diagnosis | None], reported: frozenset[str], fresh: list[Diagnosis]
) -> None:
    got, keys = new_warnings(candidates, reported)
    assert list(got) == fresh
    assert keys == reported | {d.key for d in fresh}
    again, same = new_warnings(candidates, keys)
    assert again == ()
    assert same == keys


def test_reported_keys_are_bounded() -> None:
    many = [warn(Reason.EXIT_CODE, code=c) for c in range(1, 100)]
    got, keys = new_warnings(many, frozenset(), limit=5)
    assert len(got) == 5
    assert len(keys) == 5
    more, keys2 = new_warnings([warn(Reason.OOM_KILLED)], keys, limit=5)
    assert more == ()
    assert keys2 == keys


def test_pod_warnings_lists_every_distinct_problem() -> None:
    pods = [
        pod(
            "a",
            "Running",
            container_status("main", last_terminated=("OOMKilled", 137), running=True),
            container_status("sidecar", last_terminated=("Error", 2), running=True),
        ),
        unschedulable_pod(timedelta(minutes=1)),
    ]
    got = pod_warnings(pods, NOW)
    assert [d.reason for d in got] == [Reason.OOM_KILLED, Reason.EXIT_CODE, Reason.UNSCHEDULABLE]
    assert all(not d.terminal for d in got)
