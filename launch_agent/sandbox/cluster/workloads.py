"""Controllers for the custom workload kinds, each writing status in its CRD's shape and
following the upstream controller's rules (each module names the upstream file and function).

- JobSet (jobset.x-k8s.io/v1alpha2, `jobsets.py`): Jobs `<js>-<replicatedJob>-<i>`; status
  `replicatedJobsStatus`, conditions `Completed` / `Failed` / `Suspended` / `RestartingJobSet`,
  `terminalState`, `restarts`, `restartsCountTowardsMax` (`failurePolicy` rules and
  `maxRestarts`, `successPolicy`, `suspend`); `JobCreationFailed` Warning Events.
- PyTorchJob (kubeflow.org/v1, `pytorchjob.py`): pods `<job>-master-0`, `<job>-worker-<i>`;
  conditions `Created` / `Running` / `Restarting` / `Succeeded` / `Failed` (reasons
  `PyTorchJob<Type>`), `replicaStatuses`, `startTime`, `completionTime` (restart policies
  including `ExitCode`, `runPolicy.backoffLimit`, `runPolicy.suspend`).
- TrainJob (trainer.kubeflow.org/v1alpha1, `jobsets.py`): a JobSet of the same name (one
  `node` job of `numNodes` pods); conditions copied from the JobSet (`Complete` / `Failed`),
  `Suspended`, `jobsStatus`; `TrainJobResourcesCreationFailed` Warning Events.
- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, `operators.py`): pods `<lws>-<g>` (leader)
  and `<lws>-<g>-<i>`; `replicas`, `readyReplicas`, `updatedReplicas`, conditions
  `Available` / `Progressing`, `hpaPodSelector`; groups recreated on a pod restart.
- RayJob (ray.io/v1, `rayjob.py`): a RayCluster `<rayjob>-<5 random>` (ray.io/v1,
  `raycluster.py`: head and worker pods that run until the job ends, `state`, conditions
  `HeadPodReady` / `RayClusterProvisioned` / `ReplicaFailure`, `FailedToCreateHeadPod` /
  `FailedToCreateWorkerPod` Warning Events), then a submitter Job named like the RayJob
  that plays the outcome; `jobStatus`,
  `jobDeploymentStatus` (with `Retrying` / `New` for `spec.backoffLimit`), `rayClusterName`,
  `rayClusterStatus`, `startTime`, `endTime`, `succeeded` / `failed`, `reason`, `message`
  (honours `activeDeadlineSeconds`, `shutdownAfterJobFinishes`, `suspend`).
- Volcano Job (batch.volcano.sh/v1alpha1, `volcano.py`): pods `<job>-<task>-<i>`;
  `state.phase`, `pending` / `running` / `succeeded` / `failed` / `terminating`, `version`,
  `retryCount`, `taskStatusCount`, `conditions` (the finish rule without `policies`; the
  policies' actions and `maxRetry`).

A controller only runs for kinds whose CRD is registered. The upstream operators do more (gang
scheduling, elastic policies, rolling updates); the sandbox models what an agent reads to
decide that a run is queued, running, succeeded or failed, and why.
"""

from __future__ import annotations

from collections.abc import Callable

from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.jobsets import reconcile_jobset, reconcile_trainjob
from launch_agent.sandbox.cluster.operators import reconcile_lws
from launch_agent.sandbox.cluster.pytorchjob import reconcile_pytorchjob
from launch_agent.sandbox.cluster.raycluster import reconcile_raycluster
from launch_agent.sandbox.cluster.rayjob import reconcile_rayjob
from launch_agent.sandbox.cluster.volcano import reconcile_volcano
from launch_agent.sandbox.kube.store import Obj

CONTROLLERS: dict[str, Callable[[Ctx, Obj], None]] = {
    "jobsets.jobset.x-k8s.io": reconcile_jobset,
    "pytorchjobs.kubeflow.org": reconcile_pytorchjob,
    "trainjobs.trainer.kubeflow.org": reconcile_trainjob,
    "leaderworkersets.leaderworkerset.x-k8s.io": reconcile_lws,
    "rayjobs.ray.io": reconcile_rayjob,
    "rayclusters.ray.io": reconcile_raycluster,
    "jobs.batch.volcano.sh": reconcile_volcano,
}
