"""One table of workload kinds: everything kind-specific the renderer, quota and tracking need.

Each row says where a kind keeps its pod templates, how its replicas turn into pods (pod sets
for quota), how it is suspended (for Kueue and quota), which defaults apply, where the run
itself is written (`run_targets`: the container or trainer that gets the image, command, args
and W&B environment) and how long its name may be. Code outside this module never branches on
a kind; it reads the row: the pipeline writes the run where `run_targets` says and the
override policy reads the same places (render/policy.py, `overrides.args`), and the pipeline,
the admission decisions and the quota driver suspend through `set_suspended`. Kinds not in
the table are accepted only when the queue spec declares `podTemplatePaths` (`custom_kind`).

Name limits: every kind derives child names from the workload name and those must stay DNS
labels (≤ 63 characters), so each row leaves room for its suffixes:

| kind | derived names | max |
| --- | --- | --- |
| Job | pods `<name>-<5>`, label `batch.kubernetes.io/job-name` | 63 |
| JobSet | Jobs `<name>-<rjob>-<i>`, pods and hostnames `<name>-<rjob>-<i>-<j>` | 40 |
| PyTorchJob | Services and pods `<name>-worker-<i>` | 50 |
| TrainJob | a JobSet `<name>` with replicated job `dataset-initializer` | 36 |
| LeaderWorkerSet | StatefulSets `<name>-<group>` + controller-revision-hash label | 40 |
| RayJob | KubeRay rejects RayJob names over 47 characters | 47 |
| Volcano Job | pods `<name>-<task>-<i>` | 40 |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from launch_agent.model.queue_spec import (
    CustomKind,
    InvalidInput,
    Problem,
    QueueSpec,
    SecurityExceptions,
)
from launch_agent.render import generated
from launch_agent.render.edit import child_map, main_container
from launch_agent.render.paths import (
    AnyItem,
    Glob,
    Item,
    Path,
    find,
    get,
    item_label,
    parse_glob,
    resolve,
)

PodSet = tuple[int, Mapping[str, Any]]
"""`(count, pod template)`: `count` pods are created from this PodTemplateSpec."""

EnvTarget = Literal["containers", "trainer"]
EntryTarget = Literal["containers", "rayjob", "trainer"]
KueueMode = Literal["suspend", "label"]
# A default: (glob of the parent mapping, key). Plain-key parents are created when missing.
Default = tuple[str, str]
Refusals = Callable[[Mapping[str, Any], SecurityExceptions], list[Problem]]
OperatorContainers = Callable[[Mapping[str, Any]], list[tuple[str, dict[str, Any]]]]


# Kueue's `MultiKueueControllerName` (apis/kueue/v1beta2): the managedBy value MultiKueue takes.
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
NO_MULTIKUEUE_ADAPTER = (
    "Kueue's MultiKueue dispatches only the kinds it has an adapter for (batch Job, JobSet,"
    " Kubeflow jobs, RayJob, TrainJob; a custom kind also needs Kueue's"
    " MultiKueueAdaptersForCustomJobs gate and a dispatcher of its own): serve this queue"
    " without spec.kueue.multiKueue"
)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True, slots=True)
class KindInfo:
    api_version: str
    kind: str
    plural: str
    install_hint: str
    pod_templates: tuple[str, ...]  # in priority order: the first match is the primary pod
    pod_sets: Callable[[Mapping[str, Any]], list[PodSet]]
    suspend_path: tuple[str, ...] | None = None
    kueue: KueueMode | None = None
    gke_diagnostics: bool = False
    max_name: int = 40
    main_container: str | None = None  # None: the first container
    backoff_limit: Default | None = None
    ttl: Default | None = None
    deadline: Default | None = None
    # The ttl default applies only when this flag is true; unset, it is defaulted to true.
    ttl_requires: Default | None = None
    restart_policy: str | None = None  # default restartPolicy of pod templates
    env_target: EnvTarget = "containers"
    entry_target: EntryTarget = "containers"
    builtin: bool = False
    # Pods the operator generates (`generated.py`): what refuses the manifest, what writes
    # out a generated pod so it is enforced, and which operator-built containers to restrict.
    refusals: Refusals | None = None
    materialise: Callable[[dict[str, Any]], None] | None = None
    operator_containers: OperatorContainers | None = None
    # Workload fields an operator turns into a container (KubeRay's autoscaler, the TrainJob
    # trainer and initializers): their shape is checked like a container's (`shape.py`).
    container_fields: tuple[str, ...] = ()
    # MultiKueue (`spec.kueue.multiKueue`): the field that hands the workload to Kueue's
    # MultiKueue controller on the manager cluster, which its Kueue adapter checks before it
    # dispatches (`IsJobManagedByKueue` in kueue `pkg/controller/jobs/*/*_multikueue_adapter.go`)
    # and which keeps the manager's own controller off it; None: `multikueue_refusal` says why
    # the kind cannot go through MultiKueue.
    managed_by: tuple[str, ...] | None = None
    multikueue_refusal: str = NO_MULTIKUEUE_ADAPTER

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.api_version})"

    def not_installed(self) -> str:
        """What to tell the admin when the API server does not know this kind."""
        return f"{self.label} is not installed in this cluster: {self.install_hint}"

    @property
    def suspend_refusal(self) -> str | None:
        """Why a workload of this kind cannot be created suspended; None when it can."""
        if self.suspend_path is None:
            return f"a {self.label} has no suspend field: admit it before creating it"
        return None

    @property
    def multikueue_problem(self) -> str | None:
        """Why a workload of this kind cannot be dispatched through MultiKueue; None: it can."""
        return None if self.managed_by is not None else self.multikueue_refusal

    def set_managed_by_multikueue(self, manifest: dict[str, Any]) -> None:
        """Hand the workload to MultiKueue (in place); `InvalidInput` for a kind that cannot."""
        if self.managed_by is None:
            raise InvalidInput([Problem("spec.kueue.multiKueue", self.multikueue_refusal)])
        node = manifest
        for key in self.managed_by[:-1]:
            node = child_map(node, key)
        node[self.managed_by[-1]] = MULTIKUEUE_CONTROLLER

    def managed_by_of(self, manifest: Mapping[str, Any]) -> Any:
        """The workload's managedBy value (None when unset or the kind has none)."""
        node: Any = manifest
        for key in self.managed_by or ():
            node = node.get(key) if isinstance(node, dict) else None
        return node if self.managed_by else None

    def set_suspended(self, manifest: dict[str, Any], value: bool) -> None:
        """Set the kind's suspend flag (in place); `InvalidInput` for a kind without one."""
        if self.suspend_path is None:
            raise InvalidInput([Problem("spec", str(self.suspend_refusal))])
        node = manifest
        for key in self.suspend_path[:-1]:
            node = child_map(node, key)
        node[self.suspend_path[-1]] = value

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        if self.suspend_path is None:
            return False
        node: Any = manifest
        for key in self.suspend_path:
            node = node.get(key) if isinstance(node, dict) else None
        return node is True

    def run_targets(
        self, manifest: Mapping[str, Any], templates: list[tuple[Any, Any]] | None = None
    ) -> list[dict[str, Any] | None]:
        """Where the run itself is written: the mappings that get its image, W&B environment
        and (unless `entry_target` is `rayjob`, whose entry point is `spec.entrypoint`) its
        command and args. A TrainJob's `spec.trainer`; otherwise the main container of each
        pod template (`templates`, if the caller has them), primary first, None for a template
        whose main container is not a mapping. A template without containers yet, or a
        TrainJob without a trainer, reads as `{}`: render writes the run into an empty one.
        Render calls this once it made those (`pipeline.py`); the override policy reads the
        merged workload through it (`policy.py`, `overrides.args`)."""
        if self.env_target == "trainer":
            spec = manifest.get("spec")
            trainer = spec.get("trainer") if isinstance(spec, dict) else None
            return [trainer if isinstance(trainer, dict) else {}]
        targets: list[dict[str, Any] | None] = []
        for _path, tmpl in (
            templates if templates is not None else self.pod_template_matches(manifest)
        ):
            spec = tmpl.get("spec")
            containers = spec.get("containers") if isinstance(spec, dict) else None
            if not isinstance(containers, list) or not containers:
                targets.append({})
            else:
                targets.append(main_container(containers, self.main_container))
        return targets

    def pod_template_matches(self, manifest: Mapping[str, Any]) -> list[tuple[Any, Any]]:
        """(path, PodTemplateSpec) for each pod template, primary first, no duplicates.

        A template is identified by the object, never by its path label: two Volcano tasks
        (or JobSet replicated jobs) with the same name are two templates, and the second is
        labelled by its index so messages tell them apart."""
        seen: set[int] = set()
        out = []
        for pattern in self.pod_templates:
            for path, value in _find_distinct(manifest, parse_glob(pattern)):
                if id(value) not in seen and isinstance(value, dict):
                    seen.add(id(value))
                    out.append((path, value))
        return out


def _find_distinct(obj: Any, glob: Glob) -> list[tuple[Path, Any]]:
    """`find`, but a list item whose label another item of the same list shares is named by
    its index (`tasks[1]`), so each concrete path names one object."""
    out: list[tuple[Path, Any]] = []

    def walk(node: Any, gi: int, path: Path) -> None:
        if gi == len(glob):
            out.append((path, node))
            return
        g = glob[gi]
        if isinstance(g, AnyItem | Item):
            if not isinstance(node, list):
                return
            names = [item_label(v, i) for i, v in enumerate(node)]
            for i, v in enumerate(node):
                label = names[i]
                if isinstance(g, Item) and g.label != label:
                    continue
                unique = label if names.count(label) == 1 else str(i)
                walk(v, gi + 1, (*path, Item(unique)))
            return
        if isinstance(g, str):
            if isinstance(node, dict) and g in node:
                walk(node[g], gi + 1, (*path, g))
            return
        for sub_path, sub in find(node, (g,)):
            walk(sub, gi + 1, (*path, *sub_path))

    walk(obj, 0, ())
    return out


# ----------------------------------------------------------------------------- pod sets


def _job_pods(spec: Mapping[str, Any]) -> int:
    parallelism = _int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    return min(parallelism, completions) if isinstance(completions, int) else parallelism


def _batch_job(m: Mapping[str, Any]) -> list[PodSet]:
    spec = m.get("spec", {})
    return [(_job_pods(spec), spec.get("template", {}))]


def _jobset(m: Mapping[str, Any]) -> list[PodSet]:
    out: list[PodSet] = []
    for rj in get(m, ("spec", "replicatedJobs"), []) or []:
        job_spec = get(rj, ("template", "spec"), {})
        count = _int(rj.get("replicas"), 1) * _job_pods(job_spec)
        out.append((count, job_spec.get("template", {})))
    return out


def _pytorchjob(m: Mapping[str, Any]) -> list[PodSet]:
    specs = get(m, ("spec", "pytorchReplicaSpecs"), {}) or {}
    return [(_int(rs.get("replicas"), 1), rs.get("template", {})) for rs in specs.values()]


def _trainjob(m: Mapping[str, Any]) -> list[PodSet]:
    # The pods come from the referenced runtime; per node the TrainJob states the resources
    # of the trainer container, which is what quota needs.
    trainer = get(m, ("spec", "trainer"), {}) or {}
    container: dict[str, Any] = {"name": "node"}
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    return [(_int(trainer.get("numNodes"), 1), {"spec": {"containers": [container]}})]


def _lws(m: Mapping[str, Any]) -> list[PodSet]:
    spec = m.get("spec", {})
    lwt = spec.get("leaderWorkerTemplate", {})
    groups = _int(spec.get("replicas"), 1)
    size = _int(lwt.get("size"), 1)
    worker = lwt.get("workerTemplate", {})
    if "leaderTemplate" in lwt:
        return [(groups, lwt["leaderTemplate"]), (groups * (size - 1), worker)]
    return [(groups * size, worker)]


def _rayjob(m: Mapping[str, Any]) -> list[PodSet]:
    rcs = get(m, ("spec", "rayClusterSpec"), {}) or {}
    out: list[PodSet] = [(1, get(rcs, ("headGroupSpec", "template"), {}))]
    for wg in rcs.get("workerGroupSpecs", []) or []:
        replicas = _int(wg.get("replicas"), _int(wg.get("minReplicas"), 1))
        out.append((replicas * _int(wg.get("numOfHosts"), 1), wg.get("template", {})))
    submitter = get(m, ("spec", "submitterPodTemplate"))
    if isinstance(submitter, dict):
        out.append((1, submitter))
    return out


def _volcano(m: Mapping[str, Any]) -> list[PodSet]:
    tasks = get(m, ("spec", "tasks"), []) or []
    return [(_int(t.get("replicas"), 1), t.get("template", {})) for t in tasks]


KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        api_version="batch/v1",
        kind="Job",
        plural="jobs",
        install_hint="batch/v1 is built into Kubernetes; check the API server version",
        pod_templates=("spec.template",),
        pod_sets=_batch_job,
        suspend_path=("spec", "suspend"),
        kueue="suspend",
        max_name=63,
        backoff_limit=("spec", "backoffLimit"),
        ttl=("spec", "ttlSecondsAfterFinished"),
        deadline=("spec", "activeDeadlineSeconds"),
        restart_policy="Never",
        builtin=True,
        # kueue `pkg/controller/jobs/job/job_multikueue_adapter.go`
        managed_by=("spec", "managedBy"),
    ),
    KindInfo(
        api_version="jobset.x-k8s.io/v1alpha2",
        kind="JobSet",
        plural="jobsets",
        install_hint="install JobSet (kubernetes-sigs/jobset)",
        pod_templates=("spec.replicatedJobs[*].template.spec.template",),
        pod_sets=_jobset,
        suspend_path=("spec", "suspend"),
        kueue="suspend",
        gke_diagnostics=True,
        backoff_limit=("spec.replicatedJobs[*].template.spec", "backoffLimit"),
        ttl=("spec", "ttlSecondsAfterFinished"),
        deadline=("spec.replicatedJobs[*].template.spec", "activeDeadlineSeconds"),
        restart_policy="Never",
        # kueue `pkg/controller/jobs/jobset/jobset_multikueue_adapter.go`
        managed_by=("spec", "managedBy"),
    ),
    KindInfo(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        plural="pytorchjobs",
        install_hint="install the Kubeflow training operator (v1)",
        pod_templates=(
            "spec.pytorchReplicaSpecs.Master.template",
            "spec.pytorchReplicaSpecs.*.template",
        ),
        pod_sets=_pytorchjob,
        suspend_path=("spec", "runPolicy", "suspend"),
        kueue="suspend",
        max_name=50,
        # The operator only configures torch.distributed in the container named `pytorch`.
        main_container="pytorch",
        backoff_limit=("spec.runPolicy", "backoffLimit"),
        ttl=("spec.runPolicy", "ttlSecondsAfterFinished"),
        deadline=("spec.runPolicy", "activeDeadlineSeconds"),
        # kueue `pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_multikueue_adapter.go`
        managed_by=("spec", "runPolicy", "managedBy"),
    ),
    KindInfo(
        api_version="trainer.kubeflow.org/v1alpha1",
        kind="TrainJob",
        plural="trainjobs",
        install_hint="install Kubeflow Trainer (v2)",
        pod_templates=(
            "spec.runtimePatches[*].trainingRuntimeSpec.template.spec.replicatedJobs[*]"
            ".template.spec.template",
        ),
        pod_sets=_trainjob,
        suspend_path=("spec", "suspend"),
        kueue="suspend",
        max_name=36,
        deadline=("spec", "activeDeadlineSeconds"),
        env_target="trainer",
        entry_target="trainer",
        refusals=generated.trainjob_refusals,
        container_fields=("spec.trainer", "spec.initializer.dataset", "spec.initializer.model"),
        # kueue `pkg/controller/jobs/trainjob/trainjob_multikueue_adapter.go`
        managed_by=("spec", "managedBy"),
    ),
    KindInfo(
        api_version="leaderworkerset.x-k8s.io/v1",
        kind="LeaderWorkerSet",
        plural="leaderworkersets",
        install_hint="install LeaderWorkerSet (kubernetes-sigs/lws)",
        pod_templates=(
            "spec.leaderWorkerTemplate.leaderTemplate",
            "spec.leaderWorkerTemplate.workerTemplate",
        ),
        pod_sets=_lws,
        # No suspend field: Kueue admits LWS pods through scheduling gates from the label.
        kueue="label",
        gke_diagnostics=True,
        multikueue_refusal=(
            "a LeaderWorkerSet has no managedBy field: Kueue's MultiKueue copies it to a worker"
            " but never mirrors its status back (the manager's own LeaderWorkerSet controller"
            " would overwrite it; kueue pkg/controller/jobs/leaderworkerset/"
            "leaderworkerset_multikueue_adapter.go), so the agent could not track the run from"
            " the manager: serve this queue without spec.kueue.multiKueue"
        ),
    ),
    KindInfo(
        api_version="ray.io/v1",
        kind="RayJob",
        plural="rayjobs",
        install_hint="install the KubeRay operator (ray-project/kuberay)",
        pod_templates=(
            "spec.rayClusterSpec.headGroupSpec.template",
            "spec.rayClusterSpec.workerGroupSpecs[*].template",
            "spec.submitterPodTemplate",
        ),
        pod_sets=_rayjob,
        suspend_path=("spec", "suspend"),
        kueue="suspend",
        gke_diagnostics=True,
        max_name=47,
        backoff_limit=("spec", "backoffLimit"),
        ttl=("spec", "ttlSecondsAfterFinished"),
        deadline=("spec", "activeDeadlineSeconds"),
        # KubeRay rejects ttlSecondsAfterFinished unless the cluster is shut down afterwards.
        ttl_requires=("spec", "shutdownAfterJobFinishes"),
        entry_target="rayjob",
        refusals=generated.rayjob_refusals,
        materialise=generated.rayjob_materialise,
        operator_containers=generated.rayjob_operator_containers,
        container_fields=("spec.rayClusterSpec.autoscalerOptions",),
        # kueue `pkg/controller/jobs/rayjob/rayjob_multikueue_adapter.go`
        managed_by=("spec", "managedBy"),
    ),
    KindInfo(
        api_version="batch.volcano.sh/v1alpha1",
        kind="Job",
        plural="jobs",
        install_hint="install Volcano (volcano-sh/volcano)",
        pod_templates=("spec.tasks[*].template",),
        pod_sets=_volcano,
        backoff_limit=("spec", "maxRetry"),
        ttl=("spec", "ttlSecondsAfterFinished"),
        restart_policy="Never",
        multikueue_refusal=(
            "Kueue has no integration for Volcano Jobs, so MultiKueue cannot dispatch one:"
            " serve this queue without spec.kueue.multiKueue"
        ),
    ),
)

_BY_TYPE: dict[tuple[str, str], KindInfo] = {(k.api_version, k.kind): k for k in KINDS}


def lookup(api_version: str, kind: str) -> KindInfo | None:
    return _BY_TYPE.get((api_version, kind))


def kind_info(api_version: str, kind: str, custom: CustomKind | None = None) -> KindInfo | None:
    """The table row for a kind, or a row built from the spec's `podTemplatePaths`."""
    if custom is not None:
        return custom_kind_info(api_version, kind, custom)
    return lookup(api_version, kind)


def spec_kind(spec: QueueSpec) -> KindInfo | None:
    """The row of a queue spec's kind (None: an unknown kind), kept in the spec's cache: render
    asks for it on every item."""
    info = spec.cache.get("kind")
    if info is None:
        info = kind_info(spec.api_version, spec.kind, spec.custom_kind)
        if info is None:
            return None
        spec.cache["kind"] = info
    assert isinstance(info, KindInfo)
    return info


def unknown_kind(api_version: str, kind: str) -> str:
    return (
        f"{kind} ({api_version}) is not a known workload kind ({', '.join(known_kinds())});"
        " declare spec.podTemplatePaths to use it"
    )


def known_kinds() -> list[str]:
    return [k.label for k in KINDS]


def custom_kind_info(api_version: str, kind: str, custom: CustomKind) -> KindInfo:
    """A row for a kind the admin described with `podTemplatePaths`."""
    paths = custom.pod_template_paths

    def pod_sets(m: Mapping[str, Any]) -> list[PodSet]:
        out: list[PodSet] = []
        for pattern in paths:
            for path, tmpl in find(m, parse_glob(pattern)):
                # A sibling `replicas` next to the template counts its pods (the common shape).
                parent = resolve(m, path[:-1])
                count = _int(parent.get("replicas"), 1) if isinstance(parent, dict) else 1
                out.append((count, tmpl))
        return out

    suspend = tuple(custom.suspend_path.split(".")) if custom.suspend_path else None
    return KindInfo(
        api_version=api_version,
        kind=kind,
        plural=custom.plural or kind.lower() + "s",
        install_hint=f"install the operator that serves {kind}",
        pod_templates=paths,
        pod_sets=pod_sets,
        suspend_path=suspend,
        kueue="suspend" if suspend else None,
    )


def suspend_paths(specs: Iterable[QueueSpec]) -> tuple[tuple[str, ...], ...]:
    """Every suspend flag the agent's workloads carry: the built-in kinds' and each loaded
    spec's custom `suspendPath`, in a stable order. The informers' slim cache keeps exactly
    these (`adapters/kube/cache.tracking_view`)."""
    paths: dict[tuple[str, ...], None] = {}
    for info in KINDS:
        if info.suspend_path is not None:
            paths[info.suspend_path] = None
    for spec in specs:
        if spec.custom_kind is None:
            continue
        custom = custom_kind_info(spec.api_version, spec.kind, spec.custom_kind)
        if custom.suspend_path is not None:
            paths[custom.suspend_path] = None
    return tuple(paths)
