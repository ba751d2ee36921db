"""The scheduler and the kubelet: bind pods to nodes and play each pod's outcome.

A pod's status is a pure function of its outcome and of the seconds since it was bound
(`timeline`), so the same script gives the same statuses at the same simulated instants. The
kubelet writes the status only when it changed (no event for a no-op) and tells the loop when
the next transition is due. What it models, in kubelet's own words: `ContainerCreating`,
`ErrImagePull` → `ImagePullBackOff`, `InvalidImageName`, `CreateContainerConfigError`,
running and Ready, terminated with `Completed` / `Error` / `OOMKilled` and the exit code,
`CrashLoopBackOff` with restarts on a 10 s doubling back-off (capped at 300 s), eviction
(`Failed`, reason `Evicted`, condition `DisruptionTarget`) and preemption (`DisruptionTarget`
by the scheduler, then the pod is deleted). Containers "print" log lines into the store, which
the API server serves as `pods/{name}/log`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from launch_agent.sandbox.cluster.common import Ctx, condition, merge_conditions
from launch_agent.sandbox.cluster.nodes import NOT_HELPFUL, Node, fit, pod_requests
from launch_agent.sandbox.cluster.nodes import quantity as nodes_quantity
from launch_agent.sandbox.cluster.outcomes import Outcome
from launch_agent.sandbox.cluster.processes import ProcessRunner, wants_process
from launch_agent.sandbox.kube.store import Obj

DEFAULT_NODE = "sandbox-node"
FAILING = ("fail", "exit", "oomkilled")
# The kubelet refuses the pod at admission (`pkg/kubelet/lifecycle/predicate.go`).
REJECTED = ("outofresource", "admissionerror")
# DisruptionTarget conditions in the words of the components that write them.
EVICTION_API = "Eviction API: evicting"  # pkg/registry/core/pod/storage/eviction.go
TAINT_MANAGER = "Taint manager: deleting due to NoExecute taint"  # tainteviction
POD_GC = "PodGC: node no longer exists"  # pkg/controller/podgc/gc_controller.go
# pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go, nodeShutdownReason / Message.
NODE_SHUTDOWN = ("Terminated", "Pod was terminated in response to imminent node shutdown.")
WAITING = {
    "invalidimagename": (
        "InvalidImageName",
        'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}":'
        " invalid reference format",
    ),
    "createcontainerconfigerror": (
        "CreateContainerConfigError",
        'secret "{container}-config" not found',
    ),
}


@dataclass
class PodSim:
    outcome: Outcome
    bound_at: float | None = None
    node: str = ""
    logged: int = 0
    seen: set[str] = field(default_factory=set)  # event signatures already recorded
    deleted: bool = False
    # When the pod's volumes were set up and its containers' config resolved (None: not yet).
    mounted_at: float | None = None
    # Failed volume set-ups so far and when the volume manager tries again.
    mount_failures: int = 0
    mount_retry_at: float = 0.0
    # When the kubelet saw the pod's deletionTimestamp (SIGTERM sent).
    term_at: float | None = None
    # The node is gone (`nodelost`): no kubelet answers for the pod any more.
    unreachable: bool = False


def pod_ip(uid: str) -> str:
    """A stable address in 10.244.0.0/24 per pod, never the network's or broadcast's (which a
    real API server's validation of `status.podIPs` refuses)."""
    return f"10.244.0.{1 + int(uid[:2], 16) % 254}"


def _crash_cycles(o: Outcome, run_from: float, t: float) -> tuple[int, float, float | None]:
    """For a crash loop: (restarts so far, start of the current run, end of back-off or None)."""
    start, k = run_from, 0
    while True:
        end = start + o.after
        if t < end:
            return k, start, None
        restart = end + min(10.0 * 2**k, 300.0)
        if t < restart:
            return k + 1, start, restart
        start, k = restart, k + 1


def timeline(o: Outcome, restart_policy: str, b: float, t: float) -> dict[str, Any]:
    """The target container's state at `t` for a pod bound at `b`; keys described inline."""
    ready_at = b + o.start
    kind = o.kind
    if kind in FAILING and restart_policy != "Never":
        kind = "crashloop"  # kubelet restarts a failing container in place
    if t < ready_at:
        return {"phase": "Pending", "waiting": "ContainerCreating", "next": ready_at}
    if kind in ("imagepullbackoff", "pullerror"):
        # `pkg/kubelet/images/image_manager.go` (`EnsureImageExists`): a failed pull is
        # ErrImagePull and starts the image back-off (10 s doubling to 300 s, the kubelet's
        # `backOffPeriod` / `MaxContainerBackOff`); inside it the container waits
        # ImagePullBackOff `Back-off pulling image "..."`; after it the kubelet pulls again.
        # `imagepullbackoff` never recovers; `pullerror pulls=N` succeeds at attempt N + 1.
        failures = o.pulls if kind == "pullerror" else None
        attempt, at = 0, ready_at
        while True:
            gap = min(10.0 * 2**attempt, 300.0)
            if failures is not None and attempt >= failures:
                break  # this pull succeeds
            if t < at + gap:
                error_for = o.after if (attempt == 0 and kind == "imagepullbackoff") else 1.0
                if t < at + min(error_for, gap):
                    return {
                        "phase": "Pending",
                        "waiting": "ErrImagePull",
                        "pull": attempt,
                        "next": at + min(error_for, gap),
                    }
                return {
                    "phase": "Pending",
                    "waiting": "ImagePullBackOff",
                    "pull": attempt,
                    "next": at + gap,
                }
            attempt, at = attempt + 1, at + gap
        end = at + o.after
        if t < end:
            return {"phase": "Running", "running": at, "next": end}
        return {"phase": "Succeeded", "terminated": (at, end), "next": None}
    if kind == "errimagepull":
        return {"phase": "Pending", "waiting": "ErrImagePull", "next": None}
    if kind in WAITING:
        return {"phase": "Pending", "waiting": WAITING[kind][0], "next": None}
    if kind == "run":
        return {"phase": "Running", "running": ready_at, "next": None}
    if kind == "crashloop":
        restarts, run_start, backoff_end = _crash_cycles(o, ready_at, t)
        state: dict[str, Any] = {"phase": "Running", "restarts": restarts, "crash": True}
        if backoff_end is None:
            state.update(running=run_start, next=run_start + o.after)
            if restarts:
                state["last"] = (
                    run_start - min(10.0 * 2 ** (restarts - 1), 300.0) - o.after,
                    run_start - min(10.0 * 2 ** (restarts - 1), 300.0),
                )
        else:
            state.update(
                waiting="CrashLoopBackOff",
                next=backoff_end,
                last=(run_start, run_start + o.after),
                backoff=min(10.0 * 2 ** (restarts - 1), 300.0),
            )
        return state
    end = ready_at + o.after
    if t < end:
        return {"phase": "Running", "running": ready_at, "next": end}
    if kind in ("drained", "nodelost"):
        # Still running when the disruption starts; the deletion that follows ends it.
        return {"phase": "Running", "running": ready_at, "next": None, "disrupt": kind}
    phase = "Succeeded" if kind == "succeed" else "Failed"
    return {
        "phase": phase,
        "terminated": (ready_at, end),
        "next": None,
        "evicted": kind == "evicted",
        "preempted": kind == "preempted",
        "disrupt": kind if kind in ("nodeshutdown", "podgc") else None,
    }


def _terminated(o: Outcome, started: str, finished: str, code: int | None = None) -> dict[str, Any]:
    code = o.exit_code if code is None else code
    reason = "OOMKilled" if o.kind == "oomkilled" else ("Completed" if code == 0 else "Error")
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "startedAt": started,
        "finishedAt": finished,
        "containerID": "sandbox://0",
    }
    if o.termination:
        # kubelet reads at most 4096 bytes of the termination message file.
        terminated["message"] = o.termination[:4096]
    return {"terminated": terminated}


class Kubelet:
    def __init__(
        self,
        nodes: Sequence[Node],
        outcome_for: Callable[[Obj], Outcome],
        processes: ProcessRunner | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.outcome_for = outcome_for
        self.pods: dict[str, PodSim] = {}
        # Pods that really run (`processes.py`): their outcome is what their process does.
        self.processes = processes

    def _used(self, ctx: Ctx) -> dict[str, dict[str, Decimal]]:
        used: dict[str, dict[str, Decimal]] = {}
        for pod in ctx.store.list(ctx.store.rt("pods"), None):
            node = pod["spec"].get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                bucket = used.setdefault(node, {})
                for k, v in pod_requests(pod["spec"]).items():
                    bucket[k] = bucket.get(k, Decimal(0)) + v
                bucket["pods"] = bucket.get("pods", Decimal(0)) + 1
        return used

    def reconcile(self, ctx: Ctx) -> None:
        pods = ctx.store.list(ctx.store.rt("pods"), None)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self.pods if u not in live]:
            del self.pods[uid]
        if self.processes is not None:
            self.processes.forget(live)
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if uid not in self.pods:
                self.pods[uid] = PodSim(self.outcome_for(pod))
            sim = self.pods[uid]
            if pod["metadata"].get("deletionTimestamp"):
                if self.processes is not None:
                    self.processes.deleting(uid)
                self._terminate(ctx, pod, sim)
                continue
            if sim.bound_at is None and not self._schedule(ctx, pod, sim):
                continue
            if self.processes is not None and wants_process(pod):
                assert sim.bound_at is not None
                sim.outcome = self.processes.outcome(pod, sim.bound_at)
            self._play(ctx, pod, sim)

    def _schedule(self, ctx: Ctx, pod: Obj, sim: PodSim) -> bool:
        o = sim.outcome
        if o.kind == "unschedulable":
            n = max(len(self.nodes), 1)
            # What kube-scheduler says of a pod asking more GPUs than any node has.
            message = o.message or (
                f"0/{n} nodes are available: {n} Insufficient nvidia.com/gpu. preemption: 0/{n}"
                f" nodes are available: {n} {NOT_HELPFUL}."
            )
            node = None
        elif self.nodes:
            used = self._used(ctx)
            pods_spec = {**pod["spec"]}
            node, message = fit(self.nodes, used, pods_spec)
        else:
            node, message = DEFAULT_NODE, ""
        if node is None:
            status = dict(pod.get("status") or {})
            status["conditions"] = merge_conditions(
                status.get("conditions"),
                [
                    condition(
                        "PodScheduled",
                        False,
                        "Unschedulable",
                        message,
                        ctx.ts(),
                        lastProbeTime=None,
                        # The pod generation the scheduler judged (`schedule_one.go`
                        # `handleSchedulingFailure`, PodObservedGenerationTracking).
                        observedGeneration=pod["metadata"].get("generation", 1),
                    )
                ],
            )
            status["phase"] = "Pending"
            if "FailedScheduling" not in sim.seen:
                sim.seen.add("FailedScheduling")
                ctx.event(pod, "Warning", "FailedScheduling", message, "default-scheduler")
            ctx.set_status(pod, status)
            return False
        sim.bound_at, sim.node = ctx.t, node
        ctx.update({**pod, "spec": {**pod["spec"], "nodeName": node}}, subresource="binding")
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        ctx.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {node}",
            "default-scheduler",
        )
        return True

    def _terminate(self, ctx: Ctx, pod: Obj, sim: PodSim) -> None:
        """Stop a pod being deleted gracefully, then delete it for good.

        `pkg/kubelet/kuberuntime/kuberuntime_container.go` (`killContainer`): SIGTERM, then
        SIGKILL once the pod's grace period (`deletionGracePeriodSeconds`) is over. A process
        that exits on SIGTERM ends with 143 (128 + 15), one killed with 137 (128 + 9), both with
        reason `Error`; the pod ends `Failed`. A container that never started is reported as
        `pkg/kubelet/kubelet_pods.go` (`generateAPIPodStatus`) does: exit code 137, reason
        `ContainerStatusUnknown`. Then the status manager (`pkg/kubelet/status/
        status_manager.go`, `syncPod` once `canBeDeleted`) deletes the pod with grace 0; its
        finalizers (the Job controller's) may keep it a little longer.
        """
        meta, status = pod["metadata"], pod.get("status") or {}
        terminal = status.get("phase") in ("Succeeded", "Failed")
        if sim.bound_at is None and not terminal:
            # No kubelet ever ran it (the API server deleted it with grace 0, having no node):
            # the pod GC (`gc_controller.go`, `gcUnscheduledTerminating` ->
            # `markFailedAndDeletePod`) marks it Failed. That matters: under a podFailurePolicy
            # the Job controller counts a pod, and lets it go, only once it is Failed.
            ctx.confirm_deleted(ctx.set_status(pod, {**status, "phase": "Failed"}))
            return
        if meta.get("deletionGracePeriodSeconds") == 0:
            return
        if terminal:
            ctx.confirm_deleted(pod)
            return
        if sim.term_at is None:
            sim.term_at = ctx.t
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        if sim.unreachable:
            # No kubelet: the pod stays as it was until the pod GC
            # (`gc_controller.go`, `gcTerminating` / `markFailedAndDeletePod`) marks it Failed
            # and deletes it with grace 0, once its grace period is over.
            if ctx.t < sim.term_at + grace:
                ctx.wake_at(sim.term_at + grace)
                return
            updated = ctx.set_status(pod, {**status, "phase": "Failed"})
            ctx.confirm_deleted(updated)
            return
        o = sim.outcome
        running = False
        if sim.mounted_at is not None:
            state = timeline(
                o, pod["spec"].get("restartPolicy", "Always"), sim.mounted_at, sim.term_at
            )
            running = "running" in state
        if running:
            stop_at = sim.term_at + min(o.stop, grace)
            code = 143 if o.stop < grace else 137
        else:
            stop_at, code = sim.term_at, 137
        if ctx.t < stop_at:
            ctx.wake_at(stop_at)
            return
        statuses = []
        for c in pod["spec"].get("containers") or []:
            previous: dict[str, Any] = next(
                (s for s in status.get("containerStatuses") or [] if s.get("name") == c["name"]),
                {},
            )
            started = ((previous.get("state") or {}).get("running") or {}).get("startedAt")
            terminated: dict[str, Any] = {
                "exitCode": code,
                "reason": "Error" if running else "ContainerStatusUnknown",
                "finishedAt": ctx.ts(stop_at),
            }
            if running and started:
                terminated.update(startedAt=started, containerID="sandbox://0")
            else:
                terminated["message"] = (
                    "The container could not be located when the pod was terminated"
                )
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "restartCount": previous.get("restartCount", 0),
                    "started": False,
                    "ready": False,
                    "state": {"terminated": terminated},
                }
            )
        now = ctx.ts()
        new_status = {**status, "phase": "Failed", "containerStatuses": statuses}
        new_status["conditions"] = merge_conditions(
            status.get("conditions"),
            [
                condition("Ready", False, "PodCompleted", "", now),
                condition("ContainersReady", False, "PodCompleted", "", now),
            ],
        )
        for cond in new_status["conditions"]:
            if not cond.get("message"):
                cond.pop("message", None)
        if running:
            for c in pod["spec"].get("containers") or []:
                ctx.event(pod, "Normal", "Killing", f"Stopping container {c['name']}", "kubelet")
        updated = ctx.set_status(pod, new_status)
        ctx.confirm_deleted(updated)

    def _config_error(self, ctx: Ctx, pod: Obj, sim: PodSim, missing: dict[str, str]) -> bool:
        """A container's env names a Secret or ConfigMap (or key) that does not exist.

        `pkg/kubelet/kuberuntime/kuberuntime_container.go` (`startContainer`) fails
        `generateContainerConfig` (`kubelet_pods.go`, `makeEnvironmentVariables`): the
        container waits `CreateContainerConfigError` with the lookup's words (`secret "x" not
        found`, `couldn't find key K in Secret NS/x`), a Warning `Failed` Event `Error: ...`,
        and the pod worker tries again; it clears once the object syncs.
        """
        sim.mount_failures += 1
        sim.mount_retry_at = ctx.t + min(10.0 * 2 ** (sim.mount_failures - 1), 300.0)
        ctx.wake_at(sim.mount_retry_at)
        statuses = []
        for c in pod["spec"].get("containers") or []:
            problem = missing.get(c["name"])
            state: dict[str, Any] = (
                {"waiting": {"reason": "CreateContainerConfigError", "message": problem}}
                if problem
                else {"waiting": {"reason": "ContainerCreating"}}
            )
            if problem:
                ctx.event(pod, "Warning", "Failed", f"Error: {problem}", "kubelet")
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "restartCount": 0,
                    "started": False,
                    "ready": False,
                    "state": state,
                }
            )
        ctx.set_status(
            pod,
            {
                **(pod.get("status") or {}),
                "phase": "Pending",
                "hostIP": "10.0.0.1",
                "startTime": ctx.ts(sim.bound_at),
                "containerStatuses": statuses,
            },
        )
        return False

    def _mount(self, ctx: Ctx, pod: Obj, sim: PodSim) -> bool:
        """Set up the pod's Secret and ConfigMap volumes; False while one is missing.

        `pkg/kubelet/volumemanager/reconciler` mounts each volume through
        `operationexecutor/operation_generator.go` (`GenerateMountVolumeFunc`): a Secret
        volume whose Secret does not exist fails in `pkg/volume/secret/secret.go` (`SetUpAt`,
        the API's `secret "x" not found`), recorded as a Warning `FailedMount` Event
        `MountVolume.SetUp failed for volume "v" : secret "x" not found`, retried on the
        exponential back-off of `nestedpendingoperations` (500 ms doubling to 2 min 2 s). The
        pod stays Pending in ContainerCreating until the object appears; `optional: true`
        sources are skipped.
        """
        if sim.mounted_at is not None:
            return True
        if ctx.t < sim.mount_retry_at:
            ctx.wake_at(sim.mount_retry_at)
            return False
        missing = missing_volumes(ctx, pod)
        if not missing:
            config = missing_env(ctx, pod)
            if not config:
                sim.mounted_at = ctx.t
                return True
            return self._config_error(ctx, pod, sim, config)
        for volume, what in missing:
            ctx.event(
                pod,
                "Warning",
                "FailedMount",
                f'MountVolume.SetUp failed for volume "{volume}" : {what} not found',
                "kubelet",
            )
        sim.mount_failures += 1
        sim.mount_retry_at = ctx.t + min(0.5 * 2 ** (sim.mount_failures - 1), 122.0)
        ctx.wake_at(sim.mount_retry_at)
        statuses = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "restartCount": 0,
                "started": False,
                "ready": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            for c in pod["spec"].get("containers") or []
        ]
        status = {
            **(pod.get("status") or {}),
            "phase": "Pending",
            "hostIP": "10.0.0.1",
            "startTime": ctx.ts(sim.bound_at),
            "containerStatuses": statuses,
        }
        status["conditions"] = merge_conditions(
            status.get("conditions"),
            [
                condition("PodReadyToStartContainers", False, "", "", ctx.ts(sim.bound_at)),
                condition("PodScheduled", True, "", "", ctx.ts(sim.bound_at)),
            ],
        )
        for c in status["conditions"]:
            for key in ("reason", "message"):
                if not c.get(key):
                    c.pop(key, None)
        ctx.set_status(pod, status)
        return False

    def _reject(self, ctx: Ctx, pod: Obj, sim: PodSim) -> None:
        """The kubelet's admission refuses the pod (`pkg/kubelet/kubelet.go`, `rejectPod`;
        reasons from `pkg/kubelet/lifecycle/predicate.go`): phase Failed, `reason`, `message`
        `Pod was rejected: ...`, no container ever created (no containerStatuses), a Warning
        Event with the same reason."""
        o = sim.outcome
        if o.kind == "outofresource":
            requested = (
                sum(
                    int(nodes_quantity(v))
                    for c in pod["spec"].get("containers") or []
                    for k, v in ((c.get("resources") or {}).get("limits") or {}).items()
                    if k == o.resource
                )
                or 1
            )
            reason = f"OutOf{o.resource}"
            detail = o.message or (
                f"Node didn't have enough resource: {o.resource}, requested: {requested},"
                f" used: 0, capacity: 0"
            )
        else:
            reason = "UnexpectedAdmissionError"
            detail = o.message or (
                "Allocate failed due to requested number of devices unavailable for"
                f" {o.resource}. Requested: 1, Available: 0, which is unexpected"
            )
        message = f"Pod was rejected: {detail}"
        status = {
            **(pod.get("status") or {}),
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "startTime": ctx.ts(sim.bound_at),
        }
        if "rejected" not in sim.seen:
            sim.seen.add("rejected")
            ctx.event(pod, "Warning", reason, detail, "kubelet")
        ctx.set_status(pod, status)

    def _play(self, ctx: Ctx, pod: Obj, sim: PodSim) -> None:
        if sim.outcome.kind in REJECTED:
            self._reject(ctx, pod, sim)
            return
        if not self._mount(ctx, pod, sim):
            return
        o, b = sim.outcome, sim.mounted_at
        assert b is not None
        spec = pod["spec"]
        containers = [c["name"] for c in spec.get("containers") or []]
        target = o.container if o.container and o.container in containers else containers[0]
        state = timeline(o, spec.get("restartPolicy", "Always"), b, ctx.t)
        if state.get("next") is not None:
            ctx.wake_at(state["next"])
        statuses = []
        for c in spec.get("containers") or []:
            mine = c["name"] == target
            statuses.append(self._container_status(ctx, pod, c, state=state, o=o, mine=mine))
        phase = state["phase"]
        unready = [s["name"] for s in statuses if not s.get("ready")]
        ready = not unready
        now = ctx.ts()
        conds = [
            condition("PodReadyToStartContainers", ctx.t >= b + o.start, "", "", ctx.ts(b)),
            condition("Initialized", True, "", "", ctx.ts(b)),
            condition(
                "Ready",
                ready,
                ""
                if ready
                else ("PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"),
                "" if ready else f"containers with unready status: [{' '.join(unready)}]",
                now,
            ),
            condition("ContainersReady", ready, "" if ready else "ContainersNotReady", "", now),
            condition("PodScheduled", True, "", "", ctx.ts(b)),
        ]
        for c in conds:
            if not c["reason"]:
                del c["reason"]
            if not c["message"]:
                del c["message"]
        status: dict[str, Any] = {
            **(pod.get("status") or {}),
            "phase": phase,
            "hostIP": "10.0.0.1",
            "podIP": pod_ip(pod["metadata"]["uid"]),
            "startTime": ctx.ts(b),
            "containerStatuses": statuses,
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "ready": False,
                    "restartCount": 0,
                    **_terminated(Outcome(), ctx.ts(b), ctx.ts(b), 0),
                }
                for c in spec["initContainers"]
            ]
        if state.get("evicted"):
            message = o.message or (
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 12Mi."
            )
            status.update(reason="Evicted", message=message)
            conds.append(condition("DisruptionTarget", True, "TerminationByKubelet", message, now))
        if state.get("preempted"):
            message = (
                o.message or "default-scheduler: preempting to accommodate a higher priority pod"
            )
            conds.append(condition("DisruptionTarget", True, "PreemptionByScheduler", message, now))
        disrupt = state.get("disrupt")
        if disrupt == "drained":
            conds.append(
                condition("DisruptionTarget", True, "EvictionByEvictionAPI", EVICTION_API, now)
            )
        elif disrupt == "nodelost":
            conds.append(
                condition("DisruptionTarget", True, "DeletionByTaintManager", TAINT_MANAGER, now)
            )
        elif disrupt == "podgc":
            conds.append(condition("DisruptionTarget", True, "DeletionByPodGC", POD_GC, now))
        elif disrupt == "nodeshutdown":
            status.update(reason=NODE_SHUTDOWN[0], message=NODE_SHUTDOWN[1])
            conds.append(
                condition("DisruptionTarget", True, "TerminationByKubelet", NODE_SHUTDOWN[1], now)
            )
        status["conditions"] = merge_conditions(status.get("conditions"), conds)
        self._events(ctx, pod, sim, state=state, o=o, target=target)
        self._print(ctx, pod, sim, state=state, o=o, target=target)
        updated = ctx.set_status(pod, status)
        if state.get("preempted") and not sim.deleted:
            sim.deleted = True
            ctx.delete(updated)
        if disrupt in ("drained", "nodelost") and not sim.deleted:
            # A drain's Eviction API call and the taint manager delete the pod gracefully.
            sim.deleted = True
            sim.unreachable = disrupt == "nodelost"
            ctx.delete(updated)
        if disrupt == "podgc" and not sim.deleted:
            # The pod GC marks the orphaned pod Failed and deletes it at once (grace 0).
            sim.deleted = True
            ctx.confirm_deleted(updated)

    def _container_status(
        self,
        ctx: Ctx,
        pod: Obj,
        c: dict[str, Any],
        *,
        state: dict[str, Any],
        o: Outcome,
        mine: bool,
    ) -> dict[str, Any]:
        base: dict[str, Any] = {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "restartCount": state.get("restarts", 0) if mine else 0,
            "started": False,
            "ready": False,
        }
        if not mine:
            # Side containers follow the pod: created, running, then completed with it.
            if state.get("waiting") == "ContainerCreating":
                return {**base, "state": {"waiting": {"reason": "ContainerCreating"}}}
            if "terminated" in state:
                started, ended = state["terminated"]
                return {**base, "state": _terminated(Outcome(), ctx.ts(started), ctx.ts(ended), 0)}
            return {
                **base,
                "started": True,
                "ready": True,
                "state": {"running": {"startedAt": ctx.ts(pod_start(state, ctx))}},
            }
        if "last" in state:
            started, ended = state["last"]
            base["lastState"] = _terminated(
                o, ctx.ts(started), ctx.ts(ended), o.exit_code if o.kind != "crashloop" else o.code
            )
        if "waiting" in state:
            reason = state["waiting"]
            message = self._waiting_message(pod, c, reason, o, state)
            waiting = {"reason": reason, **({"message": message} if message else {})}
            return {**base, "state": {"waiting": waiting}}
        if "running" in state:
            return {
                **base,
                "started": True,
                "ready": True,
                "state": {"running": {"startedAt": ctx.ts(state["running"])}},
            }
        started, ended = state["terminated"]
        return {**base, "state": _terminated(o, ctx.ts(started), ctx.ts(ended))}

    def _waiting_message(
        self, pod: Obj, c: dict[str, Any], reason: str, o: Outcome, state: dict[str, Any]
    ) -> str:
        image, name = c.get("image", ""), c["name"]
        if reason == "ContainerCreating":
            return ""
        if o.message:
            return o.message
        if reason == "ErrImagePull":
            return pull_error(o, image)
        if reason == "ImagePullBackOff":
            return f'Back-off pulling image "{image}"'
        if reason == "CrashLoopBackOff":
            meta = pod["metadata"]
            return (
                f"back-off {int(state['backoff'])}s restarting failed container={name}"
                f" pod={meta['name']}_{meta['namespace']}({meta['uid']})"
            )
        template = WAITING.get(o.kind, ("", ""))[1]
        return template.format(image=image, container=name)

    def _events(
        self, ctx: Ctx, pod: Obj, sim: PodSim, *, state: dict[str, Any], o: Outcome, target: str
    ) -> None:
        def once(sig: str, kind: str, reason: str, message: str) -> None:
            if sig not in sim.seen:
                sim.seen.add(sig)
                ctx.event(pod, kind, reason, message, "kubelet")

        waiting = state.get("waiting")
        image = next(
            (c.get("image", "") for c in pod["spec"]["containers"] if c["name"] == target), ""
        )
        if "pull" in state:
            # One round of the image manager's Events per pull attempt (correlated into
            # `count` by the recorder): Failed `Failed to pull image`, `Error: ErrImagePull`,
            # then BackOff `Back-off pulling image` and `Error: ImagePullBackOff`.
            attempt = state["pull"]
            if waiting == "ErrImagePull":
                once(
                    f"pull{attempt}",
                    "Warning",
                    "Failed",
                    f'Failed to pull image "{image}": {pull_error(o, image)}',
                )
                once(f"pullerr{attempt}", "Warning", "Failed", "Error: ErrImagePull")
            else:
                once(f"backoff{attempt}", "Normal", "BackOff", f'Back-off pulling image "{image}"')
                once(f"backofferr{attempt}", "Warning", "Failed", "Error: ImagePullBackOff")
        elif waiting in (
            "ErrImagePull",
            "ImagePullBackOff",
            "InvalidImageName",
            "CreateContainerConfigError",
        ):
            once(
                waiting,
                "Warning",
                "Failed" if waiting != "ImagePullBackOff" else "BackOff",
                f"Error: {waiting}",
            )
        if "running" in state:
            once(
                f"Started{state.get('restarts', 0)}",
                "Normal",
                "Started",
                f"Started container {target}",
            )
        if waiting == "CrashLoopBackOff":
            once(
                f"BackOff{state.get('restarts')}",
                "Warning",
                "BackOff",
                "Back-off restarting failed container",
            )
        if state.get("evicted"):
            once(
                "Evicted",
                "Warning",
                "Evicted",
                o.message or "The node was low on resource: memory.",
            )
        if state.get("preempted"):
            once("Preempted", "Normal", "Preempted", "Preempted by a pod with higher priority")

    def _print(
        self, ctx: Ctx, pod: Obj, sim: PodSim, *, state: dict[str, Any], o: Outcome, target: str
    ) -> None:
        """Append the lines the target container has printed by now."""
        b = sim.mounted_at
        assert b is not None
        if "running" not in state and "terminated" not in state and "last" not in state:
            return
        start = b + o.start
        image = next(
            (c.get("image", "") for c in pod["spec"]["containers"] if c["name"] == target), ""
        )
        lines = [(start, f"sandbox: container {target} started (image {image})")]
        lines += [(start, line) for line in o.logs]
        if "terminated" in state or "last" in state:
            end = (state.get("terminated") or state["last"])[1]
            if o.kind == "oomkilled":
                lines.append((end, "Killed"))
            elif o.exit_code != 0 or o.kind in ("fail", "exit", "crashloop"):
                lines.append((end, f"sandbox: exiting with code {o.exit_code or o.code}"))
            else:
                lines.append((end, "sandbox: done"))
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], target)
        out = ctx.store.pod_logs.setdefault(key, [])
        for c in pod["spec"]["containers"]:
            ctx.store.pod_logs.setdefault((key[0], key[1], c["name"]), [])
        for when, line in lines[sim.logged :]:
            out.append((ctx.ts(when).replace("Z", ".000000000Z"), line))
        sim.logged = max(sim.logged, len(lines))


def missing_env(ctx: Ctx, pod: Obj) -> dict[str, str]:
    """Container name -> the first missing Secret / ConfigMap (or key) its env refers to."""
    namespace = pod["metadata"]["namespace"]
    out: dict[str, str] = {}

    def find(kind: str, name: str) -> Obj | None:
        resource = "secrets" if kind == "Secret" else "configmaps"
        return ctx.store.find(ctx.store.rt(resource), namespace, name)

    for c in pod["spec"].get("containers") or []:
        refs: list[tuple[str, dict[str, Any], str | None]] = []
        for env in c.get("env") or []:
            source = env.get("valueFrom") or {}
            if isinstance(source.get("secretKeyRef"), dict):
                refs.append(("Secret", source["secretKeyRef"], source["secretKeyRef"].get("key")))
            if isinstance(source.get("configMapKeyRef"), dict):
                ref = source["configMapKeyRef"]
                refs.append(("ConfigMap", ref, ref.get("key")))
        for env_from in c.get("envFrom") or []:
            if isinstance(env_from.get("secretRef"), dict):
                refs.append(("Secret", env_from["secretRef"], None))
            if isinstance(env_from.get("configMapRef"), dict):
                refs.append(("ConfigMap", env_from["configMapRef"], None))
        for kind, ref, key in refs:
            name = str(ref.get("name") or "")
            if not name or ref.get("optional"):
                continue
            obj = find(kind, name)
            if obj is None:
                out[c["name"]] = f'{kind.lower()} "{name}" not found'
                break
            if (
                key is not None
                and key not in (obj.get("data") or {})
                and key not in (obj.get("stringData") or {})
            ):
                out[c["name"]] = f"couldn't find key {key} in {kind} {namespace}/{name}"
                break
    return out


def pull_error(o: Outcome, image: str) -> str:
    """The runtime's words for a failed pull: `message=`, else a permanent "not found" for
    `imagepullbackoff` and a registry's 429 for the transient `pullerror`."""
    if o.message:
        return o.message
    if o.kind == "pullerror":
        registry, _, rest = image.partition("/")
        repo, _, tag = rest.rpartition(":")
        return (
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}":'
            f" unexpected status from HEAD request to https://{registry}/v2/{repo or rest}"
            f"/manifests/{tag or 'latest'}: 429 Too Many Requests"
        )
    return (
        f'failed to pull and unpack image "{image}": failed to resolve reference "{image}":'
        f" {image}: not found"
    )


def missing_volumes(ctx: Ctx, pod: Obj) -> list[tuple[str, str]]:
    """(volume name, `secret "x"` / `configmap "x"`) for each non-optional Secret or
    ConfigMap volume (or projected source) whose object is not in the pod's namespace."""
    namespace = pod["metadata"]["namespace"]
    out: list[tuple[str, str]] = []
    for volume in pod["spec"].get("volumes") or []:
        sources: list[tuple[str, dict[str, Any]]] = []
        if isinstance(volume.get("secret"), dict):
            sources.append(("secret", volume["secret"]))
        if isinstance(volume.get("configMap"), dict):
            sources.append(("configmap", volume["configMap"]))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if isinstance(source.get("secret"), dict):
                sources.append(("secret", source["secret"]))
            if isinstance(source.get("configMap"), dict):
                sources.append(("configmap", source["configMap"]))
        for kind, source in sources:
            name = source.get("secretName") if kind == "secret" else None
            name = name or source.get("name")
            if not name or source.get("optional"):
                continue
            resource = "secrets" if kind == "secret" else "configmaps"
            if ctx.store.find(ctx.store.rt(resource), namespace, str(name)) is None:
                out.append((str(volume.get("name")), f'{kind} "{name}"'))
                break
    return out


def pod_start(state: dict[str, Any], ctx: Ctx) -> float:
    return float(state.get("running", ctx.t))
