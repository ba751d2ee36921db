"""Render takes the admission stage's decisions as input and returns the final manifest
(render/decisions.py): what each decision changes, per kind, and that no decision changes
nothing."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from launch_agent.model import labels as L
from launch_agent.quota import PodSet as Request
from launch_agent.quota.requests import STAMP, QuotaStamp
from launch_agent.render.decisions import (
    NO_DECISIONS,
    Admission,
    NotAdmitted,
    can_suspend,
    default_kueue_queue,
)
from launch_agent.render.kinds import PodSet
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.runtime.admission.quota import stamp_annotation
from launch_agent.runtime.admission.slots import MaxJobs
from tests.unit.render.helpers import EXAMPLES, make_item, make_spec

G = 10**9


def example(name: str) -> Any:
    spec, _ = load_queue_spec((EXAMPLES / name).read_text())
    return spec


def test_no_decisions_render_what_the_spec_renders() -> None:
    spec = example("job.yaml")
    item = make_item()
    plain = render(spec, copy.deepcopy(item), None, RenderSettings()).workload
    same = render(spec, item, None, RenderSettings(), decisions=NO_DECISIONS).workload
    assert plain == same
    assert "suspend" not in plain["spec"]
    assert L.KUEUE_QUEUE_NAME not in plain["metadata"]["labels"]
    assert MaxJobs(1).admit("x", "q", spec, {}) is NO_DECISIONS


@pytest.mark.parametrize(
    ("name", "suspended"),
    [("job.yaml", True), ("leaderworkerset.yaml", None), ("rayjob.yaml", True)],
)
def test_a_kueue_queue_labels_the_run_and_suspends_kinds_kueue_unsuspends(
    name: str, suspended: bool | None
) -> None:
    spec = example(name)
    decisions = Admission(kueue_queue="team-lq")
    workload = render(spec, make_item(), None, RenderSettings(), decisions=decisions).workload
    assert workload["metadata"]["labels"][L.KUEUE_QUEUE_NAME] == "team-lq"
    # Kueue's LeaderWorkerSet integration reads the label only: it has no suspend field.
    assert workload["spec"].get("suspend") is suspended


def test_the_default_local_queue_is_only_for_specs_that_name_none_and_kinds_kueue_queues() -> None:
    assert default_kueue_queue(example("job.yaml"), "team-lq") == "team-lq"
    assert default_kueue_queue(example("job-kueue.yaml"), "team-lq") == (
        example("job-kueue.yaml").kueue_queue_name
    )
    assert default_kueue_queue(example("volcano-job.yaml"), "team-lq") is None
    assert default_kueue_queue(example("job.yaml"), None) is None


def test_suspended_runs_carry_annotations_computed_from_their_final_pod_sets() -> None:
    spec = make_spec(overridable=["spec.template.spec.containers[*].resources"])
    item = make_item(
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "main", "resources": {"requests": {"cpu": "3"}}}]
                    }
                }
            }
        }
    )
    seen: list[list[PodSet]] = []

    def annotate(sets: list[PodSet]) -> dict[str, str]:
        seen.append(sets)
        return {"example.com/pods": str(len(sets))}

    decisions = Admission(suspended=True, pod_set_annotations=annotate).annotated(
        {"example.com/run-spec": "{}"}
    )
    workload = render(spec, item, None, RenderSettings(), decisions=decisions).workload
    assert workload["spec"]["suspend"] is True
    annotations = workload["metadata"]["annotations"]
    assert annotations["example.com/pods"] == "1"
    assert annotations["example.com/run-spec"] == "{}"
    # The submitter's override is in the pod sets the decision saw (the quota request).
    [(count, template)] = seen[0]
    assert count == 1
    assert template["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"


def test_the_quota_stamp_is_the_request_of_the_pod_sets_or_a_refusal() -> None:
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    stamp = stamp_annotation("queue spec 's'", "a.1", 3, Fraction(5), [(2, pod)])
    assert QuotaStamp.load(stamp[STAMP]) == QuotaStamp(
        "a.1", 3, Fraction(5), (Request(2, {"cpu": 2 * G}),)
    )
    bad = {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}
    with pytest.raises(NotAdmitted) as caught:
        stamp_annotation("queue spec 's'", "a.1", 3, Fraction(5), [(1, bad)])
    assert caught.value.reason == "quota"
    assert caught.value.message.startswith(
        "queue spec 's': cannot compute the run's quota request: "
    )


def test_kinds_without_a_suspend_field_cannot_be_held_back() -> None:
    assert can_suspend(example("job.yaml")) is None
    assert "has no suspend field" in str(can_suspend(example("leaderworkerset.yaml")))
    assert "has no suspend field" in str(can_suspend(example("volcano-job.yaml")))
