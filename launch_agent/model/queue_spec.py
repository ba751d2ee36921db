"""The queue spec (v1): what an admin allows a W&B run queue to run, typed.

A queue spec is a YAML document (`apiVersion: launch-agent/v1`, `kind: QueueSpec`). Its shape
is checked against the JSON Schema shipped in `launch_agent/render/schemas/`, which also gives
editors completion; `launch_agent.render.spec_load` does that, normalises the template (either
W&B queue-config form) and then builds the frozen objects below with `QueueSpec.from_dict`.
This module holds only the shape, so every layer can pass a spec around without importing the
render machinery.

`Problem` is the one error currency of specs, items and renders: a path into the input and a
reason a person can act on. Producers collect all problems instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "launch-agent/v1"
KIND = "QueueSpec"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an input: where (a dotted path, or a line/column) and why."""

    path: str
    reason: str
    # Where in the input text, when it came from a file (`render.spec_load` fills these in).
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)

    @property
    def where(self) -> str:
        """`line:column: ` (or nothing) to put after a file name."""
        return f"{self.line}:{self.column}: " if self.line is not None else ""

    def __str__(self) -> str:
        at = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        return f"{at}{self.path or '(root)'}: {self.reason}"


class InvalidInput(ValueError):
    """Raised with every problem found, never just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


@dataclass(frozen=True, slots=True)
class SecurityExceptions:
    """The admin's named exceptions to the enforced restricted Pod Security Standard.

    Everything defaults to "not granted": an empty `security:` block means fully restricted
    pods that cannot talk to the Kubernetes API.
    """

    service_account_name: str | None = None
    automount_service_account_token: bool = False
    run_as_root: bool = False
    run_as_user: int | None = None
    privileged: bool = False
    allow_privilege_escalation: bool = False
    capabilities: frozenset[str] = frozenset()
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    host_ports: bool = False
    host_paths: tuple[str, ...] = ()
    volume_types: frozenset[str] = frozenset()
    seccomp_unconfined: bool = False
    apparmor_unconfined: bool = False
    sysctls: frozenset[str] = frozenset()
    # Secrets a submitter's layer may name (env, envFrom, volumes, imagePullSecrets, ...). The
    # template may name any Secret: the admin wrote it. Nothing else the submitter names is
    # allowed, even under a `**` grant, since any pod in the namespace can read any Secret.
    secrets: frozenset[str] = frozenset()
    # Audiences a submitter's projected `serviceAccountToken` volume source may ask for. A
    # projection mints a token whatever `automountServiceAccountToken` says.
    service_account_token_audiences: frozenset[str] = frozenset()
    # TrainJob runtimes (by name) whose pod templates the admin keeps restricted themselves.
    training_runtimes: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SecurityExceptions:
        run_as_user = data.get("runAsUser")
        return cls(
            service_account_name=data.get("serviceAccountName"),
            automount_service_account_token=bool(data.get("automountServiceAccountToken", False)),
            # runAsUser: 0 is root; granting it without runAsRoot would be a contradiction.
            run_as_root=bool(data.get("runAsRoot", False)) or run_as_user == 0,
            run_as_user=run_as_user,
            privileged=bool(data.get("privileged", False)),
            allow_privilege_escalation=bool(data.get("allowPrivilegeEscalation", False)),
            capabilities=frozenset(data.get("capabilities", ())),
            host_network=bool(data.get("hostNetwork", False)),
            host_pid=bool(data.get("hostPID", False)),
            host_ipc=bool(data.get("hostIPC", False)),
            host_ports=bool(data.get("hostPorts", False)),
            host_paths=tuple(data.get("hostPaths", ())),
            volume_types=frozenset(data.get("volumeTypes", ())),
            seccomp_unconfined=bool(data.get("seccompUnconfined", False)),
            apparmor_unconfined=bool(data.get("appArmorUnconfined", False)),
            sysctls=frozenset(data.get("sysctls", ())),
            secrets=frozenset(data.get("secrets", ())),
            service_account_token_audiences=frozenset(data.get("serviceAccountTokenAudiences", ())),
            training_runtimes=frozenset(data.get("trainingRuntimes", ())),
        )


@dataclass(frozen=True, slots=True)
class WorkloadDefaults:
    """Per-spec overrides of the agent-wide defaults (`RenderSettings`); None = use those."""

    backoff_limit: int | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class CustomKind:
    """How to find the pods of a kind the agent has no table row for."""

    pod_template_paths: tuple[str, ...]
    suspend_path: str | None = None
    plural: str | None = None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One admin-owned queue spec. `template` is the normalised workload manifest."""

    name: str
    queues: tuple[str, ...]
    namespace: str
    template: Mapping[str, Any]
    overridable: tuple[str, ...] = ()
    security: SecurityExceptions = SecurityExceptions()
    gke_ml_diagnostics: bool = False
    kueue_queue_name: str | None = None
    # `spec.kueue.priorityClass`: a Kueue WorkloadPriorityClass for the queue's runs.
    kueue_priority_class: str | None = None
    # `spec.kueue.multiKueue`: the runs go through Kueue's MultiKueue to a worker cluster.
    multi_kueue: bool = False
    quota_leaf: str | None = None
    custom_kind: CustomKind | None = None
    defaults: WorkloadDefaults = WorkloadDefaults()
    description: str | None = None
    # `spec.sweeps.customSchedulers`: scheduler jobs (the submitter's code) may run here.
    custom_schedulers: bool = False
    # What the admin's template held at the paths the agent sets itself (`metadata.name`,
    # `metadata.generateName`), which `template` no longer has: W&B's server merges the queue
    # config into every item, and an echo of what the admin wrote is no override.
    written: Mapping[tuple[object, ...], Any] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    # Free for the renderer to cache per-spec precomputation (compiled globs, ...).
    cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def api_version(self) -> str:
        return str(self.template.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.template.get("kind", ""))

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        template: Mapping[str, Any],
        written: Mapping[tuple[object, ...], Any] | None = None,
    ) -> QueueSpec:
        """Build from a document that already passed the JSON Schema.

        `template` is the normalised manifest (`spec.template` after unwrapping W&B's
        `kubernetes:` form and stripping its non-manifest keys), `written` what it held at
        the paths the agent sets itself.
        """
        spec = data["spec"]
        custom = None
        if "podTemplatePaths" in spec:
            custom = CustomKind(
                pod_template_paths=tuple(spec["podTemplatePaths"]),
                suspend_path=spec.get("suspendPath"),
                plural=spec.get("plural"),
            )
        d = spec.get("defaults", {})
        return cls(
            name=data["metadata"]["name"],
            queues=tuple(spec["queues"]),
            namespace=spec["namespace"],
            template=template,
            overridable=tuple(spec.get("overridable", ())),
            security=SecurityExceptions.from_dict(spec.get("security", {})),
            gke_ml_diagnostics=bool(
                spec.get("diagnostics", {}).get("gkeManagedMLDiagnostics", False)
            ),
            kueue_queue_name=spec.get("kueue", {}).get("queueName"),
            kueue_priority_class=spec.get("kueue", {}).get("priorityClass"),
            multi_kueue=bool(spec.get("kueue", {}).get("multiKueue", False)),
            quota_leaf=spec.get("quota", {}).get("leaf"),
            custom_kind=custom,
            defaults=WorkloadDefaults(
                backoff_limit=d.get("backoffLimit"),
                ttl_seconds_after_finished=d.get("ttlSecondsAfterFinished"),
                active_deadline_seconds=d.get("activeDeadlineSeconds"),
            ),
            description=data["metadata"].get("description"),
            custom_schedulers=bool(spec.get("sweeps", {}).get("customSchedulers", False)),
            written=dict(written or {}),
        )
