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

`demo --cluster real` plays `REAL_RUNS` instead: the same scenarios where the real tier can
play them, with what the upstream components say in place of the sandbox's scripted words (the
real kube-scheduler decides `no-gpu`, the real Kueue holds `kueue`); `real_runs` leaves out,
with the reason, what the built controllers cannot run. `--workers N` plays `WORKER_RUNS`:
Jobs through MultiKueue, sized so that no worker can hold them all, and `spread` fails the demo
unless every worker ran some.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
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
    # The submitter's `resource_args.kubernetes` (merged into the queue's template).
    resource_args: Mapping[str, Any] | None = field(default=None, compare=False)
    # The real tier's controllers the kind needs (`launch_agent.realcluster.addons` names).
    needs: tuple[str, ...] = ()
    # Must each appear in some warning W&B received (what a real controller said about it).
    warning_fragments: tuple[str, ...] = ()
    # MultiKueue: the agent must have seen it placed on a worker cluster.
    on_worker: bool = False

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
            "resource_args": {"kubernetes": dict(self.resource_args or {})},
            "docker": {"docker_image": self.image},
            "job": None,
            "uri": None,
            "overrides": {"args": ["--epochs", "1"], "run_config": {}, "entry_point": []},
        }


UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
OOM = DemoRun(
    "oom",
    "k8s-test",
    "Job (W&B form)",
    "failed",
    outcome='oomkilled after=1s log="loading shards" log="allocating 80GiB on the GPU"',
    fragments=("OOMKilled", "launch0", "allocating 80GiB"),
)
BAD_IMAGE = DemoRun(
    "bad-image",
    "gpu-job",
    "Job",
    "failed",
    outcome="imagepullbackoff",
    fragments=(MISSING_IMAGE, "pull"),
    image=MISSING_IMAGE,
)

RUNS: tuple[DemoRun, ...] = (
    DemoRun("job", "gpu-job", "Job", "succeeded"),
    DemoRun("pytorchjob", "pytorch-ddp", "PyTorchJob", "succeeded"),
    DemoRun("jobset", "jobset-tpu", "JobSet", "succeeded"),
    DemoRun("trainjob", "trainjob", "TrainJob", "succeeded"),
    DemoRun("rayjob", "ray", "RayJob", "succeeded"),
    DemoRun("volcano", "volcano", "Volcano Job", "succeeded"),
    OOM,
    BAD_IMAGE,
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
    workers: list[str] = field(default_factory=list)  # MultiKueue placements the agent saw

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
    if run.on_worker and not seen.workers:
        return "the agent saw no worker cluster take it (MultiKueue placed it nowhere)"
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
    unsaid = unheard(run.warning_fragments, seen.warnings)
    if unsaid:
        return f"no warning W&B got says {', '.join(repr(f) for f in unsaid)}"
    return None


def unheard(fragments: Sequence[str], warnings: Sequence[str]) -> list[str]:
    """The fragments no warning contains (case-insensitive)."""
    text = "\n".join(warnings).lower()
    return [f for f in fragments if f.lower() not in text]


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


# --- the real-cluster tier (`demo --cluster real`) --------------------------------------------

# kube-scheduler's FitError with DefaultPreemption's verdict, for a pod asking for 9 GPUs on
# `cluster up`'s two nodes of 8: no node could ever hold it, so preemption would not help.
REAL_UNSCHEDULABLE = (
    "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are"
    " available: 2 Preemption is not helpful for scheduling."
)
NINE_GPUS = {
    "spec": {
        "template": {
            "spec": {
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "9"}}}]
            }
        }
    }
}


@dataclass(frozen=True)
class KueueQueue:
    """A LocalQueue and its ClusterQueue that the demo creates on the real cluster."""

    namespace: str
    name: str  # the LocalQueue's and the ClusterQueue's
    quota: Mapping[str, str]


# job-kueue.yaml's run asks for 2 CPUs; its ClusterQueue has 1, so Kueue keeps it waiting
# (and says why) until it is stopped from the W&B UI.
REAL_KUEUE_QUEUES = (KueueQueue("team-a", "team-a", {"cpu": "1", "memory": "16Gi"}),)

REAL_RUNS: tuple[DemoRun, ...] = (
    DemoRun("job", "gpu-job", "Job", "succeeded"),
    DemoRun("pytorchjob", "pytorch-ddp", "PyTorchJob", "succeeded", needs=("training-operator",)),
    DemoRun("jobset", "jobset-tpu", "JobSet", "succeeded", needs=("jobset",)),
    # Trainer runs a TrainJob as a JobSet (its runtime `torch-distributed`).
    DemoRun("trainjob", "trainjob", "TrainJob", "succeeded", needs=("trainer", "jobset")),
    # The node simulator plays these scripts through the real API server.
    OOM,
    BAD_IMAGE,
    DemoRun(
        "no-gpu",
        "gpu-job",
        "Job",
        "failed",
        fragments=(REAL_UNSCHEDULABLE,),
        resource_args=NINE_GPUS,
    ),
    DemoRun(
        "stopped",
        "lws-multihost",
        "LeaderWorkerSet",
        "stopped",
        outcome="run",
        stop_when="running",
        needs=("lws",),
    ),
    DemoRun(
        "kueue",
        "team-a",
        "Job (Kueue)",
        "stopped",
        outcome="run",
        stop_when="queued",
        needs=("kueue",),
        warning_fragments=("insufficient quota for cpu in flavor default-flavor",),
    ),
)


@dataclass(frozen=True)
class LeftOut:
    name: str
    kind: str
    reason: str


REAL_UNPLAYABLE = (
    LeftOut(
        "rayjob",
        "RayJob",
        "KubeRay reads a RayJob's result from the Ray head's dashboard, which no simulated"
        " pod serves, so it never ends",
    ),
    LeftOut(
        "volcano",
        "Volcano Job",
        "Volcano is not built (the Go module proxy serves no version of volcano.sh/volcano)",
    ),
)


def real_runs(built: Collection[str]) -> tuple[list[DemoRun], list[LeftOut]]:
    """The real tier's runs whose controllers were built, and what is left out and why."""
    runs: list[DemoRun] = []
    left = list(REAL_UNPLAYABLE)
    for run in REAL_RUNS:
        missing = [name for name in run.needs if name not in built]
        if missing:
            reason = f"{', '.join(missing)} not built (make cluster-bins)"
            left.append(LeftOut(run.name, run.kind, reason))
        else:
            runs.append(run)
    return runs, left


# --- MultiKueue (`demo --cluster real --workers N`) -------------------------------------------

MULTI_NAMESPACE = "demo-multi"
MULTI_QUEUE = "multi"  # the W&B run queue, and the LocalQueue on every cluster
# Each worker's ClusterQueue holds two of the runs' 1 CPU at a time and the manager's the sum:
# the manager admits four at once and MultiKueue offers each to every worker, so with runs that
# last seconds no single worker can take the first four and both run some.
WORKER_QUOTA = {"cpu": "2", "memory": "16Gi"}
MULTI_SPEC = f"""\
# Written by `launch-agent demo --cluster real --workers N`: Jobs sent through MultiKueue.
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: multikueue-job
spec:
  queues: [{MULTI_QUEUE}]
  namespace: {MULTI_NAMESPACE}
  kueue:
    queueName: {MULTI_QUEUE}
    multiKueue: true
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 0
      template:
        spec:
          containers:
            - name: main
              image: ${{image_uri}}
              resources:
                requests: {{cpu: "1", memory: 1Gi}}
  overridable:
    - overrides.args
    - overrides.run_config
"""
WORKER_RUNS: tuple[DemoRun, ...] = (
    *(
        DemoRun(
            f"multi-{i}",
            MULTI_QUEUE,
            "Job (MultiKueue)",
            "succeeded",
            outcome="succeed after=8s",
            needs=("kueue",),
            on_worker=True,
        )
        for i in range(1, 5)
    ),
    DemoRun(
        "multi-oom",
        MULTI_QUEUE,
        "Job (MultiKueue)",
        "failed",
        outcome='oomkilled after=6s log="loading shards" log="allocating 80GiB on the GPU"',
        fragments=("OOMKilled", "allocating 80GiB"),
        needs=("kueue",),
        on_worker=True,
    ),
)


def spread(rows: Sequence[tuple[DemoRun, Observation]], workers: Sequence[str]) -> str | None:
    """None if every worker ran at least one of the runs, else which did not."""
    used = {w for _, seen in rows for w in seen.workers}
    idle = [w for w in workers if w not in used]
    if not idle:
        return None
    placed = ", ".join(sorted(used)) or "none"
    return f"no run landed on {', '.join(idle)} (runs were placed on: {placed})"
