"""A rendered batch/v1 Job fails itself on a disrupted pod, so the disruption outlives the pod
(render/disruption_rule.py); the admin's own podFailurePolicy and the API server's rules for
one are respected."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.render.disruption_rule import MAX_RULES
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings

from .helpers import job_template, make_item, make_spec

SETTINGS = RenderSettings(agent_name="agent-a", base_url="https://wandb.example.com")
OURS = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
EXIT_42 = {
    "action": "FailJob",
    "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
}


def _job(template: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = render(make_spec(template), make_item(), None, SETTINGS).workload
    return out


def _with(**job_spec: Any) -> dict[str, Any]:
    template = job_template(image="${image_uri}")
    template["spec"].update(job_spec)
    return template


def test_a_job_gets_the_disruption_rule() -> None:
    job = _job(job_template(image="${image_uri}"))
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["podFailurePolicy"] == {"rules": [OURS]}


def test_the_admins_rules_come_first() -> None:
    job = _job(_with(podFailurePolicy={"rules": [EXIT_42]}))
    assert job["spec"]["podFailurePolicy"] == {"rules": [EXIT_42, OURS]}


@pytest.mark.parametrize("action", ["Ignore", "Count", "FailJob"])
def test_an_admin_rule_about_disruptions_is_left_alone(action: str) -> None:
    theirs = {"action": action, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    job = _job(_with(podFailurePolicy={"rules": [EXIT_42, theirs]}))
    assert job["spec"]["podFailurePolicy"] == {"rules": [EXIT_42, theirs]}


def test_a_full_policy_is_left_alone() -> None:
    rules = [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [i]}}
        for i in range(1, MAX_RULES + 1)
    ]
    job = _job(_with(podFailurePolicy={"rules": rules}))
    assert job["spec"]["podFailurePolicy"]["rules"] == rules


def test_restart_on_failure_gets_no_policy() -> None:
    # validation.go: only restartPolicy Never is supported when podFailurePolicy is specified.
    template = job_template(image="${image_uri}")
    template["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert "podFailurePolicy" not in _job(template)["spec"]


def test_replacing_terminating_pods_gets_no_policy() -> None:
    # validatePodReplacementPolicy: with a podFailurePolicy only `Failed` is allowed.
    job = _job(_with(podReplacementPolicy="TerminatingOrFailed"))
    assert "podFailurePolicy" not in job["spec"]
    job = _job(_with(podReplacementPolicy="Failed"))
    assert job["spec"]["podFailurePolicy"] == {"rules": [OURS]}


def test_other_kinds_get_no_policy() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"containers": [{"name": "main", "image": "${image_uri}"}]}
                            }
                        }
                    },
                }
            ]
        },
    }
    out = _job(jobset)
    assert "podFailurePolicy" not in out["spec"]["replicatedJobs"][0]["template"]["spec"]
