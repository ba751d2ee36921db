"""Controllers for the custom workload kinds, each writing status in its CRD's shape.

- JobSet (jobset.x-k8s.io/v1alpha2): Jobs `<js>-<replicatedJob>-<i>`; status
  `replicatedJobsStatus`, conditions `Completed` / `Failed` / `Suspended`, `terminalState`,
  `restarts` (honours `failurePolicy.maxRestarts`, `successPolicy`, `suspend`).
- PyTorchJob (kubeflow.org/v1): pods `<job>-master-0`, `<job>-worker-<i>`; conditions
  `Created` / `Running` / `Succeeded` / `Failed` (reasons `PyTorchJob<Type>`),
  `replicaStatuses`, `startTime`, `completionTime` (honours `runPolicy.suspend`).
- TrainJob (trainer.kubeflow.org/v1alpha1): a JobSet of the same name (one `node` job of
  `numNodes` pods); conditions `Complete` / `Failed` / `Suspended`, `jobsStatus`.
- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): pods `<lws>-<g>` (leader) and `<lws>-<g>-<i>`;
  `replicas`, `readyReplicas`, `updatedReplicas`, conditions `Available` / `Progressing`,
  `hpaPodSelector`.
- RayJob (ray.io/v1): head and worker pods (they run until the job ends), then a submitter Job
  named like the RayJob that plays the outcome; `jobStatus`, `jobDeploymentStatus`,
  `rayClusterName`, `rayClusterStatus`, `startTime`, `endTime`, `succeeded` / `failed`,
  `reason`, `message` (honours `activeDeadlineSeconds`, `shutdownAfterJobFinishes`).
- Volcano Job (batch.volcano.sh/v1alpha1): pods `<job>-<task>-<i>`; `state.phase`,
  `pending` / `running` / `succeeded` / `failed`, `taskStatusCount`, `conditions` (a failed pod
  fails the job: `policies` and `maxRetry` are not modelled).

The controllers live in `jobsets.py` (JobSet, TrainJob) and `operators.py` (the others), with
shared helpers in `children.py`. A controller only runs for kinds whose CRD is registered.
The upstream operators do more (gang scheduling, elastic policies, restarts by exit code); the
sandbox models what an agent reads to decide that a run is queued, running, succeeded or
failed, and why.
"""

from __future__ import annotations

from collections.abc import Callable

from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.jobsets import reconcile_jobset, reconcile_trainjob
from launch_agent.sandbox.cluster.operators import reconcile_lws
from launch_agent.sandbox.cluster.pytorchjob import reconcile_pytorchjob
from launch_agent.sandbox.cluster.rayjob import reconcile_rayjob
from launch_agent.sandbox.cluster.volcano import reconcile_volcano
from launch_agent.sandbox.kube.store import Obj

CONTROLLERS: dict[str, Callable[[Ctx, Obj], None]] = {
    "jobsets.jobset.x-k8s.io": reconcile_jobset,
    "pytorchjobs.kubeflow.org": reconcile_pytorchjob,
    "trainjobs.trainer.kubeflow.org": reconcile_trainjob,
    "leaderworkersets.leaderworkerset.x-k8s.io": reconcile_lws,
    "rayjobs.ray.io": reconcile_rayjob,
    "jobs.batch.volcano.sh": reconcile_volcano,
}
