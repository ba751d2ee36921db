"""`KindInfo.run_targets` and the suspend flag: the kinds table is the one place that says where
a kind keeps its run and its suspend flag, and the pipeline, the override policy and the
admission decisions all go through it (render/kinds.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.kinds import KINDS, lookup
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

from .helpers import EXAMPLES, make_item

SETTINGS = RenderSettings()
FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def _mappings(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _mappings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _mappings(value)


def _has_wandb_env(node: dict[str, Any]) -> bool:
    env = node.get("env")
    return isinstance(env, list) and any(
        isinstance(e, dict) and e.get("name") == "WANDB_LAUNCH_TRACE_ID" for e in env
    )


@pytest.mark.parametrize("file", FILES)
def test_the_run_is_written_exactly_where_the_kind_row_says(file: str) -> None:
    spec, _ = load_queue_spec((EXAMPLES / file).read_text())
    workload = render(spec, make_item(), None, SETTINGS).workload
    info = lookup(workload["apiVersion"], workload["kind"])
    assert info is not None
    targets = [t for t in info.run_targets(workload) if t is not None]
    assert targets, file
    written = {id(m) for m in _mappings(workload) if _has_wandb_env(m)}
    # The same objects, not equal copies: nothing else in the manifest got the W&B environment.
    assert written <= {id(t) for t in targets}
    unwritten = [t for t in targets if id(t) not in written]
    if info.materialise is None:
        assert not unwritten
    else:
        # KubeRay's default submitter pod, written out for enforcement after the run was
        # written (stage 5): KubeRay itself gives it no W&B environment either.
        assert len(unwritten) <= 1
    assert all(t.get("image") for t in targets if id(t) in written)


def test_a_template_without_containers_reads_as_the_empty_container_render_adds() -> None:
    info = lookup("batch/v1", "Job")
    assert info is not None
    assert info.run_targets({"spec": {"template": {"spec": {}}}}) == [{}]
    trainjob = lookup("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert trainjob is not None
    assert trainjob.run_targets({"spec": {}}) == [{}]


@pytest.mark.parametrize("info", KINDS, ids=[k.label for k in KINDS])
def test_every_kind_suspends_through_its_row_or_says_why_not(info: Any) -> None:
    manifest: dict[str, Any] = {"apiVersion": info.api_version, "kind": info.kind}
    if info.suspend_path is None:
        assert info.suspend_refusal is not None and info.label in info.suspend_refusal
        with pytest.raises(InvalidInput, match="has no suspend field"):
            info.set_suspended(manifest, True)
        assert not info.is_suspended(manifest)
        return
    assert info.suspend_refusal is None
    assert not info.is_suspended(manifest)
    info.set_suspended(manifest, True)
    assert info.is_suspended(manifest)
    node: Any = manifest
    for key in info.suspend_path:
        node = node[key]
    assert node is True
    info.set_suspended(manifest, False)
    assert not info.is_suspended(manifest)
