"""`render.migrate`: a W&B queue config becomes a queue spec the agent loads, nothing granted."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.migrate import NotAQueueConfig, migrate, spec_name
from launch_agent.render.spec_load import load_queue_spec

JOB_FORM: dict[str, Any] = {
    "metadata": {"labels": {"team": "vision"}},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "${image_uri}",
                        "resources": {"limits": {"nvidia.com/gpu": "{{gpus}}"}},
                    }
                ]
            }
        },
        "parallelism": "{{workers}}",
    },
}
VARIABLES = {
    "gpus": {"type": "integer", "minimum": 0, "maximum": 8, "default": 1},
    "workers": {"type": "integer", "minimum": 1},
}

CR_FORM: dict[str, Any] = {
    "kubernetes": {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                },
                "Worker": {
                    "replicas": "{{workers}}",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                },
            }
        },
    }
}


def loads(text: str) -> Any:
    return load_queue_spec(text)[0]


def test_job_form_from_the_wandb_api_loads_with_variables_overridable() -> None:
    m = migrate("GPU Queue", {"resource_args": {"kubernetes": JOB_FORM}}, VARIABLES)
    spec = loads(m.text("test"))
    assert spec.name == "gpu-queue" and spec.queues == ("GPU Queue",)
    assert spec.overridable[:2] == (
        'spec.template.spec.containers[main].resources.limits["nvidia.com/gpu"]',
        "spec.parallelism",
    )
    assert "overrides.run_config" in spec.overridable
    # One variable's leaf keeps its type: W&B fills `"{{gpus}}"` with the integer.
    container = spec.template["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec.template["spec"]["parallelism"] == 1  # `minimum` when there is no default
    assert m.findings == ()


def test_custom_resource_form_pasted_from_the_ui_keeps_its_form_and_namespace() -> None:
    m = migrate("ddp", CR_FORM, {"workers": {"type": "integer", "default": 2}})
    assert set(m.document["spec"]["template"]) == {"kubernetes"}
    assert m.document["spec"]["namespace"] == "ml"
    spec = loads(m.text("test"))
    assert spec.kind == "PyTorchJob"
    assert spec.overridable[0] == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert spec.template["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_security_exceptions_are_listed_not_granted() -> None:
    config = {
        "spec": {
            "template": {
                "spec": {
                    "serviceAccountName": "trainer",
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "securityContext": {
                                "privileged": True,
                                "capabilities": {"add": ["SYS_ADMIN"]},
                            },
                            "envFrom": [{"secretRef": {"name": "hf-token"}}],
                        }
                    ],
                    "volumes": [{"name": "d", "hostPath": {"path": "/data"}}],
                }
            }
        }
    }
    m = migrate("q", config)
    grants = {f.grant for f in m.findings}
    assert {
        "privileged: true",
        'capabilities: ["SYS_ADMIN"]',
        "hostNetwork: true",
        'hostPaths: ["/data"]',
        'serviceAccountName: "trainer"',
        'secrets: ["hf-token"]',
    } <= grants
    paths = {f.path for f in m.findings}
    assert "spec.template.spec.template.spec.containers[main].securityContext.privileged" in paths
    text = m.text("test")
    assert "security" not in yaml.safe_load(text)["spec"]  # only as comments
    assert "#   privileged: true" in text
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(text)
    assert any("privileged" in p.path for p in exc.value.problems)


def test_variable_without_default_is_a_decision() -> None:
    m = migrate("q", JOB_FORM, {"gpus": {"type": "integer"}, "workers": {"default": 2}})
    assert any("'gpus' has no default" in d for d in m.decisions)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"resource": "sagemaker", "resource_args": {"sagemaker": {}}}, "only kubernetes"),
        ({"resource_args": {"kubernetes": {}}}, "empty"),
        ({"image": "x"}, "neither W&B form"),
    ],
)
def test_not_a_queue_config(config: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotAQueueConfig, match=reason):
        migrate("q", config)


@pytest.mark.parametrize(
    ("queue", "name"), [("GPU Queue #1", "gpu-queue-1"), ("8x-a100", "q-8x-a100"), ("q", "q")]
)
def test_spec_names_are_dns_labels(queue: str, name: str) -> None:
    assert spec_name(queue) == name
