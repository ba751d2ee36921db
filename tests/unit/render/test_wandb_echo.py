"""Issue 26: the queue config W&B's server merges into every item is never an override.

Items are built here as W&B's server builds them (`sandbox.wandb.model`: the queue config's
`{{variables}}` filled, merged under the push's `resource_args`, `${macros}` left for the
agent), from the template exactly as the admin wrote it, including the `metadata.name`,
`generateName`, labels and annotations the agent replaces with its own.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.migrate import migrate
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.sandbox.wandb.model import deep_merge, fill_templates

from .helpers import EXAMPLES, make_item

SETTINGS = RenderSettings()
FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
LAYER = "runSpec.resource_args.kubernetes"

# What W&B's docs put in a queue config's metadata (the Volcano and Kubeflow examples).
AGENT_SET: dict[str, Any] = {
    "name": "wandb-job-${run_id}",
    "labels": {
        "wandb_entity": "${entity_name}",
        "wandb_project": "${project_name}",
        "launch-agent.io/run-id": "${run_id}",
        "kueue.x-k8s.io/queue-name": "admins-own",
    },
    "annotations": {"launch-agent.io/queue-spec": "written-by-the-admin"},
}


def manifest_of(template: dict[str, Any]) -> dict[str, Any]:
    inner = template.get("kubernetes")
    return inner if set(template) == {"kubernetes"} and isinstance(inner, dict) else template


def with_metadata(file: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The example spec's text with `metadata` added to its template, and that template."""
    data = yaml.safe_load((EXAMPLES / file).read_text())
    template = data["spec"]["template"]
    meta = manifest_of(template).setdefault("metadata", {})
    for key, value in metadata.items():
        if isinstance(value, dict):
            meta.setdefault(key, {}).update(value)
        else:
            meta[key] = value
    return yaml.safe_dump(data, sort_keys=False), copy.deepcopy(template)


def pushed(
    queue_config: dict[str, Any],
    push_args: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The item W&B's server builds on a push to a queue with this `kubernetes` config."""
    config = fill_templates(queue_config, values or {})
    return make_item(deep_merge(config, push_args or {}))


@pytest.mark.parametrize("file", FILES)
@pytest.mark.parametrize("name_key", ["name", "generateName"])
def test_the_echoed_template_of_every_example_is_no_override(file: str, name_key: str) -> None:
    metadata = dict(AGENT_SET)
    metadata[name_key] = metadata.pop("name")
    text, template = with_metadata(file, metadata)
    spec, _ = load_queue_spec(text)
    out = render(spec, pushed(template), None, SETTINGS).workload
    meta = out["metadata"]
    assert meta["name"].startswith(spec.name) and "generateName" not in meta
    assert "${" not in yaml.safe_dump(meta)
    # The agent's own values win over what the admin (and so the echo) wrote.
    assert meta["labels"]["launch-agent.io/run-id"] != "${run_id}"
    assert meta["annotations"]["launch-agent.io/queue-spec"] == spec.name


@pytest.mark.parametrize("file", FILES)
def test_a_changed_name_is_still_an_override(file: str) -> None:
    text, template = with_metadata(file, {"name": "wandb-job-${run_id}"})
    spec, _ = load_queue_spec(text)
    wrapped = set(template) == {"kubernetes"}
    change = {"metadata": {"name": "mine"}}
    with pytest.raises(InvalidInput) as exc:
        render(
            spec, pushed(template, {"kubernetes": change} if wrapped else change), None, SETTINGS
        )
    paths = [p.path for p in exc.value.problems]
    assert paths == [f"{LAYER}.metadata.name"], paths


# W&B's Volcano tutorial's queue config (docs.wandb.ai/tutorials/volcano), in short, and a
# Kubeflow PyTorchJob in W&B's custom-resource form, each with a template variable.
VOLCANO: dict[str, Any] = {
    "kind": "Job",
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "metadata": {
        "name": "wandb-job-${run_id}",
        "labels": {"wandb_entity": "${entity_name}", "wandb_project": "${project_name}"},
    },
    "spec": {
        "minAvailable": 0,
        "schedulerName": "volcano",
        "plugins": {"pytorch": ["--master=master", "--worker=worker", "--port=23456"]},
        "tasks": [
            {
                "name": "master",
                "replicas": 1,
                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "master", "image": "${image_uri}"},
                        ],
                        "restartPolicy": "OnFailure",
                    }
                },
            },
            {
                "name": "worker",
                "replicas": "{{workers}}",
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "worker", "image": "${image_uri}", "workingDir": "/home"},
                        ],
                        "restartPolicy": "OnFailure",
                    }
                },
            },
        ],
    },
}
PYTORCHJOB: dict[str, Any] = {
    "kubernetes": {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "wandb-job-${run_id}", "generateName": "wandb-"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                },
                "Worker": {
                    "replicas": "{{workers}}",
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                },
            }
        },
    }
}
WORKERS = {"workers": {"type": "integer", "default": 2, "minimum": 1}}


@pytest.mark.parametrize("config", [VOLCANO, PYTORCHJOB], ids=["volcano", "pytorchjob"])
def test_a_ui_launch_on_a_migrated_queue_renders(config: dict[str, Any]) -> None:
    migrated = migrate("q", {"resource_args": {"kubernetes": config}}, WORKERS, namespace="ns")
    spec, _ = load_queue_spec(migrated.text("a test"))
    out = render(spec, pushed(config, values={"workers": 3}), None, SETTINGS).workload
    assert out["metadata"]["name"].startswith("q-")
    assert "generateName" not in out["metadata"]
    found = [t.get("replicas") for t in out["spec"].get("tasks", [])] or [
        r["replicas"] for r in out["spec"]["pytorchReplicaSpecs"].values()
    ]
    assert found == [1, 3]  # the filled variable is what the migrated spec lets submitters set


def test_a_namespace_migrate_overrode_is_refused_in_the_echo_and_migrate_says_so() -> None:
    # The one echoed value the spec cannot hold: a template namespace must be spec.namespace.
    config = {**VOLCANO, "metadata": {**VOLCANO["metadata"], "namespace": "theirs"}}
    migrated = migrate("q", {"resource_args": {"kubernetes": config}}, WORKERS, namespace="ns")
    (decision,) = [d for d in migrated.decisions if d.startswith("namespace:")]
    assert "change the queue's config in W&B to 'ns'" in decision
    spec, _ = load_queue_spec(migrated.text("a test"))
    with pytest.raises(InvalidInput) as exc:
        render(spec, pushed(config, values={"workers": 3}), None, SETTINGS)
    assert [p.path for p in exc.value.problems] == [f"{LAYER}.namespace"]
