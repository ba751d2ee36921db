"""Every pod that will exist is restricted: templates by identity, operator-generated pods,
pods defined elsewhere, pod specs outside the kind's templates."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput, QueueSpec
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import build_queue_spec

from .helpers import EXAMPLES, make_item, make_spec, restricted_violations

SETTINGS = RenderSettings()


LAYER = "runSpec.resource_args.kubernetes."


def _example(file: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
    data["spec"].update(changes)
    return data


def _spec(data: dict[str, Any]) -> QueueSpec:
    return build_queue_spec(copy.deepcopy(data))[0]


def _privileged_task(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "template": {
            "spec": {
                "containers": [
                    {"name": "main", "image": "x", "securityContext": {"privileged": True}}
                ]
            }
        },
    }


def test_volcano_tasks_with_the_same_path_label_are_both_enforced() -> None:
    # A task named "2" and an unnamed task at index 2 share the label `tasks[2]`: the merge
    # appends the unnamed one (there is no base item at index 2), and enforcement used to
    # skip the second template with a path it had already seen.
    data = _example("volcano-job.yaml", overridable=["**"])
    data["spec"]["template"]["spec"]["tasks"][0]["name"] = "2"
    spec = _spec(data)
    unnamed = _privileged_task("x")
    del unnamed["name"]
    layer = {"spec": {"tasks": [{"name": "2"}, {"name": "worker"}, unnamed]}}
    obj = render(spec, make_item(layer), None, SETTINGS).workload
    tasks = obj["spec"]["tasks"]
    assert len(tasks) == 3
    for task in tasks:
        assert restricted_violations(task["template"]) == [], task.get("name")


def test_duplicate_task_names_are_told_apart_by_index() -> None:
    data = _example("volcano-job.yaml")
    data["spec"]["template"]["spec"]["tasks"] = [
        _privileged_task("worker"),
        _privileged_task("worker"),
    ]
    with pytest.raises(InvalidInput) as exc:
        _spec(data)
    paths = sorted(p.path for p in exc.value.problems)
    assert paths == [
        "spec.template.spec.tasks[0].template.spec.containers[main].securityContext.privileged",
        "spec.template.spec.tasks[1].template.spec.containers[main].securityContext.privileged",
    ]


def test_rayjob_default_submitter_pod_is_written_out_and_restricted() -> None:
    spec = _spec(_example("rayjob.yaml"))
    obj = render(spec, make_item(), None, SETTINGS).workload
    submitter = obj["spec"]["submitterPodTemplate"]
    (container,) = submitter["spec"]["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == "registry.example.com/img:1"  # the head's, like KubeRay
    assert submitter["spec"]["restartPolicy"] == "Never"
    assert restricted_violations(submitter) == []
    # The submitter needs no W&B credentials: it only runs `ray job submit`.
    assert "env" not in container


@pytest.mark.parametrize("mode", ["HTTPMode", "InteractiveMode"])
def test_rayjob_modes_without_a_submitter_pod_get_none(mode: str) -> None:
    data = _example("rayjob.yaml")
    data["spec"]["template"]["spec"]["submissionMode"] = mode
    obj = render(_spec(data), make_item(), None, SETTINGS).workload
    assert "submitterPodTemplate" not in obj["spec"]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("submissionMode", "SidecarMode", "SidecarMode is not allowed"),
        ("submissionMode", "PodMode", "is not one of"),
        ("clusterSelector", {"ray.io/cluster": "shared"}, "RayCluster whose pods"),
    ],
)
def test_rayjob_pods_the_agent_cannot_reach_are_refused_at_load(
    field: str, value: Any, reason: str
) -> None:
    data = _example("rayjob.yaml")
    data["spec"]["template"]["spec"][field] = value
    with pytest.raises(InvalidInput) as exc:
        _spec(data)
    (problem,) = exc.value.problems
    assert problem.path == f"spec.template.spec.{field}"
    assert reason in problem.reason


@pytest.mark.parametrize(
    ("field", "value"),
    [("submissionMode", "SidecarMode"), ("clusterSelector", {"ray.io/cluster": "shared"})],
)
def test_rayjob_submitter_layer_cannot_move_the_pods_either(field: str, value: Any) -> None:
    spec = _spec(_example("rayjob.yaml", overridable=["**"]))
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item({"spec": {field: value}}), None, SETTINGS)
    # The override policy refuses it with the submitter's path when it sees it first.
    assert [p.path.removeprefix(LAYER) for p in exc.value.problems] == [f"spec.{field}"]


def test_rayjob_autoscaler_container_is_restricted() -> None:
    spec = _spec(_example("rayjob.yaml", overridable=["**"]))
    layer = {
        "spec": {
            "rayClusterSpec": {
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "securityContext": {
                        "privileged": True,
                        "capabilities": {"add": ["SYS_ADMIN"]},
                        "runAsUser": 0,
                    }
                },
            }
        }
    }
    out = render(spec, make_item(layer), None, SETTINGS)
    sc = out.workload["spec"]["rayClusterSpec"]["autoscalerOptions"]["securityContext"]
    # Restricted on its own (container-level runAsNonRoot and seccomp), not through the pod.
    assert sc == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {w.path for w in out.warnings} >= {
        "spec.rayClusterSpec.autoscalerOptions.securityContext.privileged",
        "spec.rayClusterSpec.autoscalerOptions.securityContext.capabilities.add[SYS_ADMIN]",
        "spec.rayClusterSpec.autoscalerOptions.securityContext.runAsUser",
    }


def test_rayjob_autoscaler_without_options_gets_a_restricted_context() -> None:
    data = _example("rayjob.yaml")
    data["spec"]["template"]["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    obj = render(_spec(data), make_item(), None, SETTINGS).workload
    options = obj["spec"]["rayClusterSpec"]["autoscalerOptions"]
    assert options["securityContext"]["allowPrivilegeEscalation"] is False
    assert options["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_trainjob_runtime_must_be_named_by_the_admin() -> None:
    data = _example("trainjob.yaml")
    del data["spec"]["security"]
    with pytest.raises(InvalidInput) as exc:
        _spec(data)
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.runtimeRef"
    assert "security.trainingRuntimes" in problem.reason
    assert render(_spec(_example("trainjob.yaml")), make_item(), None, SETTINGS).workload


def test_trainjob_layer_cannot_switch_to_an_unlisted_runtime() -> None:
    spec = _spec(_example("trainjob.yaml", overridable=["**"]))
    layer = {"spec": {"runtimeRef": {"name": "someone-elses"}}}
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == [LAYER + "spec.runtimeRef"]


def _custom(template_spec: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "launch-agent/v1",
        "kind": "QueueSpec",
        "metadata": {"name": "custom"},
        "spec": {
            "queues": ["q"],
            "namespace": "ns",
            "podTemplatePaths": paths,
            "template": {"apiVersion": "example.com/v1", "kind": "Trainer", "spec": template_spec},
        },
    }


def _tmpl(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "i", **container}]}}


def test_custom_kind_replica_outside_its_declared_paths_is_refused() -> None:
    data = _custom(
        {"replicas": {"main": {"template": _tmpl()}}, "sidecar": {"template": _tmpl()}},
        ["spec.replicas.*.template"],
    )
    with pytest.raises(InvalidInput) as exc:
        _spec(data)
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.sidecar.template.spec"
    assert "declare its path in spec.podTemplatePaths" in problem.reason


def test_custom_kind_replica_added_by_the_submitter_is_refused() -> None:
    data = _custom({"replicas": {"main": {"template": _tmpl()}}}, ["spec.replicas.main.template"])
    data["spec"]["overridable"] = ["**"]
    spec = _spec(data)
    layer = {
        "spec": {"replicas": {"evil": {"template": _tmpl(securityContext={"privileged": True})}}}
    }
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == ["spec.replicas.evil.template.spec"]


def test_pod_spec_hidden_in_a_builtin_kind_is_refused() -> None:
    spec = make_spec(overridable=["**"])
    layer = {"spec": {"podFailurePolicy": {"containers": [{"name": "x", "image": "y"}]}}}
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    (problem,) = exc.value.problems
    assert problem.path == "spec.podFailurePolicy"
    assert "Job (batch/v1) has pod templates only at spec.template" in problem.reason


def test_nested_job_template_namespace_from_the_submitter_is_refused() -> None:
    spec = _spec(_example("jobset-gke.yaml", overridable=["**"]))
    name = spec.template["spec"]["replicatedJobs"][0]["name"]
    layer = {
        "spec": {"replicatedJobs": [{"name": name, "template": {"metadata": {"namespace": "x"}}}]}
    }
    with pytest.raises(InvalidInput) as exc:
        render(spec, make_item(layer), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == [
        f"{LAYER}spec.replicatedJobs[{name}].template.metadata.namespace"
    ]


def test_rayjob_history_server_collector_is_refused() -> None:
    data = _example("rayjob.yaml")
    rcs = data["spec"]["template"]["spec"]["rayClusterSpec"]
    rcs["historyServerOptions"] = {"collectorOptions": {"image": "collector:1"}}
    with pytest.raises(InvalidInput) as exc:
        _spec(data)
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.rayClusterSpec.historyServerOptions"
    assert "cannot be restricted" in problem.reason
