"""A standby that takes over judges a custom resource deleted while it was not watching.

The leader deletes a custom resource as soon as it ended (`Finisher._clean_up`). A standby
whose watch was down through the end and the deletion sees the workload only as missing from
its relist, with the last status it had cached (running). It used to take that for "deleted
before it finished" once it led, and failed a run that had succeeded (found by
`launch-agent bench chaos`). The only evidence left after the deletion is W&B's run state.

The standby (a real process) is paused with SIGSTOP while the leader finishes and deletes the
PyTorchJob; its watch of PyTorchJobs is cut and the event log compacted meanwhile, so on
SIGCONT it reconnects, gets 410 Expired and relists, exactly as after a long disconnection.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import CRDS, EXAMPLE_SPECS, Env, run_spec, until
from tests.e2e.test_leader_failover import ELECTION, holder
from tests.e2e.test_process import START_TIMEOUT, agent_process, write_config

QUEUE = "pytorch-ddp"
NAMESPACE = "ml-training"
PLURAL = "pytorchjobs"


@pytest.fixture
async def crd_env(env: Env) -> Env:
    await env.kube.load_crds_from(CRDS)
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, ""
    )
    shutil.copy(EXAMPLE_SPECS / "pytorchjob.yaml", env.specs_dir / "pytorchjob.yaml")
    env.state.add_queue(QUEUE)
    return env


def state_of(item: RunQueueItem) -> ItemState:
    return item.state  # read afresh: the sandbox changes it while the test awaits


def workloads(env: Env) -> list[dict[str, Any]]:
    return env.kube.objects.list(PLURAL, namespace=NAMESPACE)


@pytest.mark.parametrize(
    ("wandb_state", "failed"),
    [
        # The run called run.finish(): it succeeded, whatever the standby last saw.
        ("finished", False),
        # W&B lost the run's process: the deletion is reported, with what W&B said.
        ("crashed", True),
    ],
)
async def test_a_standby_judges_a_deletion_it_did_not_see_from_wandb(
    crd_env: Env, tmp_path: Path, wandb_state: str, failed: bool
) -> None:
    env = crd_env
    run = f"sd-{wandb_state}"
    common: dict[str, object] = {"queues": [QUEUE], "namespaces": [NAMESPACE]}
    config_a = write_config(
        env, tmp_path / "a.yaml", leader_election={**ELECTION, "identity": "agent-a"}, **common
    )
    config_b = write_config(
        env, tmp_path / "b.yaml", leader_election={**ELECTION, "identity": "agent-b"}, **common
    )
    async with agent_process(env, config_a) as a:
        await until(lambda: holder(env) == "agent-a", within=START_TIMEOUT, message="a leads")
        async with agent_process(env, config_b) as b:
            await until(
                lambda: any("standby: agent-a leads" in line for line in b.lines),
                within=START_TIMEOUT,
                message="b waits as a standby",
            )
            spec = run_spec(run)
            spec.pop("overrides")
            item = env.push(spec, queue=QUEUE)
            await until(
                lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack"
            )
            await until(
                lambda: any("adopted" in line and run in line for line in b.lines),
                within=START_TIMEOUT,
                message="b tracks the PyTorchJob while standing by",
            )
            b.process.send_signal(signal.SIGSTOP)
            try:
                assert env.kube.drop_watches(PLURAL) >= 2  # a's and b's
                env.state.set_run_state("ent", "proj", run, "running")
                for _ in range(20):
                    env.advance(30)
                    if not workloads(env):
                        break
                await until(
                    lambda: not workloads(env),
                    within=START_TIMEOUT,
                    message="a saw the PyTorchJob end and deleted it",
                )
                assert state_of(item) is ItemState.CLAIMED and item.failure is None
                env.state.set_run_state("ent", "proj", run, wandb_state)
                # b's resourceVersion is gone from the event log: it must relist.
                env.kube.compact(PLURAL)
                a.process.kill()
                await a.process.wait()
            finally:
                b.process.send_signal(signal.SIGCONT)
            await until(
                lambda: holder(env) == "agent-b", within=START_TIMEOUT, message="b took over"
            )
            # Either verdict ends b's handling of the run: the item failed or the warning.
            await until(
                lambda: (
                    item.state is ItemState.FAILED
                    or any("found deleted by a relist" in line for line in b.lines)
                ),
                within=START_TIMEOUT,
                message="b judged the deletion",
            )
    final = env.state.items[item.id]  # not `item`: mypy keeps the narrowing from above
    if failed:
        assert final.state is ItemState.FAILED
        assert final.failure is not None
        assert "deleted before it finished" in final.failure.message
        assert "W&B says the run crashed" in final.failure.message
    else:
        assert final.state is ItemState.CLAIMED, final.failure
        assert final.failure is None
