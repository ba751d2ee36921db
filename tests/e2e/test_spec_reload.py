"""Queue specs reload from a ConfigMap-style directory: valid edits apply, invalid ones are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launch_agent.runtime.startup import StartupError
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import BASIC_SPEC, Env, run_spec, until


def _publish(directory: Path, version: str, files: dict[str, str]) -> None:
    """What the kubelet does for a ConfigMap volume: a new directory, then swap `..data`."""
    target = directory / f"..{version}"
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text)
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    tmp = directory / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, directory / "..data")


async def test_valid_edit_applies_and_invalid_edit_keeps_the_previous_version(
    env: Env, tmp_path: Path
) -> None:
    specs = tmp_path / "configmap"
    specs.mkdir()
    # Every configured queue needs a spec at start-up; q2's is then removed.
    q2_spec = BASIC_SPEC.replace("name: basic", "name: second").replace("[q1]", "[q2]")
    _publish(specs, "v0", {"basic.yaml": BASIC_SPEC, "second.yaml": q2_spec})
    env.state.add_queue("q2")
    config = env.config(queues=["q1", "q2"], queue_specs_dir=str(specs))
    async with env.running(env.agent(config)) as agent:
        _publish(specs, "v1", {"basic.yaml": BASIC_SPEC})
        assert agent.specs is not None
        await until(lambda: agent.specs.for_queue("q2") is None, message="q2 removed")  # type: ignore[union-attr]
        first = env.push(run_spec("v1"), queue="q2")
        await until(lambda: first.state is ItemState.FAILED, message="q2 not served yet")
        assert first.failure is not None
        assert "no queue spec serves queue 'q2'" in first.failure.message

        # A valid edit: the spec now serves q2 as well; no restart.
        _publish(specs, "v2", {"basic.yaml": BASIC_SPEC.replace("[q1]", "[q1, q2]")})
        assert agent.specs is not None
        await until(lambda: agent.specs.for_queue("q2") is not None, message="reload")  # type: ignore[union-attr]
        second = env.push(run_spec("v2"), queue="q2")
        await until(lambda: second.state is ItemState.CLAIMED, message="q2 served")

        # An invalid edit is refused: metric set, previous version (serving q1 and q2) kept.
        _publish(specs, "v3", {"basic.yaml": BASIC_SPEC.replace("kind: Job", "kind: [")})
        sample = ("launch_agent_queue_spec_invalid", {"file": "basic.yaml"})
        await until(lambda: agent.metrics.registry.get_sample_value(*sample) == 1, message="metric")
        third = env.push(run_spec("v3"), queue="q2")
        await until(lambda: third.state is ItemState.CLAIMED, message="old version in force")

        # Fixing the file clears the metric.
        _publish(specs, "v4", {"basic.yaml": BASIC_SPEC})
        await until(lambda: agent.metrics.registry.get_sample_value(*sample) == 0, message="fixed")
        await until(lambda: agent.specs.for_queue("q2") is None, message="q2 no longer served")  # type: ignore[union-attr]


async def test_a_configured_queue_without_a_spec_is_refused_at_start_up(env: Env) -> None:
    env.state.add_queue("q2")
    config = env.config(queues=["q1", "q2"])
    with pytest.raises(StartupError) as caught:
        async with env.running(env.agent(config)):
            pass
    message = str(caught.value)
    assert "serves queue(s) 'q2'" in message and "'q1'" not in message, message
    assert "launch-agent migrate" in message, message
