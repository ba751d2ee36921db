"""The agent's configuration schema: W&B's `launch-config.yaml` keys plus this agent's own.

The W&B keys keep W&B's names, types and defaults (wandb 0.31.0 `sdk/launch/agent/config.py`),
so a file written for `wandb launch-agent` loads unchanged. Two keys that W&B documents but its
own pydantic model rejects (`queue`, `project`) are accepted here. Every other unknown key is an
error: a typo in an admin's file must never be ignored silently.

Resolution (defaults < file < environment < flags) and error reporting live in
`launch_agent.model.config_resolve`; this module is only the shape.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from launch_agent import __version__

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# The W&B launch project that holds run queues and launch agents (`LAUNCH_DEFAULT_PROJECT`).
LAUNCH_PROJECT = "model-registry"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RegistryConfig(_Strict):
    """W&B's `registry` block (deprecated by W&B in favour of `builder.destination`)."""

    type: Literal["ecr", "acr", "gcr"] | None = None
    uri: str | None = None
    repository: str | None = None
    account_id: str | None = None
    region: str | None = None
    image_name: str | None = Field(default=None, alias="image-name")
    project: str | None = None


class EnvironmentConfig(_Strict):
    """W&B's `environment` block: the cloud the build context store and registry live in."""

    type: Literal["aws", "gcp", "azure"] | None = None
    region: str | None = None
    project: str | None = None


# Transports a git build source may use. `file`, `ext` and `fd` are never on the list: a
# submitter's URL must not reach the agent's own disk or run a command.
GitScheme = Literal["https", "ssh", "git", "http"]


def _default_schemes() -> list[GitScheme]:
    return ["https", "ssh"]


class GitSourceConfig(_Strict):
    """How the agent fetches git build sources (this agent's key, `builder.git`)."""

    # `git` and `http` are unauthenticated and unencrypted: an admin opts in (loopback test
    # servers, an internal mirror).
    allowed_schemes: list[GitScheme] = Field(default_factory=_default_schemes, min_length=1)
    # A git-credentials file (`https://user:token@host` lines; the chart's `gitCreds`). Its
    # helper is configured only for hosts that have a line in it.
    credentials_file: str | None = None
    # `GIT_SSH_COMMAND` for ssh sources (the chart's `sshAuthSecrets` config).
    ssh_command: str | None = None


MIB = 1024 * 1024


class ImageTrustConfig(_Strict):
    """Which registry images a build may be skipped for (this agent's key, `builder.trust`).

    A build is skipped only when the registry's digest for the content-addressed tag is one
    the agent itself built (its record, a ConfigMap builds cannot write); see docs/builds.md.
    """

    # A tag whose digest is not on the record (pushed by someone else: another build's `RUN`
    # step holds the push credential): `rebuild` builds it again and runs the new digest;
    # `refuse` fails the run instead. Either way it is reported (log, metric, W&B).
    untrusted_tag: Literal["rebuild", "refuse"] = "rebuild"
    # The record's ConfigMap (default `<agent_name>-image-digests`) and namespace (default
    # LAUNCH_AGENT_BUILD_RECORD_NAMESPACE, which the chart sets to the agent's own; else
    # `leader_election.namespace`, else the first of `namespaces`).
    record_name: str | None = None
    record_namespace: str | None = None
    # Context hashes the record keeps (the most recently built); with up to 3 digests each it
    # stays far below a ConfigMap's 1 MiB. A hash pruned from it is built again when needed.
    max_record_entries: int = Field(default=2000, ge=10, le=3000)

    @field_validator("record_name", "record_namespace")
    @classmethod
    def _record_names(cls, value: str | None) -> str | None:
        if value is not None and not DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes name (a DNS label)")
        return value


class BuilderConfig(_Strict):
    """W&B's `builder` block, with its Kaniko keys spelled as W&B spells them."""

    type: Literal["docker", "kaniko", "noop"] | None = None
    destination: str | None = None
    platform: Literal["linux/amd64", "linux/arm64"] | None = None
    build_context_store: str | None = Field(default=None, alias="build-context-store")
    build_job_name: str = Field(default="wandb-launch-container-build", alias="build-job-name")
    secret_name: str | None = Field(default=None, alias="secret-name")
    secret_key: str | None = Field(default=None, alias="secret-key")
    kaniko_image: str = Field(
        default="gcr.io/kaniko-project/executor:v1.23.2", alias="kaniko-image"
    )
    # A Job manifest overlay for the build Job; free-form by design (W&B does the same).
    kaniko_config: dict[str, Any] | None = Field(default=None, alias="kaniko-config")
    git: GitSourceConfig = GitSourceConfig()
    trust: ImageTrustConfig = ImageTrustConfig()
    # Answers of registries, their token services and cloud identity endpoints (this agent's
    # key): manifests and tokens are a few KiB, and registries cap manifests at 4 MiB.
    max_response_bytes: int = Field(default=4 * MIB, ge=64 * 1024, le=256 * MIB)

    @model_validator(mode="after")
    def _secret_pair(self) -> BuilderConfig:
        if (self.secret_name is None) != (self.secret_key is None):
            raise ValueError("secret-name and secret-key must be set together")
        return self


class PollConfig(_Strict):
    """How often the agent pops: fast right after it found work, slower when queues are idle."""

    active_interval_seconds: float = Field(default=0.5, gt=0)
    idle_interval_seconds: float = Field(default=10.0, gt=0)
    # Pops one request may make from one queue while it keeps returning items (never more
    # than the agent can start); an idle queue is popped once per round.
    max_pops_per_queue: int = Field(default=8, ge=1, le=256)

    @model_validator(mode="after")
    def _ordered(self) -> PollConfig:
        if self.active_interval_seconds > self.idle_interval_seconds:
            raise ValueError("active_interval_seconds must not exceed idle_interval_seconds")
        return self


class HealthConfig(_Strict):
    """The one HTTP port that serves /healthz, /readyz and /metrics."""

    # All interfaces: kubelet probes and Prometheus reach the pod IP, not loopback.
    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=0, le=65535)


class StatusConfig(_Strict):
    """The status page (`/` and `/api/status` on the health port)."""

    # A bearer token for `/` and `/api/status` (LAUNCH_AGENT_STATUS_TOKEN; the chart sets it
    # from a Secret). Unset: the page is open to whoever reaches the port, like `/metrics`.
    token: SecretStr | None = None
    # The page reloads itself this often (`<meta http-equiv="refresh">`).
    refresh_seconds: int = Field(default=10, ge=1, le=3600)


class KueueConfig(_Strict):
    """Delegation to Kueue (`quota.mode: kueue`); the quota issue fills in the rest."""

    default_local_queue: str | None = None


class QuotaConfig(_Strict):
    """Admission: `off` (only `max_jobs`), `agent` (the elastic quota tree) or `kueue`."""

    mode: Literal["off", "agent", "kueue"] = "off"
    # The elastic quota tree; its schema and rules (R1) are checked by `launch_agent.quota`.
    tree: dict[str, Any] | None = None
    kueue: KueueConfig = KueueConfig()
    # Runs popped but not admitted yet, per quota leaf (agent) or Kueue LocalQueue (kueue):
    # work the agent cannot start soon stays in W&B for other agents.
    max_pending_per_leaf: int = Field(default=8, ge=1)


class WorkerAccess(_Strict):
    """Read access to one MultiKueue worker cluster (docs/multicluster.md)."""

    # The MultiKueueCluster's name on the manager: what a Workload's `status.clusterName` says.
    name: str = Field(min_length=1, max_length=253)
    # A kubeconfig for the worker (the chart mounts it from a Secret); its current context, or
    # `context`, is used.
    kubeconfig: str = Field(min_length=1)
    context: str | None = None

    @field_validator("name")
    @classmethod
    def _object_name(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(
                f"{value!r} is not a Kubernetes object name (the worker's MultiKueueCluster)"
            )
        return value


class MultiKueueConfig(_Strict):
    """The worker clusters of queue specs with `spec.kueue.multiKueue`: the agent reads the
    pods, log tails and Events of its runs there (read-only); the manager is the agent's own
    cluster."""

    workers: list[WorkerAccess] = Field(default_factory=list)

    @field_validator("workers")
    @classmethod
    def _unique(cls, value: list[WorkerAccess]) -> list[WorkerAccess]:
        names = [w.name for w in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"worker {', '.join(map(repr, twice))} is listed more than once")
        return value


# The image the standard sweep scheduler (`wandb scheduler ...`) runs from by default: this
# project's own image, which ships the wandb package.
DEFAULT_SCHEDULER_IMAGE = "ghcr.io/launch-agent/launch-agent:" + __version__


class SweepsConfig(_Strict):
    """W&B sweeps on Launch (docs/sweeps.md)."""

    # The image of the standard scheduler's Job; it must provide the `wandb` command.
    scheduler_image: str = Field(default=DEFAULT_SCHEDULER_IMAGE, min_length=1)
    # Where scheduler Jobs run (it must be one of `namespaces`); default: the first of them.
    scheduler_namespace: str | None = None
    # A workload that succeeded while its W&B run stayed `pending` this long is failed with
    # W&B's "failed to call wandb.init" (W&B's `RUN_INFO_GRACE_PERIOD`, 60 s).
    run_init_grace_seconds: float = Field(default=60.0, ge=0)
    # Whether the agent checks that a succeeded run called wandb.init at all.
    check_wandb_init: bool = True


class TrackingConfig(_Strict):
    """How the agent follows runs it created (informers only; nothing here is a poll per run)."""

    # A pod unschedulable this long fails the run with the scheduler's message (and is deleted).
    unschedulable_timeout_seconds: float = Field(default=600.0, gt=0)
    # A preempted run is pushed back onto its queue at most this many times (W&B's agent: 5).
    max_requeues: int = Field(default=5, ge=0)
    # Lines of the failing container's log attached to a failure message.
    log_tail_lines: int = Field(default=50, ge=0, le=1000)
    # Stop checks (tracking/stop_schedule.py, docs/operations.md "W&B load"): runs younger
    # than `stop_check_young_seconds` are asked about every `stop_check_seconds`, older ones
    # once every `stop_check_old_seconds` each, spread evenly; `stop_check_batch` runs per
    # RunStoppedStatus request and never more than `stop_check_max_requests_per_minute`.
    stop_check_seconds: float = Field(default=10.0, gt=0)
    stop_check_young_seconds: float = Field(default=3600.0, ge=0)
    stop_check_old_seconds: float = Field(default=300.0, gt=0)
    stop_check_batch: int = Field(default=100, ge=1, le=1000)
    stop_check_max_requests_per_minute: int = Field(default=100, ge=1)
    # W&B's run start deadline (its chart's agent.startTimeout, WANDB_LAUNCH_START_TIMEOUT): a
    # run none of whose pods runs this long after it was created (or admitted) is failed, with
    # the Warning Events that explain it (FailedCreate, FailedMount, ...).
    start_timeout_seconds: float = Field(default=1800.0, gt=0)
    # A pull failing for a reason that can recover (429, timeouts, registry 5xx) fails the run
    # only once it has lasted this long; manifest unknown, unauthorized and invalid names fail
    # at once.
    image_pull_grace_seconds: float = Field(default=300.0, ge=0)
    # CreateContainerConfigError (a missing Secret or ConfigMap key) clears once the object is
    # synced; the run is failed only if it lasts this long.
    container_config_grace_seconds: float = Field(default=300.0, ge=0)

    @model_validator(mode="after")
    def _stop_tiers(self) -> TrackingConfig:
        if self.stop_check_old_seconds < self.stop_check_seconds:
            raise ValueError(
                f"stop_check_old_seconds ({self.stop_check_old_seconds:g}) must be at least"
                f" stop_check_seconds ({self.stop_check_seconds:g})"
            )
        return self


class LeaderElectionConfig(_Strict):
    """Replicas elect one leader through a coordination.k8s.io/v1 Lease (runtime/leader.py).

    client-go's timing and its rule: lease_duration > renew_deadline > retry_period, and a
    leader that could not renew for `renew_deadline` stops leading before its lease expires.
    """

    enabled: bool = False
    lease_name: str | None = None  # default: the agent name
    # Where the Lease lives (the chart: the agent's own namespace, from the downward API).
    namespace: str | None = None
    # This replica's name in the Lease (the chart: the pod name); default: the hostname.
    identity: str | None = None
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)

    @model_validator(mode="after")
    def _timing(self) -> LeaderElectionConfig:
        if not (
            self.lease_duration_seconds > self.renew_deadline_seconds > self.retry_period_seconds
        ):
            raise ValueError(
                "need lease_duration_seconds > renew_deadline_seconds > retry_period_seconds, got"
                f" {self.lease_duration_seconds:g}, {self.renew_deadline_seconds:g},"
                f" {self.retry_period_seconds:g}"
            )
        return self


class LimitsConfig(_Strict):
    """Bounds on a popped item, checked before anything recursive walks it.

    An item over a bound is failed in W&B with the reason (`runSpec: nested deeper than ...`);
    the agent goes on. The depth bound keeps every later walk (merge, render, JSON encoding)
    far below Python's recursion limit, hence its ceiling.
    """

    # The runSpec as W&B sends it, in bytes of compact JSON.
    max_item_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1024 * 1024)
    # Nesting of the runSpec: `{}` is 1 level, `{"a": []}` 2.
    max_item_depth: int = Field(default=100, ge=8, le=500)


class WandbConfig(_Strict):
    """How the agent reads W&B's answers (this agent's key, `wandb`)."""

    # The largest GraphQL answer read, in bytes (decompressed). Counted while the answer
    # streams and refused at the limit, so a compromised W&B (or anything between) cannot
    # exhaust the agent's memory. A pop's answer holds up to `poll.max_pops_per_queue` items
    # per queue, each at most `limits.max_item_bytes`.
    max_response_bytes: int = Field(default=32 * MIB, ge=MIB, le=1024 * MIB)


class KubernetesConfig(_Strict):
    """The agent's side of the Kubernetes API's limits (this agent's key, `kubernetes`).

    One token bucket per API server client (the agent's cluster and each MultiKueue worker),
    as client-go's `rest.Config` QPS and Burst: every request, retries and watch opens
    included, takes a token. The defaults are far above client-go's (5/10; 20/30 for
    kube-controller-manager) because the agent makes about one request per run (its create)
    and dispatches 500-700 runs/s from a deep queue (`launch-agent bench dispatch`): 20 per
    second would make it slower than the reference agent. They bound a runaway loop; the API
    server's priority and fairness is what shares the server, and its 429s are honoured.
    """

    qps: float = Field(default=1000.0, gt=0)
    burst: int = Field(default=2000, ge=1)


class DispatchConfig(_Strict):
    """How fast the agent starts runs (this agent's key, `dispatch`)."""

    # Runs started per second per W&B (entity, project), in a token bucket of one second's
    # worth (at least one run): a deep queue does not ask W&B to create more runs at once than
    # it can. None: no pace (the default).
    max_runs_per_second_per_project: float | None = Field(default=None, gt=0)


class AgentConfig(_Strict):
    """The resolved configuration of one agent."""

    # --- W&B launch-config.yaml keys -------------------------------------------------------
    queues: list[str] = Field(default_factory=list)
    entity: str | None = None
    max_jobs: int = 1
    max_schedulers: int = 1
    secure_mode: bool = False
    verbosity: int = Field(default=0, ge=0)
    stopped_run_timeout: int = Field(default=60, ge=0)
    registry: RegistryConfig | None = None
    environment: EnvironmentConfig | None = None
    builder: BuilderConfig | None = None
    # Documented by W&B but rejected by its own model; accepted here (see docs/configuration.md).
    queue: str | None = None
    project: str | None = None

    # --- this agent's keys ---------------------------------------------------------------
    agent_name: str = "launch-agent"
    base_url: str = "https://api.wandb.ai"
    api_key: SecretStr | None = None
    # The per-namespace Secret that run pods read WANDB_API_KEY from (never the key itself in a
    # manifest). Default `wandb-api-key-<agent_name>`: the name W&B's and our Helm chart use.
    api_key_secret: str | None = None
    api_key_secret_key: str = "password"
    queue_specs_dir: str = "queue-specs"
    namespaces: list[str] = Field(default_factory=lambda: ["default"])
    poll: PollConfig = PollConfig()
    health: HealthConfig = HealthConfig()
    status: StatusConfig = StatusConfig()
    log_format: Literal["text", "json"] = "text"
    quota: QuotaConfig = QuotaConfig()
    tracking: TrackingConfig = TrackingConfig()
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    limits: LimitsConfig = LimitsConfig()
    wandb: WandbConfig = WandbConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    dispatch: DispatchConfig = DispatchConfig()
    sweeps: SweepsConfig = SweepsConfig()
    multikueue: MultiKueueConfig = MultiKueueConfig()
    # On SIGTERM/SIGINT: how long in-flight creates and the final reports may take.
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    # How often the queue specs directory is checked for edits (a ConfigMap update).
    specs_reload_seconds: float = Field(default=5.0, gt=0)
    # Kaniko build Jobs run as root, so they run apart from the agent: in their own namespace
    # (default: the first of `namespaces`) under their own service account (default: the
    # namespace's `default`). The Helm chart sets both.
    kaniko_namespace: str | None = None
    kaniko_service_account: str | None = None
    # A dockerconfigjson Secret (in the Kaniko namespace) with push credentials for registries
    # that have no workload identity; W&B's `WANDB_LAUNCH_KANIKO_AUTH_SECRET`.
    kaniko_docker_config_secret: str | None = None
    # W&B's PVC contexts (`kanikoPvcName`; `WANDB_LAUNCH_KANIKO_PVC_NAME` and `_MOUNT_PATH` in
    # wandb's kaniko_builder.py): the agent writes each context into this claim, mounted in the
    # agent at the mount path, and the build Job mounts the claim at /context. Replaces
    # `builder.build-context-store`.
    kaniko_pvc_name: str | None = None
    kaniko_pvc_mount_path: str = "/kaniko"
    # The Secret (key `password`, in the Kaniko namespace) holding the Azure storage account key
    # Kaniko reads Azure Blob contexts with (`AZURE_STORAGE_ACCESS_KEY`); the chart's
    # `azureStorageAccessKey`.
    azure_storage_key_secret: str | None = None
    # A PEM file of CAs the agent's W&B and registry clients trust besides the system roots
    # (a self-hosted W&B behind a private CA); else LAUNCH_AGENT_CA_BUNDLE, SSL_CERT_FILE or
    # REQUESTS_CA_BUNDLE (`adapters/tls.py`). The chart's `customCABundle` sets the variables.
    ca_bundle: str | None = None

    @field_validator("max_jobs", "max_schedulers")
    @classmethod
    def _limit(cls, value: int) -> int:
        if value < -1 or value == 0:
            raise ValueError("must be a positive integer, or -1 for unlimited")
        return value

    @field_validator("agent_name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS_LABEL.match(value):
            raise ValueError(
                "must be a DNS label (lower-case letters, digits and '-', at most 63 characters)"
                " because it becomes a Kubernetes label value"
            )
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must name at least one namespace")
        for ns in value:
            if not DNS_LABEL.match(ns):
                raise ValueError(f"{ns!r} is not a valid namespace name")
        return value

    @field_validator(
        "kaniko_namespace",
        "kaniko_service_account",
        "kaniko_docker_config_secret",
        "azure_storage_key_secret",
    )
    @classmethod
    def _optional_name(cls, value: str | None) -> str | None:
        if value is not None and not DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a valid Kubernetes name (a DNS label)")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @property
    def all_queues(self) -> list[str]:
        """`queues` plus the singular `queue` key, without duplicates, in order."""
        names = list(self.queues)
        if self.queue and self.queue not in names:
            names.append(self.queue)
        return names

    @property
    def scheduler_namespace(self) -> str:
        return self.sweeps.scheduler_namespace or (self.namespaces or ["default"])[0]

    @model_validator(mode="after")
    def _scheduler_namespace_served(self) -> AgentConfig:
        ns = self.sweeps.scheduler_namespace
        if ns is not None and ns not in self.namespaces:
            raise ValueError(
                f"sweeps.scheduler_namespace {ns!r} is not one of `namespaces`"
                f" ({', '.join(self.namespaces)}): the agent tracks only those"
            )
        return self

    @property
    def api_key_secret_name(self) -> str:
        return self.api_key_secret or f"wandb-api-key-{self.agent_name}"

    @property
    def unlimited_jobs(self) -> bool:
        return self.max_jobs == -1


# Keys whose values never leave the process in clear text (`config show`, logs).
SECRET_FIELDS = frozenset({"api_key"})
# Nested keys that are secrets too (dotted paths).
SECRET_PATHS = frozenset({("status", "token")})
# Keys that may not come from a file: credentials belong in the environment or a Secret.
ENV_ONLY_FIELDS = frozenset({"api_key"})
