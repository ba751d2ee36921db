"""Issue 26 through the agent: a queue whose config lives in W&B, as the admin wrote it (with
the `metadata.name: wandb-job-${run_id}` and macro labels of W&B's examples), and a spec with
that template. An ordinary launch (W&B's server merges the config into the item) is created,
for every kind, named by the agent."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import CRDS, EXAMPLE_SPECS, Env, run_spec, until
from tests.e2e.test_kinds import KINDS

NAMED: dict[str, Any] = {
    "name": "wandb-job-${run_id}",
    "labels": {"wandb_entity": "${entity_name}", "wandb_project": "${project_name}"},
}


def with_name(file: str) -> tuple[str, dict[str, Any]]:
    """The example spec's text with W&B's metadata in its template, and that template."""
    data = yaml.safe_load((EXAMPLE_SPECS / file).read_text())
    template = data["spec"]["template"]
    manifest = template["kubernetes"] if set(template) == {"kubernetes"} else template
    meta = manifest.setdefault("metadata", {})
    meta["name"] = NAMED["name"]
    meta.setdefault("labels", {}).update(NAMED["labels"])
    return yaml.safe_dump(data, sort_keys=False), template


@pytest.fixture
async def echo_env(env: Env) -> Env:
    await env.kube.load_crds_from(CRDS)
    for ns in ("ml-training", "wandb"):
        env.kube.objects.create(
            "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ""
        )
    for file, queue, _, _ in KINDS:
        text, template = with_name(file)
        (env.specs_dir / file).write_text(text)
        config = {"resource": "kubernetes", "resource_args": {"kubernetes": template}}
        env.state.add_queue(queue, config=config)
    return env


@pytest.mark.parametrize(("file", "queue", "namespace", "plural"), KINDS, ids=[k[0] for k in KINDS])
async def test_a_launch_on_a_queue_with_wandbs_config_is_created(
    echo_env: Env, file: str, queue: str, namespace: str, plural: str
) -> None:
    env = echo_env
    spec = run_spec(f"e-{queue}")
    spec.pop("overrides")
    item = env.push(spec, queue=queue)
    assert item.run_spec["resource_args"]["kubernetes"]  # W&B merged its config in
    config = env.config(
        queues=[k[1] for k in KINDS], namespaces=["default", "ml-training", "wandb"]
    )
    async with env.running(env.agent(config)):
        await until(lambda: item.state in (ItemState.CLAIMED, ItemState.FAILED), message="claimed")
        assert item.failure is None, item.failure
        (created,) = env.kube.objects.list(plural, namespace=namespace)
        spec_name = yaml.safe_load((EXAMPLE_SPECS / file).read_text())["metadata"]["name"]
        meta = created["metadata"]
        assert meta["name"].startswith(spec_name) and "generateName" not in meta, meta["name"]
        assert meta["labels"]["wandb_entity"] == "ent"  # the admin's labels, macros filled
        assert meta["labels"]["wandb_project"] == "proj"
