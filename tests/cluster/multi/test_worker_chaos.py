"""`bench chaos --cluster real`, small (real tier only): 8 runs over MultiKueue Jobs and JobSets,
2 agent replicas with leader election on the manager, 2 SIGKILLs aimed at W&B phases and one
worker lost past `workerLostTimeout` and back. The harness (`launch_agent/demo/chaos_real.py`)
runs on the session's clusters here rather than starting its own, with its verdict from the
W&B server's records and the manager's objects: nothing lost, duplicated, orphaned or reported
twice.

Named to run last in the MultiKueue session: it stops workers, and a test after it that needs
runs on both workers (test_dispatch's spread) failed in two of three runs even once both
MultiKueueClusters were Active again (not explained yet)."""

from __future__ import annotations

from pathlib import Path

from launch_agent.demo.chaos_real import QUEUES, RealChaos, RealWorld, prepare_namespace
from tests.cluster.multi.conftest import API_KEY_SECRET
from tests.cluster.multi.multiworld import MultiWorld


async def test_agents_and_a_worker_killed_lose_duplicate_orphan_and_double_report_nothing(
    mworld: MultiWorld, tmp_path: Path
) -> None:
    control = mworld.control
    assert control is not None
    for queue in QUEUES:
        mworld.state.add_queue(queue)
    await prepare_namespace(
        mworld.http,
        dict(mworld.workers),
        mworld.namespace,
        api_key=mworld.wandb.api_key,
        api_key_secret=API_KEY_SECRET,
    )
    world = RealWorld(
        mworld.wandb,
        mworld.http,
        mworld.kubeconfig,
        dict(mworld.workers),
        dict(mworld.worker_kubeconfigs),
        mworld.namespace,
        control.apiserver,
        API_KEY_SECRET,
    )
    said: list[str] = []
    harness = RealChaos(
        world,
        tmp_path,
        seed=3,
        runs=8,
        replicas=2,
        kills=2,
        worker_kills=1,
        worker_down_seconds=25,
        deadline=200,
        say=said.append,
    )
    result = await harness.run()
    problems = "\n".join([*result.problems, *said])
    assert result.kills == 2, problems
    assert result.worker_kills == 1, problems
    assert set(result.outcomes) == {"succeed", "fail"}, problems
    verdict = {
        "lost": result.lost,
        "duplicated": result.duplicated,
        "orphaned": result.orphaned,
        "double_reported": result.double_reported,
    }
    assert verdict == {"lost": 0, "duplicated": 0, "orphaned": 0, "double_reported": 0}, problems
