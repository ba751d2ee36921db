"""Items the agent cannot run fail with a precise message; the agent goes on with the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import BASIC_SPEC, Env, pytorch_spec, run_spec, until

PYTORCH_SPEC = pytorch_spec(overridable=["overrides.args"])

CASES: list[tuple[str, str, dict[str, Any], str, list[str]]] = [
    # (id, queue, runSpec changes, stage, message fragments)
    ("no-entity", "q1", {"entity": None}, "agent", ["runSpec.entity", "is required"]),
    (
        "args-not-list",
        "q1",
        {"overrides": {"args": "--lr 1"}},
        "agent",
        ["runSpec.overrides.args", "list of strings"],
    ),
    ("other-resource", "q1", {"resource": "sagemaker"}, "agent", ["only runs 'kubernetes'"]),
    (
        "forbidden-override",
        "q1",
        {
            "resource_args": {
                "kubernetes": {
                    "spec": {"template": {"spec": {"hostNetwork": True}}},
                }
            }
        },
        "agent",
        ["queue spec 'basic' refused this run", "hostNetwork"],
    ),
    (
        "needs-build",
        "q1",
        {"docker": None, "job": "ent/proj/job-train:v1"},
        "build",
        ["needs an image build", "no builder is configured"],
    ),
    (
        "namespace-not-served",
        "q-ns",
        {},
        "agent",
        ["targets namespace 'elsewhere', which this agent does not serve (namespaces: default)"],
    ),
    (
        "kind-not-installed",
        "q-ddp",
        {},
        "agent",
        ["PyTorchJob (kubeflow.org/v1) is not installed", "Kubeflow training operator"],
    ),
]


@pytest.mark.parametrize(
    ("queue", "changes", "stage", "fragments"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_bad_item_fails_and_the_agent_keeps_going(
    env: Env, queue: str, changes: dict[str, Any], stage: str, fragments: list[str]
) -> None:
    (Path(env.specs_dir) / "ddp.yaml").write_text(PYTORCH_SPEC)
    other = BASIC_SPEC.replace("name: basic", "name: other").replace("[q1]", "[q-ns]")
    (Path(env.specs_dir) / "other.yaml").write_text(
        other.replace("namespace: default", "namespace: elsewhere")
    )
    for name in ("q-ddp", "q-ns"):
        env.state.add_queue(name)
    spec = run_spec("bad1")
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    bad = env.push(spec, queue=queue)
    good = env.push(run_spec("good1"))
    # A queue without a spec is refused at start-up (test_spec_reload.py); one whose spec is
    # removed later fails its items there too.
    config = env.config(queues=["q1", "q-ddp", "q-ns"])
    async with env.running(env.agent(config)):
        await until(lambda: bad.state is ItemState.FAILED, message="bad item failed")
        assert bad.failure is not None
        assert bad.failure.stage == stage
        for fragment in fragments:
            assert fragment in bad.failure.message, bad.failure.message
        await until(lambda: good.state is ItemState.CLAIMED, message="next item claimed")
        names = [j["metadata"]["name"] for j in env.jobs()]
        assert len(names) == 1, names
