"""Kueue Workload → the run's admission state and the W&B warning (launch_agent.tracking.kueue)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.tracking.kueue import (
    KueueState,
    KueueStatus,
    Owner,
    describe,
    owner_of,
    workload_status,
)

T0, T1 = "2026-11-30T01:00:00Z", "2026-11-30T01:05:00Z"
PENDING_MSG = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
    " default-flavor, 3 more needed"
)
PREEMPT_MSG = (
    "Preempted to accommodate a workload (UID: u-1) due to prioritization in the ClusterQueue"
)


def cond(
    kind: str, status: bool, reason: str = "", message: str = "", at: str = T0
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def workload(*conditions: dict[str, Any], cq: str | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-r1-abcde",
            "namespace": "team-a",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "r1",
                    "uid": "u-job",
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": "lq-a", "podSets": []},
        "status": {"conditions": list(conditions), **status},
    }
    if cq:
        body["status"]["admission"] = {"clusterQueue": cq, "podSetAssignments": []}
    return body


ADMITTED = (
    cond("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
    cond("Admitted", True, "Admitted", "The workload is admitted"),
)


@pytest.mark.parametrize(
    ("obj", "state", "cq", "reason", "warning"),
    [
        pytest.param(workload(), KueueState.PENDING, None, "", None, id="no-status-yet"),
        pytest.param(
            workload(cond("QuotaReserved", False, "Pending", PENDING_MSG)),
            KueueState.PENDING,
            None,
            "Pending",
            f"waiting for Kueue: LocalQueue team-a/lq-a: {PENDING_MSG}",
            id="pending",
        ),
        pytest.param(
            workload(cond("QuotaReserved", False, "Inadmissible", "LocalQueue lq-a doesn't exist")),
            KueueState.INADMISSIBLE,
            None,
            "Inadmissible",
            "Kueue cannot admit this run: LocalQueue lq-a doesn't exist. Create LocalQueue lq-a"
            " in namespace team-a (pointing at a ClusterQueue), or name an existing one in the"
            " queue spec's spec.kueue.queueName or quota.kueue.default_local_queue",
            id="missing-local-queue",
        ),
        pytest.param(
            workload(*ADMITTED, cq="cq-a"),
            KueueState.ADMITTED,
            "cq-a",
            "Admitted",
            "admitted by Kueue: LocalQueue team-a/lq-a (ClusterQueue cq-a)",
            id="admitted",
        ),
        pytest.param(
            workload(
                cond("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cq-a"),
                cq="cq-a",
                admissionChecks=[
                    {"name": "prov", "state": "Pending", "message": "", "lastTransitionTime": T0},
                    {"name": "ok", "state": "Ready", "message": "", "lastTransitionTime": T0},
                ],
            ),
            KueueState.CHECKS,
            "cq-a",
            "AdmissionChecks",
            "waiting for Kueue: quota reserved in LocalQueue team-a/lq-a (ClusterQueue cq-a),"
            " admission checks pending: prov",
            id="admission-checks",
        ),
        pytest.param(
            workload(
                cond("QuotaReserved", False, "Pending", PREEMPT_MSG, T1),
                cond("Admitted", False, "NoReservation", "", T1),
                cond("Evicted", True, "Preempted", PREEMPT_MSG, T1),
                cond("Preempted", True, "InClusterQueue", PREEMPT_MSG, T1),
            ),
            KueueState.EVICTED,
            None,
            "InClusterQueue",
            f"evicted by Kueue (InClusterQueue: {PREEMPT_MSG}); the run is suspended and waits"
            " in LocalQueue team-a/lq-a to be admitted again",
            id="preempted",
        ),
        pytest.param(
            workload(
                cond("Evicted", True, "Deactivated", "The workload is deactivated", T1),
                *ADMITTED,
            ),
            # Deactivated is final until an admin re-activates it (issue 14).
            KueueState.DEACTIVATED,
            None,
            "Deactivated",
            "Kueue deactivated the workload (Deactivated: The workload is deactivated); it will"
            " not be admitted again in LocalQueue team-a/lq-a unless an admin sets spec.active:"
            " true on its Workload",
            id="deactivated-after-admission",
        ),
        pytest.param(
            workload(
                cond("Evicted", True, "Preempted", PREEMPT_MSG, T0),
                cond(
                    "QuotaReserved",
                    True,
                    "QuotaReserved",
                    "Quota reserved in ClusterQueue cq-a",
                    T1,
                ),
                cond("Admitted", True, "Admitted", "The workload is admitted", T1),
                cq="cq-a",
            ),
            KueueState.ADMITTED,
            "cq-a",
            "Admitted",
            "admitted by Kueue: LocalQueue team-a/lq-a (ClusterQueue cq-a)",
            id="readmitted-after-eviction",
        ),
        pytest.param(
            workload(
                *ADMITTED,
                cond("Finished", True, "Succeeded", "Job finished successfully"),
                cq="cq-a",
            ),
            KueueState.FINISHED,
            "cq-a",
            "Succeeded",
            None,
            id="finished",
        ),
    ],
)
def test_workload_states(
    obj: dict[str, Any], state: KueueState, cq: str | None, reason: str, warning: str | None
) -> None:
    status = workload_status(obj)
    assert (status.state, status.cluster_queue, status.reason) == (state, cq, reason)
    assert (status.namespace, status.local_queue) == ("team-a", "lq-a")
    assert describe(status) == warning


@pytest.mark.parametrize(
    ("state", "waiting"),
    [
        (KueueState.PENDING, True),
        (KueueState.CHECKS, True),
        (KueueState.INADMISSIBLE, True),
        (KueueState.EVICTED, True),
        (KueueState.ADMITTED, False),
        (KueueState.FINISHED, False),
    ],
)
def test_which_states_wait_for_admission(state: KueueState, waiting: bool) -> None:
    assert state.waiting is waiting


def test_owner_is_the_controller_reference() -> None:
    assert owner_of(workload()) == Owner("team-a", "Job", "r1", "u-job")
    orphan = workload()
    orphan["metadata"]["ownerReferences"][0]["controller"] = False
    assert owner_of(orphan) is None
    assert owner_of({"metadata": "junk"}) is None


def test_a_leaderworkersets_workload_is_owned_without_a_controller_reference() -> None:
    """kueue `leaderworkerset_reconciler.go` (`constructWorkload`): `SetOwnerReference` (no
    controller) and the LWS's uid in the `kueue.x-k8s.io/job-uid` label."""
    group = workload()
    group["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u-cm"},
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "r1",
            "uid": "u-lws",
            "blockOwnerDeletion": True,
        },
    ]
    group["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "u-lws"}
    assert owner_of(group) == Owner("team-a", "LeaderWorkerSet", "r1", "u-lws")
    group["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "u-something-else"}
    assert owner_of(group) is None


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["metadata", "spec", "status", "kind"]), junk, max_size=4))
def test_malformed_workloads_never_crash(obj: dict[str, Any]) -> None:
    status = workload_status(obj)
    assert isinstance(status, KueueStatus)
    describe(status)
    owner_of(obj)
