"""Every outcome reaches W&B exactly once (issue 16, `double_reported` must be 0).

W&B accepts a failure (or a requeue's push), then the agent annotates the Job
`launch-agent.io/reported`. What falls between the two must not make the next agent report
the run again:

- the annotation PATCH fails for good (every `PATCH jobs` answered 503, one Kubernetes
  attempt): the agent that reported retries the annotation; a second agent started on the same
  cluster adopts the unmarked Job, reads the item's state from W&B and does not fail it again;
- the leader is SIGKILLed while its annotation PATCH is in flight, after W&B accepted the
  failure; the next agent does not report it again;
- the same for a preempted run: its requeue reached W&B, the kill fell in the clean-up; the next
  agent finds the pushed item and pushes no second one;
- two replicas: the leader is killed in the same window while the standby tracked the run and
  queued its finish; on taking over, the standby does not report it again.

The count that matters is W&B's own record: the item's state history on the sandbox server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.sweeps import NO_WANDB_INIT
from launch_agent.render.naming import label_value
from launch_agent.runtime.runs import REPORTED
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_leader_failover import ELECTION, holder
from tests.e2e.test_process import START_TIMEOUT, agent_process, write_config

ONE_TRY = RetryPolicy(attempts=1, base_delay=0.05, timeout=5)
# The agent name `write_config` gives agent processes: an in-process successor adopts their Jobs.
PROC_AGENT = "proc-agent"


def failures(item: RunQueueItem) -> int:
    return sum(1 for _, state in item.history if state is ItemState.FAILED)


def job_annotations(env: Env, run: str) -> dict[str, Any]:
    jobs = env.kube.objects.list(
        "jobs", namespace="default", label_selector=f"launch-agent.io/run-id={run}"
    )
    assert len(jobs) == 1, jobs
    return dict(jobs[0]["metadata"].get("annotations") or {})


def requeues(env: Env, item: RunQueueItem) -> list[RunQueueItem]:
    run = item.run_spec["run_id"]
    return [i for i in env.state.items.values() if i.id != item.id and i.run_spec["run_id"] == run]


async def test_a_failure_whose_annotation_failed_is_not_reported_again_by_the_next_agent(
    env: Env,
) -> None:
    """The deterministic reproduction of docs/reliability.md ("double report")."""
    env.cluster.script("launch-agent.io/run-id=once1", "exit code=3 after=1s")
    item = env.push(run_spec("once1"))
    rule = env.kube.faults.add(FaultRule("PATCH jobs", status=503))
    async with env.running(env.agent(kube_retry=ONE_TRY)):
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: item.state is ItemState.FAILED, message="the failure reported")
        await until(lambda: rule.fired >= 1, message="the annotation refused")
    assert REPORTED not in job_annotations(env, "once1")
    assert failures(item) == 1
    env.kube.faults.remove(rule)
    async with env.running() as again:
        await until(
            lambda: REPORTED in job_annotations(env, "once1"), message="the adopted Job marked"
        )
        assert again.reporter is not None
        assert again.reporter.sent["fail"] == 0
    assert failures(item) == 1, item.history
    assert item.failure is not None
    assert "exited with code 3" in item.failure.message


async def test_a_failed_annotation_is_retried_until_it_lands(env: Env) -> None:
    """Without the retry the record went and the Job stayed unmarked for a restart to find."""
    env.cluster.script("launch-agent.io/run-id=once2", "exit code=3 after=1s")
    item = env.push(run_spec("once2"))
    rule = env.kube.faults.add(FaultRule("PATCH jobs", status=503, times=2))
    async with env.running(env.agent(kube_retry=ONE_TRY)) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: REPORTED in job_annotations(env, "once2"), message="annotated at last")
        assert rule.fired == 2
        await until(lambda: agent.runs.get(item.id) is None, message="the record removed")
    assert failures(item) == 1, item.history


async def test_a_leader_killed_between_the_report_and_the_annotation_does_not_double_report(
    env: Env, tmp_path: Path
) -> None:
    env.cluster.script("launch-agent.io/run-id=once3", "exit code=3 after=1s")
    item = env.push(run_spec("once3"))
    # Held, then refused: the PATCH never lands, whatever the kill leaves of the connection.
    rule = env.kube.faults.add(FaultRule("PATCH jobs", delay=60, status=503, times=1))
    async with agent_process(env, write_config(env, tmp_path / "a.yaml")) as a:
        await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack")
        env.advance(5)
        await until(lambda: rule.fired == 1, within=START_TIMEOUT, message="a annotating")
        assert item.state is ItemState.FAILED, "W&B accepted the failure before the annotation"
        a.process.kill()
        await a.process.wait()
    env.kube.faults.remove(rule)
    assert REPORTED not in job_annotations(env, "once3")
    async with env.running(env.agent(env.config(agent_name=PROC_AGENT))):
        await until(
            lambda: REPORTED in job_annotations(env, "once3"), message="the adopted Job marked"
        )
    assert failures(item) == 1, item.history


async def test_a_requeue_cut_by_a_kill_in_the_clean_up_is_not_pushed_twice(
    env: Env, tmp_path: Path
) -> None:
    env.cluster.script("launch-agent.io/run-id=once4", "preempted after=10s")
    item = env.push(run_spec("once4"))
    # Whichever clean-up the preempted Job gets (annotated if finished, deleted if not).
    held = [
        env.kube.faults.add(FaultRule(route, delay=60, status=503, times=1))
        for route in ("PATCH jobs", "DELETE jobs")
    ]
    async with agent_process(env, write_config(env, tmp_path / "a.yaml")) as a:
        await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack")
        env.advance(30)
        await until(
            lambda: any(rule.fired for rule in held), within=START_TIMEOUT, message="clean-up"
        )
        assert len(requeues(env, item)) == 1, "W&B accepted the push before the clean-up"
        a.process.kill()
        await a.process.wait()
    for rule in held:
        env.kube.faults.remove(rule)
    async with env.running(env.agent(env.config(agent_name=PROC_AGENT))) as b:
        assert b.finisher is not None
        finisher = b.finisher
        # The preempted Job adopted and handled (annotated or deleted) by b.
        await until(lambda: finisher.handled >= 1, message="b handled the preempted Job")
    again = requeues(env, item)
    assert len(again) == 1, [(i.id, i.run_spec) for i in again]
    assert again[0].run_spec["_resume_count"] == 1
    assert item.failure is None


async def test_a_standby_that_takes_over_does_not_report_the_leaders_failure_again(
    env: Env, tmp_path: Path
) -> None:
    """The standby saw the run fail and queued its finish; the leader's annotation never
    reaches it (the leader is killed while annotating), so nothing voids that finish."""
    env.cluster.script("launch-agent.io/run-id=once5", "exit code=3 after=1s")
    config_a = write_config(
        env, tmp_path / "a.yaml", leader_election={**ELECTION, "identity": "agent-a"}
    )
    config_b = write_config(
        env, tmp_path / "b.yaml", leader_election={**ELECTION, "identity": "agent-b"}
    )
    rule = env.kube.faults.add(FaultRule("PATCH jobs", delay=60, status=503, times=1))
    async with agent_process(env, config_a) as a:
        await until(lambda: holder(env) == "agent-a", within=START_TIMEOUT, message="a leads")
        async with agent_process(env, config_b) as b:
            await until(
                lambda: any("standby: agent-a leads" in line for line in b.lines),
                within=START_TIMEOUT,
                message="b waits as a standby",
            )
            item = env.push(run_spec("once5"))
            await until(
                lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack"
            )
            env.advance(5)
            await until(lambda: rule.fired == 1, within=START_TIMEOUT, message="a annotating")
            assert item.state is ItemState.FAILED
            await until(
                lambda: any("once5" in line and "-> failed" in line for line in b.lines),
                within=START_TIMEOUT,
                message="b saw the run fail (its finish queued while standing by)",
            )
            a.process.kill()
            env.kube.faults.remove(rule)
            await until(
                lambda: REPORTED in job_annotations(env, "once5"),
                within=START_TIMEOUT,
                message="b took over and marked the Job",
            )
            assert holder(env) == "agent-b"
    assert failures(item) == 1, item.history


async def test_a_run_failed_for_no_wandb_init_is_not_failed_again_after_a_restart(
    env: Env,
) -> None:
    """A succeeded Job is kept for its TTL, unmarked; each start adopts it and runs W&B's
    "failed to call wandb.init" check again, which failed the item once more per restart."""
    env.cluster.script("launch-agent.io/run-id=once6", "succeed after=1s")
    item = env.push(run_spec("once6"))
    config = env.config(sweeps={"run_init_grace_seconds": 0})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: item.state is ItemState.FAILED, message="no wandb.init reported")
    async with env.running(env.agent(config)) as again:
        assert again.finisher is not None
        checks = again.finisher.checks
        await until(lambda: checks.checked == 1, message="the adopted run checked again")
    assert failures(item) == 1, item.history
    assert item.failure is not None
    assert item.failure.message == NO_WANDB_INIT


async def test_a_requeue_past_the_first_page_of_the_queue_is_found_by_its_workload(
    env: Env, tmp_path: Path
) -> None:
    """wandb's listing is one page of 100 items; with 100 older items in the queue the pushed
    requeue is past it. It was popped and claimed before the kill, so its workload proves it."""
    queue = env.state.queue("ent", "model-registry", "q1")
    for i in range(100):
        old = env.state.push(queue, run_spec(f"old{i}"))
        env.state.fail(old.id, "an older run", "agent", None)  # listed, never popped
    env.cluster.script("launch-agent.io/run-id=once7", "succeed after=1h")
    item = env.push(run_spec("once7"))
    env.cluster.script(
        f"launch-agent.io/run-queue-item={label_value(item.id)}", "preempted after=10s"
    )
    held = [
        env.kube.faults.add(FaultRule(route, delay=60, status=503, times=1))
        for route in ("PATCH jobs", "DELETE jobs")
    ]
    async with agent_process(env, write_config(env, tmp_path / "a.yaml")) as a:
        await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack")
        env.advance(30)
        await until(
            lambda: any(rule.fired for rule in held), within=START_TIMEOUT, message="clean-up"
        )
        (pushed,) = requeues(env, item)
        await until(
            lambda: pushed.state is ItemState.CLAIMED,
            within=START_TIMEOUT,
            message="a claimed the requeued item",
        )
        await until(lambda: len(env.jobs()) == 2, within=START_TIMEOUT, message="its Job")
        a.process.kill()
        await a.process.wait()
    for rule in held:
        env.kube.faults.remove(rule)
    assert len(env.state.queue_items(queue)) == 102, "the requeue is past the first page"
    async with env.running(env.agent(env.config(agent_name=PROC_AGENT))) as b:
        assert b.finisher is not None
        finisher = b.finisher
        await until(lambda: finisher.handled >= 1, message="b handled the preempted Job")
    assert [i.id for i in requeues(env, item)] == [pushed.id]
    assert item.failure is None
