"""Image pulls as the kubelet retries them: transient errors recover, permanent ones fail fast.

The sandbox's kubelet alternates ErrImagePull and ImagePullBackOff on its image back-off
(10 s doubling), as `pkg/kubelet/images/image_manager.go` does. A registry's 429 clears after a
few pulls and the run goes on; a manifest that does not exist never will, and the run fails at
once with the runtime's words instead of waiting out the grace period.
"""

from __future__ import annotations

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until


async def test_transient_pull_errors_recover(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=tp", "pullerror pulls=3 after=5s")
    item = env.push(run_spec("tp"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        for _ in range(12):
            env.advance(10)
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None, item.failure


async def test_permanent_pull_error_fails_fast(env: Env) -> None:
    missing = (
        'failed to pull and unpack image "registry.example/train:1": failed to resolve reference'
        ' "registry.example/train:1": registry.example/train:1: not found'
    )
    env.cluster.script("launch-agent.io/run-id=pp", "imagepullbackoff after=1s")
    item = env.push(run_spec("pp"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(15)
        await until(lambda: item.state is ItemState.FAILED, message="failed fast")
        assert item.failure is not None
        assert "not found" in item.failure.message, item.failure.message
        assert missing.rsplit(": ", maxsplit=1)[-1] in item.failure.message
