"""The sandbox Job controller's `podFailurePolicy` (kubernetes `pkg/controller/job/
pod_failure_policy.go`, `matchPodFailurePolicy`), and the API server's defaulting and
validation of one, against the fixture `diagnose` replays for a disrupted Job whose pod is gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.sandbox.kube.errors import ApiError

from .conftest import job_body

FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "upstream"
    / "job"
    / "pod-failure-policy-disruption-pods-gone.json"
)
ON_DISRUPTION = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}


@pytest.fixture
async def cluster(kube: KubeApiServer) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube) as sim:
        yield sim


def _job(kube: KubeApiServer, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kube.objects.get("jobs", name)
    return found


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
        for c in obj["status"].get("conditions") or []
    }


def _pods(kube: KubeApiServer, job: str) -> list[dict[str, Any]]:
    return kube.objects.list("pods", "default", label_selector=f"job-name={job}")


def _policy(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"rules": list(rules)}


def test_the_api_server_defaults_a_policy_as_kube_apiserver(kube: KubeApiServer) -> None:
    created = kube.objects.create("jobs", job_body("p", podFailurePolicy=_policy(ON_DISRUPTION)))
    assert created["spec"]["podReplacementPolicy"] == "Failed"
    pattern = created["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]
    assert pattern == {"type": "DisruptionTarget", "status": "True"}
    plain = kube.objects.create("jobs", job_body("q"))
    assert plain["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"podReplacementPolicy": "TerminatingOrFailed"}, "spec.podReplacementPolicy"),
        ({"restartPolicy": "OnFailure"}, "spec.template.spec.restartPolicy"),
    ],
)
def test_the_api_server_refuses_what_validation_go_refuses(
    kube: KubeApiServer, spec: dict[str, Any], path: str
) -> None:
    body = job_body("p", podFailurePolicy=_policy(ON_DISRUPTION))
    if "restartPolicy" in spec:
        body["spec"]["template"]["spec"]["restartPolicy"] = spec["restartPolicy"]
    else:
        body["spec"].update(spec)
    with pytest.raises(ApiError) as refused:
        kube.objects.create("jobs", body)
    assert path in str(refused.value.message), refused.value.message


async def test_a_disrupted_pod_fails_the_job_in_the_fixtures_words(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script("run=pre", "preempted after=2s")
    body = job_body("pre", labels={"run": "pre"}, podFailurePolicy=_policy(ON_DISRUPTION))
    kube.objects.create("jobs", body)
    cluster.step()
    [pod] = _pods(kube, "pre")
    cluster.advance(10)
    assert _pods(kube, "pre") == []  # the preempted pod is gone, the Job keeps its record
    job = _job(kube, "pre")
    conds = _conditions(job)
    said = f"Pod default/{pod['metadata']['name']} has condition DisruptionTarget matching"
    said += " FailJob rule at index 0"
    assert conds["FailureTarget"] == ("True", "PodFailurePolicy", said)
    assert conds["Failed"] == ("True", "PodFailurePolicy", said)
    assert job["status"]["failed"] == 1
    # The fixture's Job conditions carry the same words, its pod name aside.
    with FIXTURE.open() as f:
        [fixture_job] = json.load(f)["items"]
    for kind, (status, reason, message) in _conditions(fixture_job).items():
        assert conds[kind][:2] == (status, reason)
        shape = re.sub(r"ml/\S+", "default/NAME", message)
        assert re.sub(r"default/\S+", "default/NAME", conds[kind][2]) == shape


async def test_rules_match_first_to_last(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    exit_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    cluster.script("run=e", "exit code=42 after=2s")
    body = job_body("e", labels={"run": "e"}, podFailurePolicy=_policy(exit_42, ON_DISRUPTION))
    kube.objects.create("jobs", body)
    cluster.step()
    [pod] = _pods(kube, "e")
    cluster.advance(10)
    name = pod["metadata"]["name"]
    assert _conditions(_job(kube, "e"))["Failed"] == (
        "True",
        "PodFailurePolicy",
        f"Container main for pod default/{name} failed with exit code 42 matching FailJob rule"
        " at index 0",
    )


async def test_an_ignored_disruption_is_not_counted_and_the_pod_is_replaced(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    ignore = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    cluster.script("run=i", "preempted after=2s; succeed after=1s")
    kube.objects.create(
        "jobs", job_body("i", labels={"run": "i"}, podFailurePolicy=_policy(ignore))
    )
    cluster.advance(30)
    job = _job(kube, "i")
    assert job["status"].get("failed", 0) == 0
    assert job["status"]["succeeded"] == 1
    assert _conditions(job)["Complete"][0] == "True"


async def test_an_unmatched_failure_counts_towards_the_backoff_limit(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script("run=x", "exit code=1 after=2s")
    body = job_body("x", labels={"run": "x"}, podFailurePolicy=_policy(ON_DISRUPTION))
    kube.objects.create("jobs", body)
    cluster.advance(10)
    assert _conditions(_job(kube, "x"))["Failed"][1] == "BackoffLimitExceeded"


async def test_on_1_30_failed_comes_at_once(kube: KubeApiServer) -> None:
    async with SimulatedCluster(kube, kubernetes_version="1.30") as sim:
        sim.script("run=pre", "preempted after=2s")
        body = job_body("pre", labels={"run": "pre"}, podFailurePolicy=_policy(ON_DISRUPTION))
        kube.objects.create("jobs", body)
        sim.advance(10)
    conds = _conditions(_job(kube, "pre"))
    assert conds["FailureTarget"][1] == conds["Failed"][1] == "PodFailurePolicy"


async def test_a_deleted_pod_never_scheduled_still_ends(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    # A pod counts only once Failed under a policy: one deleted before any kubelet ran it is
    # marked Failed by the pod GC (`gcUnscheduledTerminating`), or the Job would wait forever.
    cluster.script("run=u", "unschedulable")
    body = job_body("u", labels={"run": "u"}, podFailurePolicy=_policy(ON_DISRUPTION))
    kube.objects.create("jobs", body)
    cluster.step()
    [pod] = _pods(kube, "u")
    kube.objects.delete("pods", pod["metadata"]["name"])
    cluster.advance(5)
    assert _pods(kube, "u") == []
    job = _job(kube, "u")
    assert job["status"]["failed"] == 1
    assert _conditions(job)["Failed"][1] == "BackoffLimitExceeded"
