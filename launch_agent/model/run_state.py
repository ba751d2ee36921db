"""The state of one run as the agent sees it, and why it is in that state.

`RunState` is the agent's own vocabulary, independent of the workload kind: a Job, a JobSet and
a RayJob all end up in one of these seven states. It is what the reporter turns into W&B
mutations (ack, fail, warning, requeue) and what the dispatcher counts against `max_jobs`.

`Diagnosis` says *why*: a stable reason category (the `Reason` values are a contract, like
Prefect's diagnostics categories: dashboards, metrics and tests key on them), the container and
image involved, the scheduler's own message when it has one, and a one-line message written for
the ML engineer who reads it in the W&B UI. A diagnosis is either terminal (the run is over, or
is about to be failed by the agent) or a warning (reported once, the run goes on).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RunState(StrEnum):
    """Where a run is. The last four are terminal: once reached, the run is over."""

    # Suspended: waiting for admission by Kueue or by the agent's own quota engine.
    QUEUED = "queued"
    # Created, pods not running yet (scheduling, pulling images, initialising).
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The cluster took the run's pods away (scheduler preemption, node drain): requeue it.
    PREEMPTED = "preempted"
    # Deleted or aborted before it finished (stopped from the W&B UI, or by someone else).
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.PREEMPTED, RunState.STOPPED}
)


class Reason(StrEnum):
    """A stable category for a diagnosis. Values are Kubernetes' own words where one exists."""

    # Job conditions
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    POD_FAILURE_POLICY = "PodFailurePolicy"
    # Container termination
    OOM_KILLED = "OOMKilled"
    EXIT_CODE = "ExitCode"
    # Containers that never start
    IMAGE_PULL = "ImagePullBackOff"
    INVALID_IMAGE_NAME = "InvalidImageName"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    CREATE_CONTAINER_ERROR = "CreateContainerError"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    # Scheduling and disruption
    UNSCHEDULABLE = "Unschedulable"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    # The workload itself
    WORKLOAD_FAILED = "WorkloadFailed"
    STOPPED = "Stopped"
    DELETED = "Deleted"
    # tracking.start_timeout_seconds passed and no pod ever ran.
    START_TIMEOUT = "StartTimeout"


class Severity(StrEnum):
    TERMINAL = "terminal"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a run is where it is, for a person and for a machine."""

    reason: Reason
    # One line a person can act on, e.g. "container main was OOMKilled (memory limit 4Gi)".
    message: str
    severity: Severity
    pod: str | None = None
    container: str | None = None
    image: str | None = None
    exit_code: int | None = None
    # The scheduler's or controller's own words, verbatim (for "0/3 nodes are available: ...").
    detail: str | None = None

    @property
    def terminal(self) -> bool:
        return self.severity is Severity.TERMINAL

    @property
    def scheduler_message(self) -> str | None:
        """The scheduler's own words ("0/3 nodes are available: ...") for Unschedulable."""
        return self.detail if self.reason is Reason.UNSCHEDULABLE else None

    @property
    def key(self) -> str:
        """Identity for de-duplication: the same problem in the same container is one warning.

        The pod name is left out on purpose: a Job that retries hits the same OOM in a new pod,
        and the person reading W&B wants to hear about it once.
        """
        return "/".join(
            (self.reason.value, self.container or "", self.image or "", str(self.exit_code or ""))
        )
