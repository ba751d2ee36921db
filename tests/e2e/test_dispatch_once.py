"""An item gets one workload, ever, though the ack of the process that created it was lost.

Found by `bench chaos` (kills aimed at the create and ack phases): the leader pops an item (W&B
leases it), creates its workload and is killed before `ackRunQueueItem` reaches W&B. The next
agent adopts the workload; the run ends and, being a custom resource, is deleted; W&B, whose
lease on the item lapsed without an ack, offers the item again, and it was created a second
time (a second JobSet). Here the ack is held in the sandbox W&B server, the process that sent
it SIGKILLed, and the W&B server's clock moved past the lease when the test says so.

The count that matters is the sandbox API server's: the JobSets it ever created (201s).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.runtime.ttl_hold import TTL_HELD
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import CRDS, Env, poll_rounds, run_spec, until
from tests.e2e.test_operator_failures import NS, push, use_spec
from tests.e2e.test_process import START_TIMEOUT, agent_process, write_config
from tests.e2e.test_quota_agent import quota_agent, running, setup
from tests.e2e.test_report_once import PROC_AGENT

QUEUE = "jobset-tpu"


def created(env: Env) -> int:
    """JobSets the API server created (a 409 is no creation)."""
    return sum(1 for r in env.kube.log if r.key == "POST jobsets" and r.status == 201)


def jobsets(env: Env) -> int:
    return len(env.kube.objects.list("jobsets", namespace=NS))


def claims(item: RunQueueItem) -> int:
    return sum(1 for _, state in item.history if state is ItemState.CLAIMED)


def successor(env: Env) -> AgentConfig:
    """An in-process agent with the killed process's name: it adopts its workloads."""
    return env.config(queues=[QUEUE], namespaces=[NS], agent_name=PROC_AGENT)


class WandbClock:
    """The sandbox W&B server's clock, wall time plus what the test moved it on by."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


async def jobset_queue(env: Env) -> None:
    """Queue `jobset-tpu` serves JobSets (deleted when they end), which succeed after 10 s."""
    await env.kube.load_crds_from(CRDS)
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, ""
    )
    use_spec(env, "jobset-gke.yaml", QUEUE)
    for job in ("driver", "workers"):
        env.cluster.script(f"jobset.sigs.k8s.io/replicatedjob-name={job}", "succeed after=10s")


async def created_then_killed_before_the_ack(env: Env, tmp_path: Path) -> RunQueueItem:
    """A JobSet run whose creator is SIGKILLed while its ack is held in the W&B server."""
    await jobset_queue(env)
    item = push(env, "once-ack", QUEUE)
    held = env.wandb.faults.add(FaultRule("ackRunQueueItem", delay=5, status=503, times=1))
    config = write_config(env, tmp_path / "a.yaml", queues=[QUEUE], namespaces=[NS])
    async with agent_process(env, config) as a:
        await until(lambda: held.fired == 1, within=START_TIMEOUT, message="a's ack held")
        a.process.kill()
        await a.process.wait()
    assert created(env) == 1
    assert item.state is ItemState.LEASED, "the ack never reached W&B"
    # The run calls wandb.init, as a real one does (W&B's no-wandb.init check passes).
    env.state.set_run_state("ent", "proj", "once-ack", "running")
    return item


async def test_an_adopted_run_is_acked_while_its_lease_runs_and_never_created_again(
    env: Env, tmp_path: Path
) -> None:
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600  # lapses when the test moves the clock
    item = await created_then_killed_before_the_ack(env, tmp_path)
    async with env.running(env.agent(successor(env))) as b:
        await until(lambda: b.runs.get(item.id) is not None, message="b adopted the JobSet")
        await until(
            lambda: b.runs.get(item.id) is None,
            advance=lambda: env.advance(2),
            within=30,
            message="the run ended and was cleaned up",
        )
        assert jobsets(env) == 0, "a JobSet that ended is deleted"
        assert item.state is ItemState.CLAIMED, item.history
        assert item.associated_run_id == "once-ack"
        clock.shift += 3601  # what would have been the killed process's lease is long over
        await poll_rounds(b, 3)
    assert item.pops == 1, item.history
    assert created(env) == 1
    assert claims(item) == 1 and item.failure is None


async def test_a_server_that_cannot_tell_the_items_state_still_gets_the_ack(
    env: Env, tmp_path: Path
) -> None:
    """`GetRunQueueItem` answered with an error (a server without it): asking again gets the
    same, so the run is neither kept for ever nor cleaned up un-acked while its lease runs."""
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    item = await created_then_killed_before_the_ack(env, tmp_path)
    env.wandb.faults.add(FaultRule("GetRunQueueItem", graphql_error=True, message="unknown"))
    async with env.running(env.agent(successor(env))) as b:
        await until(lambda: b.runs.get(item.id) is not None, message="b adopted the JobSet")
        await until(
            lambda: b.runs.get(item.id) is None,
            advance=lambda: env.advance(2),
            within=30,
            message="the run ended and was cleaned up",
        )
        assert item.state is ItemState.CLAIMED, item.history
        clock.shift += 3601
        await poll_rounds(b, 3)
    assert item.pops == 1 and created(env) == 1 and claims(item) == 1


async def test_a_run_whose_lease_lapsed_keeps_its_workload_until_the_offer_is_acked(
    env: Env, tmp_path: Path
) -> None:
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    item = await created_then_killed_before_the_ack(env, tmp_path)
    clock.shift += 3601  # the lease lapses before anyone could ack: W&B offers the item again
    assert env.state.lapse_leases() == 1 and item.state is ItemState.PENDING
    no_pops = env.wandb.faults.add(FaultRule("popFromRunQueue", status=503))
    async with env.running(env.agent(successor(env))) as b:
        await until(lambda: b.runs.get(item.id) is not None, message="b adopted the JobSet")
        await until(
            # Old code deleted the JobSet; the fix asks W&B for the item's state instead.
            lambda: jobsets(env) == 0 or env.wandb.log.count("GetRunQueueItem") >= 1,
            advance=lambda: env.advance(2),
            within=30,
            message="the run ended",
        )
        env.wandb.faults.remove(no_pops)
        await until(lambda: item.state is ItemState.CLAIMED, message="the offer acked")
        assert created(env) == 1, "the item offered again was created a second time"
        await until(lambda: b.runs.get(item.id) is None, message="cleaned up once acked")
        assert jobsets(env) == 0
        await poll_rounds(b, 3)
    assert item.pops == 2, item.history
    assert created(env) == 1
    assert claims(item) == 1 and item.failure is None


async def test_an_ack_refused_after_a_lost_attempt_is_settled_before_the_clean_up(
    env: Env,
) -> None:
    """`WandbAckUncertain`: the first attempt's connection is cut (it never reached W&B) and the
    retry is refused, the lease having lapsed meanwhile. Counted as acked, the JobSet was
    deleted when it ended and W&B's next offer of the item created it again."""
    await jobset_queue(env)
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    item = push(env, "once-unsure", QUEUE)
    lost = env.wandb.faults.add(FaultRule("ackRunQueueItem", drop=True, times=1))
    no_pops: list[FaultRule] = []

    def lapse_on_the_lost_attempt(key: str, path: str, rule: FaultRule | None) -> None:
        if rule is lost and not no_pops:
            clock.shift += 3601  # the retry finds the lease lapsed
            # The next pop waits until the run ended, as it would behind a slow W&B.
            no_pops.append(env.wandb.faults.add(FaultRule("popFromRunQueue", status=503)))

    env.wandb.faults.observers.append(lapse_on_the_lost_attempt)
    async with env.running(env.agent(successor(env))) as agent:
        await until(
            lambda: no_pops and env.wandb.log.count("field:ackRunQueueItem") >= 2, message="retry"
        )
        assert item.state is ItemState.PENDING, "neither attempt claimed the item"
        env.state.set_run_state("ent", "proj", "once-unsure", "running")
        await until(
            # The code before deleted the JobSet; now W&B is asked for the item's state first.
            lambda: jobsets(env) == 0 or env.wandb.log.count("GetRunQueueItem") >= 1,
            advance=lambda: env.advance(2),
            within=30,
            message="the run ended",
        )
        env.wandb.faults.remove(no_pops[0])
        await until(lambda: item.state is ItemState.CLAIMED, message="the offer acked")
        assert created(env) == 1, "the item offered again was created a second time"
        await until(lambda: agent.runs.get(item.id) is None, message="cleaned up once acked")
        assert jobsets(env) == 0
    assert item.pops == 2 and claims(item) == 1 and item.failure is None


async def test_an_item_offered_again_during_its_create_is_dispatched_once(env: Env) -> None:
    """The quota stall `bench chaos` saw after "acked by another agent (our lease lapsed)".

    The create of a run is held in the API server until W&B offers its item again. A second
    dispatch of the item stamped it again for the quota's ordering (the first ticket was then
    never created nor abandoned, so every later run of the leaf waited behind it), and its ack
    won, so the first dispatch's lost and dropped the run's record: the Job stayed suspended,
    untracked, and so did every Job after it."""
    setup(env, {"a": "a.1"})
    env.cluster.script("launch-agent.io/queue=qa", "succeed after=1000s")
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    first = env.push(run_spec("slow-create"), "qa")
    held = env.kube.faults.add(FaultRule("POST jobs", delay=3, times=1))
    async with env.running(quota_agent(env, queues=["qa"])) as agent:
        await until(lambda: held.fired == 1, message="the create held")
        clock.shift += 3601  # the lease lapses while the create is held
        await until(lambda: first.pops == 2, message="W&B offered the item again")
        second = env.push(run_spec("after-it"), "qa")
        await until(lambda: running(env, first), within=30, message="the first run admitted")
        await until(lambda: running(env, second), within=30, message="the next run admitted")
        assert agent.runs.get(first.id) is not None, "the run is tracked"
    assert first.state is ItemState.CLAIMED and claims(first) == 1
    assert sum(1 for r in env.kube.log if r.key == "POST jobs" and r.status == 201) == 2


def batch_jobs(env: Env, run: str) -> list[dict[str, Any]]:
    return env.kube.objects.list(
        "jobs", namespace="default", label_selector=f"launch-agent.io/run-id={run}"
    )


def job_created(env: Env) -> int:
    return sum(1 for r in env.kube.log if r.key == "POST jobs" and r.status == 201)


async def held_by_a_successor(
    env: Env, config: AgentConfig, item: RunQueueItem, held: Callable[[], str | None], kind: str
) -> None:
    """An agent adopts the workload of `item` and, once it ended, holds its TTL (`held` reads
    the annotation); then it stops, and its record of the wait goes with it."""
    async with env.running(env.agent(config)) as b:
        await until(lambda: b.runs.get(item.id) is not None, message=f"b adopted the {kind}")
        await until(
            held,
            advance=lambda: env.advance(2),
            within=30,
            message=f"the ended {kind}'s TTL held while its item waits",
        )
    assert held() == "3600"


async def test_a_finished_job_whose_item_waits_for_its_offer_outlives_its_ttl_and_a_restart(
    env: Env, tmp_path: Path
) -> None:
    """A batch/v1 Job created, then its creator SIGKILLed before the ack; the lease lapses and
    no pop comes (in quota mode a full leaf pops nothing). The successor adopts the Job and,
    once it ended, waits for W&B's offer with the Job as the proof the item ran. The Job's TTL
    passes and the successor is stopped too. On the code before, the TTL controller deleted the
    Job, nothing was left to say the item ran, and the next agent created it a second time."""
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    config = env.config(agent_name=PROC_AGENT)
    # The TTL controller's witness: an ordinary run, acked, whose Job is kept for its TTL.
    env.cluster.script("launch-agent.io/run-id=ttl-plain", "succeed after=5s")
    plain = env.push(run_spec("ttl-plain"))
    env.state.set_run_state("ent", "proj", "ttl-plain", "running")  # it calls wandb.init
    async with env.running(env.agent(config)) as agent:
        await until(lambda: plain.state is ItemState.CLAIMED, message="ack")
        await until(
            lambda: agent.runs.get(plain.id) is None,
            advance=lambda: env.advance(2),
            within=30,
            message="the ordinary run ended",
        )
    assert len(batch_jobs(env, "ttl-plain")) == 1

    env.cluster.script("launch-agent.io/run-id=ttl-held", "succeed after=5s")
    item = env.push(run_spec("ttl-held"))
    held = env.wandb.faults.add(FaultRule("ackRunQueueItem", delay=5, status=503, times=1))
    async with agent_process(env, write_config(env, tmp_path / "a.yaml")) as a:
        await until(lambda: held.fired == 1, within=START_TIMEOUT, message="a's ack held")
        a.process.kill()
        await a.process.wait()
    assert len(batch_jobs(env, "ttl-held")) == 1
    assert item.history[-1][1] is ItemState.LEASED, "the ack never reached W&B"
    env.state.set_run_state("ent", "proj", "ttl-held", "running")
    clock.shift += 3601
    assert env.state.lapse_leases() == 1 and item.state is ItemState.PENDING
    no_pops = env.wandb.faults.add(FaultRule("popFromRunQueue", status=503))

    def held_annotation() -> str | None:
        (job,) = batch_jobs(env, "ttl-held")
        return (job["metadata"].get("annotations") or {}).get(TTL_HELD)

    await held_by_a_successor(env, config, item, held_annotation, "Job")
    (job,) = batch_jobs(env, "ttl-held")
    assert "ttlSecondsAfterFinished" not in job["spec"]
    # Past both Jobs' TTL; b, the one that held it, is gone with its record.
    env.advance(3700)
    assert batch_jobs(env, "ttl-plain") == [], "the TTL controller deletes a Job past its TTL"
    assert len(batch_jobs(env, "ttl-held")) == 1, "the proof that the item ran was deleted"

    versions: list[dict[str, Any]] = []  # what the API server stored of it, write by write

    def on_write(storage: str, kind: str, obj: dict[str, Any]) -> None:
        labels = obj.get("metadata", {}).get("labels") or {}
        if storage == "batch/jobs" and labels.get("launch-agent.io/run-id") == "ttl-held":
            versions.append(copy.deepcopy(obj))

    env.kube.store.listeners.append(on_write)
    env.wandb.faults.remove(no_pops)
    async with env.running(env.agent(config)) as c:
        await until(lambda: item.state is ItemState.CLAIMED, message="the offer acked")
        await until(lambda: c.runs.get(item.id) is None, message="settled and cleaned up")
        # Settled: its TTL was put back, and being long past, the TTL controller took the Job
        # (the agent deletes none: a succeeded Job is kept for its TTL).
        await until(lambda: not batch_jobs(env, "ttl-held"), advance=lambda: env.advance(1))
    assert not [r for r in env.kube.log if r.key == "DELETE jobs"]
    released = versions[0]  # the agent's one write, before the TTL controller's delete
    assert released["spec"]["ttlSecondsAfterFinished"] == 3600
    assert TTL_HELD not in (released["metadata"].get("annotations") or {})
    assert job_created(env) == 2, "the item offered again was created a second time"
    assert item.pops == 2 and claims(item) == 1 and item.failure is None


WITNESS_JOBSET: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "ttl-witness"},
    "spec": {
        "ttlSecondsAfterFinished": 60,
        "replicatedJobs": [
            {
                "name": "driver",
                "replicas": 1,
                "template": {
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "main", "image": "busybox"}],
                            }
                        }
                    }
                },
            }
        ],
    },
}


async def test_an_ended_jobset_whose_item_waits_for_its_offer_outlives_its_ttl_and_a_restart(
    env: Env, tmp_path: Path
) -> None:
    """The JobSet case of the test above: the agent deletes a JobSet once its end is handled,
    but while its item waits the JobSet controller's own TTL (`ttl_after_finished.go`) would
    delete it, and with it the proof that the item ran."""
    clock = WandbClock()
    env.state.clock = clock
    env.state.lease_seconds = 3600
    item = await created_then_killed_before_the_ack(env, tmp_path)
    clock.shift += 3601
    assert env.state.lapse_leases() == 1 and item.state is ItemState.PENDING
    no_pops = env.wandb.faults.add(FaultRule("popFromRunQueue", status=503))

    def held() -> str | None:
        (js,) = env.kube.objects.list("jobsets", namespace=NS)
        return (js["metadata"].get("annotations") or {}).get(TTL_HELD)

    await held_by_a_successor(env, successor(env), item, held, "JobSet")
    (js,) = env.kube.objects.list("jobsets", namespace=NS)
    assert "ttlSecondsAfterFinished" not in js["spec"]
    # The JobSet controller's witness: one with a TTL of 60 s.
    env.kube.objects.create("jobsets", copy.deepcopy(WITNESS_JOBSET), NS)
    env.advance(30)  # it runs and completes (its driver succeeds after 10 s)
    assert len(env.kube.objects.list("jobsets", namespace=NS)) == 2
    env.advance(3700)
    (left,) = env.kube.objects.list("jobsets", namespace=NS)
    assert left["metadata"]["name"] != "ttl-witness", "the proof that the item ran was deleted"

    env.wandb.faults.remove(no_pops)
    async with env.running(env.agent(successor(env))) as c:
        await until(lambda: item.state is ItemState.CLAIMED, message="the offer acked")
        await until(lambda: c.runs.get(item.id) is None, message="settled and cleaned up")
        assert jobsets(env) == 0  # deleted by the agent once settled
    assert created(env) == 1, "the item offered again was created a second time"
    assert item.pops == 2 and claims(item) == 1 and item.failure is None
