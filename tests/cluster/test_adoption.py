"""Restart adoption, on either tier: an agent stops (or is SIGKILLed) with runs in flight; the
next one, with the same agent name, finds their workloads by its label, adopts them and reports
each exactly once, creating nothing again (`tests/e2e/test_dispatch_once.py` and
`test_report_once.py` are the sandbox-only versions, with requests held in the API server).

What counts is the servers' own record: W&B's item history (claimed once, failed once for a
failure, popped once) and the API server's Jobs (one per run, the uid the first agent's create
got: nothing was created a second time).
"""

from __future__ import annotations

from pathlib import Path

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.processes import START_TIMEOUT, agent_process, write_config
from tests.cluster.test_jobs import JOB_SPEC
from tests.cluster.world import Obj, World, reported_once, run_spec, until

RUN_ID = "launch-agent.io/run-id"


async def jobs_by_run(world: World) -> dict[str, Obj]:
    return {j["metadata"]["labels"][RUN_ID]: j for j in await world.objects("batch/v1", "jobs")}


def ended(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
        and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


async def test_a_new_agent_adopts_the_runs_in_flight_and_reports_each_once(world: World) -> None:
    world.write_spec("basic.yaml", JOB_SPEC)
    # Two runs end while no agent runs, two after the next one started.
    outcomes = {
        "early-ok": "succeed after=6s",
        "early-bad": 'exit code=3 after=6s log="nan loss"',
        "late-ok": "succeed after=25s",
        "late-bad": 'exit code=3 after=25s log="nan loss"',
    }
    expected = {r: ItemState.FAILED if r.endswith("bad") else ItemState.CLAIMED for r in outcomes}
    items = {run: world.push(run_spec(run)) for run in outcomes}
    for run, outcome in outcomes.items():
        await world.script(f"{RUN_ID}={run}", outcome)
    async with world.running():
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items.values()),
            within=120,
            message="every run claimed",
        )
    # Stopped with every run in flight: the workloads stay for the next start.
    uids = {run: job["metadata"]["uid"] for run, job in (await jobs_by_run(world)).items()}
    assert sorted(uids) == sorted(outcomes)

    async def early_ended() -> bool:
        jobs = await jobs_by_run(world)
        return ended(jobs["early-ok"]) and ended(jobs["early-bad"])

    await until(early_ended, within=120, message="the early runs ended with no agent running")
    assert all(i.state is ItemState.CLAIMED for i in items.values()), "nobody reported them yet"
    async with world.running() as successor:
        await until(
            lambda: all(i.state is expected[run] for run, i in items.items()),
            within=180,
            message="every run reported by the successor",
        )
        await until(lambda: not list(successor.runs), within=60, message="every run released")
    for run, item in items.items():
        assert reported_once(item, expected[run]), (run, item.history)
        assert item.pops == 1, (run, item.pops)
        if expected[run] is ItemState.FAILED:
            assert item.failure is not None and "nan loss" in item.failure.message
    after = {run: job["metadata"]["uid"] for run, job in (await jobs_by_run(world)).items()}
    assert after == uids, "a run's Job was created again"


async def test_a_run_whose_creator_was_killed_before_its_ack_is_adopted_and_acked_once(
    world: World, tmp_path: Path
) -> None:
    """The leader created the Job and was SIGKILLed while W&B held its ack (then refused it):
    W&B's lease on the item lapses and it is offered again, the successor finds the Job by its
    item label, acks once and creates nothing."""
    world.write_spec("basic.yaml", JOB_SPEC)
    await world.script(f"{RUN_ID}=once-ack", "succeed after=10s")
    item = world.push(run_spec("once-ack"))
    held = world.wandb.faults.add(FaultRule("ackRunQueueItem", delay=5, status=503, times=1))
    config = write_config(world, tmp_path / "a.yaml")
    async with agent_process(world, config) as first:
        await until(
            lambda: held.fired == 1, within=START_TIMEOUT, message=f"ack held\n{first.output()}"
        )
        first.process.kill()
        await first.process.wait()
    assert item.state is ItemState.LEASED, "the ack never reached W&B"
    (job,) = (await jobs_by_run(world)).values()
    async with world.running() as successor:
        await until(lambda: item.state is ItemState.CLAIMED, within=120, message="acked")
        await until(lambda: not list(successor.runs), within=120, message="the run released")
    assert reported_once(item, ItemState.CLAIMED), item.history
    assert item.failure is None
    (again,) = (await jobs_by_run(world)).values()
    assert again["metadata"]["uid"] == job["metadata"]["uid"], "the Job was created again"
    assert ended(again)
