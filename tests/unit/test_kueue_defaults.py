"""Which LocalQueue a queue spec's runs go to under `quota.mode: kueue`
(`runtime.kueue_watch.kueue_queue_of` / `local_queue_of`, from `render.decisions`), and the
label and suspension render gives a run for it."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.config import QuotaConfig
from launch_agent.model.queue_spec import CustomKind, QueueSpec
from launch_agent.runtime.kueue_watch import kueue_queue_of, local_queue_of, slim_workload

JOB = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {}}}}
VOLCANO = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"tasks": []}}
CUSTOM = {"apiVersion": "example.com/v1", "kind": "Trainer", "spec": {}}


def spec(template: dict[str, Any], queue: str | None = None, **extra: Any) -> QueueSpec:
    return QueueSpec(
        name="s",
        queues=("q1",),
        namespace="team-a",
        template=template,
        kueue_queue_name=queue,
        **extra,
    )


def quota(mode: str = "kueue", default: str | None = "team-lq") -> QuotaConfig:
    return QuotaConfig.model_validate({"mode": mode, "kueue": {"default_local_queue": default}})


@pytest.mark.parametrize(
    ("queue_spec", "config", "expected"),
    [
        pytest.param(spec(JOB), quota(), "team-lq", id="default-for-a-job"),
        pytest.param(spec(JOB, "own-lq"), quota(), "own-lq", id="the-spec-wins"),
        pytest.param(spec(JOB), quota(default=None), None, id="no-default"),
        pytest.param(spec(JOB), quota(mode="off"), None, id="not-in-kueue-mode"),
        pytest.param(spec(JOB, "own-lq"), quota(mode="off"), "own-lq", id="explicit-in-any-mode"),
        pytest.param(spec(VOLCANO), quota(), None, id="kind-kueue-cannot-queue"),
        pytest.param(
            spec(CUSTOM, custom_kind=CustomKind(("spec.template",), suspend_path="spec.suspend")),
            quota(),
            "team-lq",
            id="custom-kind-with-suspend",
        ),
        pytest.param(
            spec(CUSTOM, custom_kind=CustomKind(("spec.template",))),
            quota(),
            None,
            id="custom-kind-without-suspend",
        ),
    ],
)
def test_local_queue_of_a_spec(
    queue_spec: QueueSpec, config: QuotaConfig, expected: str | None
) -> None:
    assert kueue_queue_of(queue_spec, config) == expected
    key = local_queue_of(queue_spec, config)
    assert key == (None if expected is None else ("team-a", expected))


def test_the_spec_is_untouched_and_no_spec_has_no_local_queue() -> None:
    original = spec(JOB)
    assert kueue_queue_of(original, quota()) == "team-lq"
    assert original.kueue_queue_name is None
    assert local_queue_of(None, quota()) is None


def test_the_watch_keeps_only_what_it_reads() -> None:
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "managedFields": [{}]},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "template": {"spec": {}}}]},
        "status": {"conditions": []},
    }
    assert slim_workload(obj) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {"queueName": "lq"},
        "status": {"conditions": []},
    }
