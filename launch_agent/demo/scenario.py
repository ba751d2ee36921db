"""What the demo runs and how it judges the result: pure data and pure decisions, no I/O.

Each `DemoRun` is one run queue item for one of the example queue specs in `queue-specs/`,
with the outcome the simulated cluster plays for its pods (the sandbox's outcome grammar,
`launch_agent.sandbox.cluster.outcomes`) and what W&B must end up with:

- `succeeded`: the item is claimed (acked with the run's name) and W&B hears no failure;
- `failed`: the item is failed with stage `run` and a message that contains every fragment
  (the reason in words, the container or image, the scheduler's message);
- `stopped`: the run is stopped from the W&B UI (while it runs, or while it waits suspended
  for Kueue, which the sandbox does not run); the agent deletes the workload and reports no
  failure, because W&B asked for the stop.

`judge` compares an `Observation` (what the sandbox and the agent recorded) with the
expectation and explains any difference in one line, so the demo's exit status means something.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Expect = Literal["succeeded", "failed", "stopped"]

IMAGE = "registry.example/train:1"
MISSING_IMAGE = "registry.example/no-such-image:404"


@dataclass(frozen=True)
class DemoRun:
    name: str  # a short handle for the progress lines and the table
    queue: str
    kind: str  # what the queue spec renders, for the table
    expect: Expect
    outcome: str | None = None  # None: the cluster's default (succeed after a moment)
    fragments: tuple[str, ...] = ()  # must all appear in the failure message (case-insensitive)
    image: str = IMAGE
    # Press Stop in the W&B UI once the agent sees the run in this state ("running", "queued").
    stop_when: str | None = None

    @property
    def run_id(self) -> str:
        return f"demo-{self.name}"

    def run_spec(self, entity: str, project: str) -> dict[str, Any]:
        """The runSpec `wandb launch --docker-image IMAGE --queue QUEUE` pushes."""
        return {
            "entity": entity,
            "project": project,
            "run_id": self.run_id,
            "resource": "kubernetes",
            "resource_args": {"kubernetes": {}},
            "docker": {"docker_image": self.image},
            "job": None,
            "uri": None,
            "overrides": {"args": ["--epochs", "1"], "run_config": {}, "entry_point": []},
        }


UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."

RUNS: tuple[DemoRun, ...] = (
    DemoRun("job", "gpu-job", "Job", "succeeded"),
    DemoRun("pytorchjob", "pytorch-ddp", "PyTorchJob", "succeeded"),
    DemoRun("jobset", "jobset-tpu", "JobSet", "succeeded"),
    DemoRun("trainjob", "trainjob", "TrainJob", "succeeded"),
    DemoRun("rayjob", "ray", "RayJob", "succeeded"),
    DemoRun("volcano", "volcano", "Volcano Job", "succeeded"),
    DemoRun(
        "oom",
        "k8s-test",
        "Job (W&B form)",
        "failed",
        outcome='oomkilled after=1s log="loading shards" log="allocating 80GiB on the GPU"',
        fragments=("OOMKilled", "launch0", "allocating 80GiB"),
    ),
    DemoRun(
        "bad-image",
        "gpu-job",
        "Job",
        "failed",
        outcome="imagepullbackoff",
        fragments=(MISSING_IMAGE, "pull"),
        image=MISSING_IMAGE,
    ),
    DemoRun(
        "no-gpu",
        "gpu-job",
        "Job",
        "failed",
        outcome=f'unschedulable message="{UNSCHEDULABLE}"',
        fragments=(UNSCHEDULABLE,),
    ),
    DemoRun(
        "stopped",
        "lws-multihost",
        "LeaderWorkerSet",
        "stopped",
        outcome="run",
        stop_when="running",
    ),
    DemoRun(
        "kueue",
        "team-a",
        "Job (Kueue)",
        "stopped",
        outcome="run",
        stop_when="queued",
    ),
)


@dataclass
class Observation:
    """What is known about one run when the demo ends."""

    item_state: str  # the W&B item: PENDING, LEASED, CLAIMED or FAILED
    run_name: str | None = None  # the runName it was acked with
    failure_stage: str | None = None
    failure_message: str | None = None
    warnings: list[str] = field(default_factory=list)
    agent_states: list[str] = field(default_factory=list)  # RunState values, in order seen
    finished: bool = False  # the agent was done with it (its record released)
    workload_left: bool = False  # the workload still exists in the cluster
    pods_left: int = 0  # pods of the run still in the cluster

    @property
    def last_state(self) -> str | None:
        return self.agent_states[-1] if self.agent_states else None

    @property
    def outcome(self) -> str:
        """One word for the table."""
        if self.item_state == "FAILED":
            return "failed"
        if self.item_state == "CLAIMED" and self.finished and self.last_state:
            return self.last_state
        return f"{self.item_state.lower()}" + (f"/{self.last_state}" if self.last_state else "")


def judge(run: DemoRun, seen: Observation) -> str | None:
    """None if the run ended as expected, else what is wrong, in one line."""
    if run.expect == "failed":
        if seen.item_state != "FAILED":
            return f"expected a failRunQueueItem, the item is {seen.item_state}"
        if seen.failure_stage != "run":
            return f"expected stage 'run', W&B got stage {seen.failure_stage!r}"
        message = (seen.failure_message or "").lower()
        missing = [f for f in run.fragments if f.lower() not in message]
        if missing:
            return f"the message W&B got lacks {', '.join(repr(m) for m in missing)}"
        return None
    if seen.item_state != "CLAIMED":
        return f"expected the item to be claimed, it is {seen.item_state}"
    if seen.run_name != run.run_id:
        return f"acked with run name {seen.run_name!r}, expected {run.run_id!r}"
    if not seen.finished:
        return f"the agent had not finished the run (last state {seen.last_state or 'none'})"
    if seen.last_state != run.expect:
        return f"expected {run.expect}, the agent saw {seen.last_state or 'nothing'}"
    if run.expect == "stopped" and seen.workload_left:
        return "stopped from the UI but its workload is still in the cluster"
    if run.expect == "stopped" and seen.pods_left:
        return f"stopped from the UI but {seen.pods_left} of its pods are still in the cluster"
    return None


def received(seen: Observation) -> str:
    """What W&B received about the item, in words, for the table."""
    if seen.item_state == "FAILED":
        first = (seen.failure_message or "").strip().splitlines()
        return f"failRunQueueItem stage={seen.failure_stage}: {first[0] if first else ''}"
    if seen.item_state == "CLAIMED":
        text = f"ackRunQueueItem runName={seen.run_name}; no failure"
        if seen.warnings:
            text += f"; {len(seen.warnings)} warning(s): {seen.warnings[0]}"
        return text
    return f"nothing yet (item {seen.item_state})"
