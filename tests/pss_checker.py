"""An independent checker of rendered workloads: the *restricted* Pod Security Standard plus the
project's own guarantees, for the property and end-to-end tests.

Written from the standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
and from the CRDs, never from the product: it imports nothing from `launch_agent.render`, so a
mistake in the enforcement is not repeated here. `violations(manifest, allowed=...)` returns one
line per broken rule (`<path>: <rule>: <detail>`); an empty list is a safe workload.

Pod templates are found two ways, and both must agree the workload is safe:

- structurally: every mapping anywhere in the manifest that holds a `containers` key is a pod
  spec (so a kind or a CRD field nobody listed still gets checked), and a `containers` that is
  not a list of mappings is itself a violation (the type-change bypass: `containers: {}`);
- by the known locations of each supported kind (`KNOWN_POD_TEMPLATES`): a value there that is
  not a pod template is a violation, because the operator reads it as one.

Pods the operators generate are checked from the fields they are generated from: KubeRay's
autoscaler sidecar (`rayClusterSpec.autoscalerOptions`, injected when in-tree autoscaling is
on) and its default submitter pod (a RayJob in `K8sJobMode` without `submitterPodTemplate`
gets a pod with no securityContext at all, which the restricted profile refuses).

Beyond the standard (the project's guarantees):

- no unescaped `$(NAME)` in `command`, `args`, `env[].value` or `subPathExpr` naming a variable
  whose value comes from a Secret (kubelet expands it: a run name `$(WANDB_API_KEY)` would
  carry the key);
- `automountServiceAccountToken: false` and no projected `serviceAccountToken`, unless granted;
  `serviceAccountName` only the granted one;
- no Secret reference anywhere in the manifest (any key containing "secret": `secretKeyRef`,
  `secretRef`, `secretName`, `imagePullSecrets`, ...) except the ones the queue spec lists;
- every `namespace` key in the manifest is the queue spec's namespace;
- no reserved label or annotation (`kueue.x-k8s.io/`, `launch-agent.io/`, ...) other than the
  ones the agent itself sets;
- a RayJob does not target an existing cluster (`clusterSelector`), and a TrainJob runs the
  queue spec's runtime (`runtimeRef`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.pod_security_standard import (
    ADDABLE_CAPABILITIES,
    ALLOWED_VOLUMES,
    APPARMOR_ANNOTATION_PREFIX,
    APPARMOR_ANNOTATION_VALUES,
    APPARMOR_FORBIDDEN_TYPES,
    CONTAINER_LISTS,
    PROC_MOUNT_TYPES,
    SAFE_SYSCTLS,
    SECCOMP_ANNOTATION_VALUES,
    SECCOMP_CONTAINER_ANNOTATION_PREFIX,
    SECCOMP_POD_ANNOTATION,
    SECCOMP_TYPES,
    SELINUX_TYPES,
)

# Where each supported kind keeps its pod templates, read from the CRDs (`*` any key, `[*]` any
# list item). The structural search finds these too; listing them catches a value of the wrong
# type at a place the operator will read as a pod template.
KNOWN_POD_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch/v1", "Job"): ("spec.template",),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("spec.replicatedJobs[*].template.spec.template",),
    ("kubeflow.org/v1", "PyTorchJob"): ("spec.pytorchReplicaSpecs.*.template",),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): (
        "spec.runtimePatches[*].trainingRuntimeSpec.template.spec.replicatedJobs[*]"
        ".template.spec.template",
    ),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): (
        "spec.leaderWorkerTemplate.leaderTemplate",
        "spec.leaderWorkerTemplate.workerTemplate",
    ),
    ("ray.io/v1", "RayJob"): (
        "spec.rayClusterSpec.headGroupSpec.template",
        "spec.rayClusterSpec.workerGroupSpecs[*].template",
        "spec.submitterPodTemplate",
    ),
    ("batch.volcano.sh/v1alpha1", "Job"): ("spec.tasks[*].template",),
}
# Container-like objects outside pod templates whose env the operator copies into pods.
CONTAINER_LIKE: dict[tuple[str, str], tuple[str, ...]] = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): (
        "spec.trainer",
        "spec.initializer.dataset",
        "spec.initializer.model",
    ),
    ("ray.io/v1", "RayJob"): (
        "spec.rayClusterSpec.autoscalerOptions",
        "spec.rayClusterSpec.historyServerOptions.collectorOptions",
    ),
}
RESERVED_PREFIXES = (
    "kueue.x-k8s.io/",
    "launch-agent.io/",
    "wandb.ai/",
    "kubernetes.io/",
    "k8s.io/",
    "pod-security.kubernetes.io/",
)
# The agent stamps these on every workload and pod with per-run values.
AGENT_KEYS = (
    "launch-agent.io/agent",
    "launch-agent.io/queue",
    "launch-agent.io/run-queue-item",
    "launch-agent.io/run-id",
    "launch-agent.io/run-queue-item-id",
    "launch-agent.io/queue-name",
    "launch-agent.io/queue-spec",
    "launch-agent.io/entity",
    "launch-agent.io/project",
    "launch-agent.io/run-spec",
    "wandb.ai/run-id",
    "wandb.ai/agent",
)
_HOST_PROCESS = "hostProcess"
_REF = re.compile(r"\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


@dataclass(frozen=True)
class Allowed:
    """What the queue spec (the admin) grants; everything else is restricted."""

    namespace: str | None = None
    secrets: frozenset[str] = frozenset()
    service_account: str | None = None
    automount_token: bool = False
    privileged: bool = False
    allow_privilege_escalation: bool = False
    capabilities: frozenset[str] = frozenset()
    seccomp_unconfined: bool = False
    apparmor_unconfined: bool = False
    run_as_root: bool = False
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    host_ports: bool = False
    host_paths: tuple[str, ...] = ()
    volume_types: frozenset[str] = frozenset()
    sysctls: frozenset[str] = frozenset()
    # Reserved keys (labels and annotations) and the values the agent or admin may give them;
    # `None` allows any value (the agent's own per-run labels).
    reserved: Mapping[str, str | None] = field(default_factory=lambda: dict.fromkeys(AGENT_KEYS))
    train_runtime: Any = None
    cluster_selector: Any = None

    @classmethod
    def from_queue_spec(
        cls, queue_spec: Mapping[str, Any], *, api_key_secret: str = "wandb-api-key-launch-agent"
    ) -> Allowed:
        """Read the raw queue spec YAML (`docs/queue-specs.md`), not the product's model."""
        body = queue_spec["spec"]
        sec = body.get("security") or {}
        template = body["template"]
        if "kubernetes" in template and "spec" not in template:
            template = template["kubernetes"]
        run_as_user = sec.get("runAsUser")
        reserved: dict[str, str | None] = dict.fromkeys(AGENT_KEYS)
        kueue = (body.get("kueue") or {}).get("queueName")
        if kueue:
            reserved["kueue.x-k8s.io/queue-name"] = kueue
        for key, value in _template_keys(template):
            if key.startswith(RESERVED_PREFIXES):
                reserved.setdefault(key, value)
        tspec = template.get("spec") or {}
        return cls(
            namespace=body.get("namespace"),
            secrets=frozenset({api_key_secret, *(name for _p, name in secret_refs(template))}),
            service_account=sec.get("serviceAccountName"),
            automount_token=bool(sec.get("automountServiceAccountToken")),
            privileged=bool(sec.get("privileged")),
            allow_privilege_escalation=bool(
                sec.get("allowPrivilegeEscalation") or sec.get("privileged")
            ),
            capabilities=frozenset(sec.get("capabilities") or ()),
            seccomp_unconfined=bool(sec.get("seccompUnconfined")),
            apparmor_unconfined=bool(sec.get("appArmorUnconfined")),
            run_as_root=bool(sec.get("runAsRoot")) or run_as_user == 0,
            host_network=bool(sec.get("hostNetwork")),
            host_pid=bool(sec.get("hostPID")),
            host_ipc=bool(sec.get("hostIPC")),
            host_ports=bool(sec.get("hostPorts")),
            host_paths=tuple(sec.get("hostPaths") or ()),
            volume_types=frozenset(sec.get("volumeTypes") or ()),
            sysctls=frozenset(sec.get("sysctls") or ()),
            reserved=reserved,
            train_runtime=tspec.get("runtimeRef"),
            cluster_selector=tspec.get("clusterSelector"),
        )


def _template_keys(template: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    for _path, node in _walk(template, ""):
        if isinstance(node, dict):
            for holder in ("labels", "annotations"):
                values = node.get(holder)
                if isinstance(values, dict):
                    for k, v in values.items():
                        yield str(k), v if isinstance(v, str) else None


# ----------------------------------------------------------------------------- walking


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def _walk_parents(
    node: Any, path: str, parent: Any, key: Any
) -> Iterator[tuple[str, Any, Any, Any]]:
    yield path, node, parent, key
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_parents(v, f"{path}.{k}" if path else str(k), node, k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_parents(v, f"{path}[{i}]", node, i)


def _find(node: Any, pattern: str) -> Iterator[tuple[str, Any]]:
    """Values at `pattern` (`a.b`, `*` any key, `[*]` any item), with their concrete paths."""
    parts = re.findall(r"\[\*\]|[^.\[\]]+", pattern)
    found: list[tuple[str, Any]] = [("", node)]
    for part in parts:
        nxt: list[tuple[str, Any]] = []
        for path, value in found:
            if part == "[*]":
                if isinstance(value, list):
                    nxt += [(f"{path}[{i}]", v) for i, v in enumerate(value)]
            elif part == "*":
                if isinstance(value, dict):
                    nxt += [(f"{path}.{k}".lstrip("."), v) for k, v in value.items()]
            elif isinstance(value, dict) and part in value:
                nxt.append((f"{path}.{part}".lstrip("."), value[part]))
        found = nxt
    yield from found


def secret_refs(node: Any) -> Iterator[tuple[str, Any]]:
    """(path, name) of every Secret reference: any key containing "secret", of any shape."""
    for path, value in _walk(node, ""):
        if not isinstance(value, dict):
            continue
        for key, ref in value.items():
            if "secret" not in str(key).lower():
                continue
            where = f"{path}.{key}" if path else str(key)
            if key == "secret" and isinstance(ref, dict) and "secretName" in ref:
                continue  # the volume source: its secretName is reported on its own
            if isinstance(ref, str):
                yield where, ref
            elif isinstance(ref, dict):
                name = ref.get("name", ref.get("secretName"))
                yield where, name
            elif isinstance(ref, list):
                for i, item in enumerate(ref):
                    yield f"{where}[{i}]", item.get("name") if isinstance(item, dict) else item
            elif isinstance(ref, bool):
                continue  # a flag like `optional` or `enableSecret`, not a reference
            elif ref is not None:
                yield where, ref


# ----------------------------------------------------------------------------- the checks


class _Check:
    def __init__(self, allowed: Allowed) -> None:
        self.allowed = allowed
        self.out: list[str] = []

    def bad(self, path: str, rule: str, detail: str = "") -> None:
        self.out.append(f"{path or '(root)'}: {rule}" + (f": {detail}" if detail else ""))

    def flag(self, path: str, value: Any) -> bool:
        """A boolean field: True is set; anything but a boolean or null is malformed."""
        if value is not None and not isinstance(value, bool):
            self.bad(path, "malformed", f"{value!r} is not a boolean")
        return value is True

    # -- whole manifest

    def manifest(self, m: Any) -> None:
        if not isinstance(m, dict):
            self.bad("", "malformed", "the workload is not a mapping")
            return
        gvk = (str(m.get("apiVersion", "")), str(m.get("kind", "")))
        meta = m.get("metadata")
        if self.allowed.namespace is not None:
            ns = meta.get("namespace") if isinstance(meta, dict) else None
            if ns != self.allowed.namespace:
                self.bad("metadata.namespace", "namespace", f"{ns!r} is not the queue spec's")
        for path, value in _walk(m, ""):
            if isinstance(value, dict) and "namespace" in value and path != "metadata":
                ns = value["namespace"]
                if self.allowed.namespace is not None and ns != self.allowed.namespace:
                    self.bad(f"{path}.namespace", "namespace", f"{ns!r} is not the queue spec's")
            if isinstance(value, dict):
                for holder in ("labels", "annotations"):
                    if isinstance(value.get(holder), dict):
                        self.reserved(f"{path}.{holder}".lstrip("."), value[holder])
        for path, name in secret_refs(m):
            if name is None or name == "":
                continue  # names no Secret (the API server defaults it to ""), reads nothing
            if not _member(name, self.allowed.secrets):
                self.bad(path, "secret reference", f"{name!r} is not a Secret the spec lists")
        pod_specs = [
            (path, value, parent, key)
            for path, value, parent, key in _walk_parents(m, "", None, None)
            if isinstance(value, dict) and "containers" in value
        ]
        for pattern in KNOWN_POD_TEMPLATES.get(gvk, ()):
            for path, tmpl in _find(m, pattern):
                spec = tmpl.get("spec") if isinstance(tmpl, dict) else None
                if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
                    self.bad(path, "malformed", "a pod template without a containers list")
        for path, spec, parent, key in pod_specs:
            # A PodTemplateSpec is {metadata, spec}: its annotations belong to this pod.
            meta = parent.get("metadata") if key == "spec" and isinstance(parent, dict) else None
            self.pod(path, spec, meta, path.rpartition(".")[0])
        for pattern in CONTAINER_LIKE.get(gvk, ()):
            for path, c in _find(m, pattern):
                if not isinstance(c, dict):
                    self.bad(path, "malformed", "not a mapping")
                    continue
                self.expansion(path, c)
                if pattern.endswith("autoscalerOptions") and self.autoscaler_on(m):
                    self.container(path, c, {}, pod_nonroot=False, pod_seccomp=None)
        if gvk == ("ray.io/v1", "RayJob"):
            self.rayjob(m)
        if gvk == ("trainer.kubeflow.org/v1alpha1", "TrainJob"):
            ref = _resolve(m, "spec.runtimeRef")
            if ref != self.allowed.train_runtime:
                self.bad("spec.runtimeRef", "runtime", f"{ref!r} is not the queue spec's runtime")

    def autoscaler_on(self, m: dict[str, Any]) -> bool:
        return _resolve(m, "spec.rayClusterSpec.enableInTreeAutoscaling") is True

    def rayjob(self, m: dict[str, Any]) -> None:
        selector = _resolve(m, "spec.clusterSelector")
        if selector and selector != self.allowed.cluster_selector:
            self.bad(
                "spec.clusterSelector", "cluster", "runs on a cluster the agent did not create"
            )
        mode = _resolve(m, "spec.submissionMode") or "K8sJobMode"
        if mode == "K8sJobMode" and _resolve(m, "spec.submitterPodTemplate") is None:
            self.bad(
                "spec.submitterPodTemplate",
                "default submitter",
                "KubeRay creates a submitter pod with no securityContext",
            )

    def reserved(self, path: str, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if not str(key).startswith(RESERVED_PREFIXES):
                continue
            if key not in self.allowed.reserved:
                self.bad(f'{path}["{key}"]', "reserved key", "set by the submitter")
            elif (want := self.allowed.reserved[key]) is not None and value != want:
                self.bad(f'{path}["{key}"]', "reserved key", f"{value!r} instead of {want!r}")

    # -- one pod

    def pod(self, path: str, spec: dict[str, Any], meta: Any, tmpl_path: str) -> None:
        a = self.allowed
        containers = spec.get("containers")
        if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
            self.bad(f"{path}.containers", "malformed", "not a list of containers")
        for key, ok in (
            ("hostNetwork", a.host_network),
            ("hostPID", a.host_pid),
            ("hostIPC", a.host_ipc),
        ):
            if self.flag(f"{path}.{key}", spec.get(key)) and not ok:
                self.bad(f"{path}.{key}", "host namespaces", "true")
        for key in ("serviceAccountName", "serviceAccount"):
            if key in spec and spec[key] != a.service_account:
                self.bad(f"{path}.{key}", "service account", f"{spec[key]!r} is not granted")
        automount = spec.get("automountServiceAccountToken")
        if automount is not False and not (a.automount_token and automount in (None, True)):
            self.bad(f"{path}.automountServiceAccountToken", "token", f"{automount!r}")
        self.volumes(path, spec.get("volumes"))
        psc = spec.get("securityContext")
        if psc is None:
            psc = {}
        if not isinstance(psc, dict):
            self.bad(f"{path}.securityContext", "malformed", "not a mapping")
            psc = {}
        self.context(f"{path}.securityContext", psc)
        pod_nonroot = psc.get("runAsNonRoot") is True
        pod_seccomp = _type_of(psc.get("seccompProfile"))
        sysctls = psc.get("sysctls")
        if sysctls is not None:
            if not isinstance(sysctls, list):
                self.bad(f"{path}.securityContext.sysctls", "malformed", "not a list")
            else:
                for i, s in enumerate(sysctls):
                    name = s.get("name") if isinstance(s, dict) else s
                    if not _member(name, SAFE_SYSCTLS | a.sysctls):
                        self.bad(f"{path}.securityContext.sysctls[{i}]", "sysctls", repr(name))
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        names: list[str] = []
        for list_key in CONTAINER_LISTS:
            items = spec.get(list_key)
            if items is None:
                continue
            if not isinstance(items, list):
                self.bad(f"{path}.{list_key}", "malformed", "not a list")
                continue
            for i, c in enumerate(items):
                where = f"{path}.{list_key}[{i}]"
                if not isinstance(c, dict):
                    self.bad(where, "malformed", "a container that is not a mapping")
                    continue
                names.append(str(c.get("name")))
                self.container(where, c, spec, pod_nonroot=pod_nonroot, pod_seccomp=pod_seccomp)
        if isinstance(ann, dict):
            self.annotations(f"{tmpl_path}.metadata.annotations".lstrip("."), ann)

    def volumes(self, path: str, vols: Any) -> None:
        a = self.allowed
        if vols is None:
            return
        if not isinstance(vols, list):
            self.bad(f"{path}.volumes", "malformed", "not a list")
            return
        for i, v in enumerate(vols):
            where = f"{path}.volumes[{i}]"
            if not isinstance(v, dict):
                self.bad(where, "malformed", "a volume that is not a mapping")
                continue
            kinds = {k for k, val in v.items() if k != "name" and val is not None}
            if "hostPath" in kinds:
                hp = v["hostPath"]
                p = hp.get("path") if isinstance(hp, dict) else None
                if not (isinstance(p, str) and _under(p, a.host_paths)):
                    self.bad(f"{where}.hostPath", "hostPath", repr(p))
                kinds.discard("hostPath")
            for kind in sorted(kinds - ALLOWED_VOLUMES - a.volume_types):
                self.bad(f"{where}.{kind}", "volume types", f"{kind} is not allowed")
            proj = v.get("projected")
            if isinstance(proj, dict) and isinstance(proj.get("sources"), list):
                for j, src in enumerate(proj["sources"]):
                    token = isinstance(src, dict) and "serviceAccountToken" in src
                    if token and not a.automount_token:
                        self.bad(
                            f"{where}.projected.sources[{j}].serviceAccountToken",
                            "token",
                            "a projected service account token",
                        )

    def context(self, where: str, ctx: dict[str, Any]) -> None:
        """Rules shared by pod and container securityContexts."""
        a = self.allowed
        sp = ctx.get("seccompProfile")
        if sp is not None and not isinstance(sp, dict):
            self.bad(f"{where}.seccompProfile", "malformed", "not a mapping")
        kind = _type_of(sp)
        granted = kind == "Unconfined" and a.seccomp_unconfined
        if kind is not None and not _member(kind, SECCOMP_TYPES) and not granted:
            self.bad(f"{where}.seccompProfile", "seccomp", repr(kind))
        ap = ctx.get("appArmorProfile")
        if ap is not None and not isinstance(ap, dict):
            self.bad(f"{where}.appArmorProfile", "malformed", "not a mapping")
        if _member(_type_of(ap), APPARMOR_FORBIDDEN_TYPES) and not a.apparmor_unconfined:
            self.bad(f"{where}.appArmorProfile", "appArmor", "Unconfined")
        se = ctx.get("seLinuxOptions")
        if se is not None:
            if not isinstance(se, dict):
                self.bad(f"{where}.seLinuxOptions", "malformed", "not a mapping")
            else:
                for key in ("user", "role"):
                    if se.get(key) not in (None, ""):
                        self.bad(f"{where}.seLinuxOptions.{key}", "SELinux", repr(se[key]))
                if not _member(se.get("type", ""), SELINUX_TYPES):
                    self.bad(f"{where}.seLinuxOptions.type", "SELinux", repr(se.get("type")))
        if _is_int(ctx.get("runAsUser")) and ctx["runAsUser"] == 0 and not a.run_as_root:
            self.bad(f"{where}.runAsUser", "runAsUser", "0 is root")
        if "runAsUser" in ctx and not _is_int(ctx["runAsUser"]):
            self.bad(f"{where}.runAsUser", "malformed", repr(ctx["runAsUser"]))
        wo = ctx.get("windowsOptions")
        if wo is not None:
            if not isinstance(wo, dict):
                self.bad(f"{where}.windowsOptions", "malformed", "not a mapping")
            elif self.flag(f"{where}.windowsOptions.hostProcess", wo.get(_HOST_PROCESS)):
                self.bad(f"{where}.windowsOptions.hostProcess", "hostProcess", "true")

    def container(
        self,
        where: str,
        c: dict[str, Any],
        pod_spec: dict[str, Any],
        *,
        pod_nonroot: bool,
        pod_seccomp: Any,
    ) -> None:
        a = self.allowed
        if "image" in c and not isinstance(c["image"], str):
            self.bad(f"{where}.image", "malformed", "not a string")
        csc = c.get("securityContext")
        if csc is None:
            csc = {}
        if not isinstance(csc, dict):
            self.bad(f"{where}.securityContext", "malformed", "not a mapping")
            csc = {}
        sc = f"{where}.securityContext"
        self.context(sc, csc)
        if self.flag(f"{sc}.privileged", csc.get("privileged")) and not a.privileged:
            self.bad(f"{sc}.privileged", "privileged", "true")
        if csc.get("allowPrivilegeEscalation") is not False and not a.allow_privilege_escalation:
            self.bad(f"{sc}.allowPrivilegeEscalation", "allowPrivilegeEscalation", "not false")
        caps = csc.get("capabilities")
        if caps is None:
            caps = {}
        if not isinstance(caps, dict):
            self.bad(f"{sc}.capabilities", "malformed", "not a mapping")
            caps = {}
        drop, add = caps.get("drop"), caps.get("add")
        if not (isinstance(drop, list) and "ALL" in drop):
            self.bad(f"{sc}.capabilities.drop", "capabilities", f"{drop!r} does not drop ALL")
        if add is not None:
            if not isinstance(add, list):
                self.bad(f"{sc}.capabilities.add", "malformed", f"{add!r} is not a list")
            else:
                for cap in add:
                    if not _member(cap, ADDABLE_CAPABILITIES | a.capabilities):
                        self.bad(f"{sc}.capabilities.add", "capabilities", repr(cap))
        seccomp = _type_of(csc.get("seccompProfile")) or pod_seccomp
        if not _member(seccomp, SECCOMP_TYPES) and not (
            seccomp == "Unconfined" and a.seccomp_unconfined
        ):
            self.bad(f"{sc}.seccompProfile", "seccomp", f"{seccomp!r} (pod or container)")
        nonroot = csc.get("runAsNonRoot", pod_nonroot if "runAsNonRoot" not in csc else None)
        if nonroot is not True and not a.run_as_root:
            self.bad(f"{sc}.runAsNonRoot", "runAsNonRoot", f"{nonroot!r}")
        if csc.get("procMount") not in (None, *PROC_MOUNT_TYPES):
            self.bad(f"{sc}.procMount", "procMount", repr(csc["procMount"]))
        ports = c.get("ports")
        if ports is not None:
            if not isinstance(ports, list):
                self.bad(f"{where}.ports", "malformed", "not a list")
            else:
                for i, p in enumerate(ports):
                    hp = p.get("hostPort") if isinstance(p, dict) else None
                    if hp not in (None, 0) and not a.host_ports:
                        self.bad(f"{where}.ports[{i}].hostPort", "hostPorts", repr(hp))
        for key in ("command", "args"):
            value = c.get(key)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(s, str) for s in value)
            ):
                self.bad(f"{where}.{key}", "malformed", "not a list of strings")
        self.expansion(where, c)

    def expansion(self, where: str, c: dict[str, Any]) -> None:
        """`$(NAME)` that kubelet would expand to a Secret's value."""
        env = c.get("env")
        if env is not None and not isinstance(env, list):
            self.bad(f"{where}.env", "malformed", "not a list")
            env = []
        secret_backed = {"WANDB_API_KEY"}
        for e in env or []:
            # An entry without a string name is refused by the API server; it expands nothing.
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                continue
            vf = e.get("valueFrom")
            if isinstance(vf, dict) and "secretKeyRef" in vf:
                secret_backed.add(e["name"])
        env_from = c.get("envFrom")
        any_secret = isinstance(env_from, list) and any(
            isinstance(s, dict) and "secretRef" in s for s in env_from
        )
        defined = {
            e["name"] for e in env or [] if isinstance(e, dict) and isinstance(e.get("name"), str)
        }
        texts: list[tuple[str, Any]] = []
        for key in ("command", "args"):
            if isinstance(c.get(key), list):
                texts += [(f"{where}.{key}[{i}]", s) for i, s in enumerate(c[key])]
        for i, e in enumerate(env or []):
            if isinstance(e, dict):
                texts.append((f"{where}.env[{i}].value", e.get("value")))
        mounts = c.get("volumeMounts")
        if mounts is not None and not isinstance(mounts, list):
            self.bad(f"{where}.volumeMounts", "malformed", "not a list")
            mounts = []
        for i, mnt in enumerate(mounts or []):
            if isinstance(mnt, dict):
                texts.append((f"{where}.volumeMounts[{i}].subPathExpr", mnt.get("subPathExpr")))
        for path, text in texts:
            if not isinstance(text, str):
                continue
            for name in _references(text):
                if name in secret_backed or (any_secret and name not in defined):
                    self.bad(path, "$(...) expansion", f"$({name}) expands to a Secret's value")

    def annotations(self, where: str, ann: dict[str, Any]) -> None:
        a = self.allowed
        for raw_key, value in ann.items():
            key = str(raw_key)
            text = str(value)
            profile_ok = _member(value, APPARMOR_ANNOTATION_VALUES) or text.startswith("localhost/")
            if key.startswith(APPARMOR_ANNOTATION_PREFIX) and not (
                profile_ok or a.apparmor_unconfined
            ):
                self.bad(f'{where}["{key}"]', "appArmor", repr(value))
            legacy = key == SECCOMP_POD_ANNOTATION
            legacy = legacy or key.startswith(SECCOMP_CONTAINER_ANNOTATION_PREFIX)
            seccomp_ok = _member(value, SECCOMP_ANNOTATION_VALUES) or text.startswith("localhost/")
            if legacy and not (seccomp_ok or a.seccomp_unconfined):
                self.bad(f'{where}["{key}"]', "seccomp", repr(value))


def _references(text: str) -> list[str]:
    """The variable names kubelet expands in `text` (`$$` escapes a `$`)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        m = _REF.match(text, i)
        if m:
            out.append(m.group(1))
            i = m.end()
        else:
            i += 1
    return out


def _member(value: Any, allowed: frozenset[str]) -> bool:
    """`value in allowed` for a value of any type (a list or mapping is never a member)."""
    return isinstance(value, str) and value in allowed


def _type_of(profile: Any) -> Any:
    return profile.get("type") if isinstance(profile, dict) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    # `..` would leave the prefix after the kubelet resolves it; a relative path is no path.
    if not path.startswith("/") or ".." in path.split("/"):
        return False
    norm = posixpath.normpath(path)
    return any(norm == p.rstrip("/") or norm.startswith(p.rstrip("/") + "/") for p in prefixes)


def _resolve(node: Any, dotted: str) -> Any:
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted) if dotted else []:
        if part.startswith("["):
            idx = int(part[1:-1])
            node = node[idx] if isinstance(node, list) and idx < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def violations(manifest: Any, *, allowed: Allowed) -> list[str]:
    """Every rule `manifest` breaks, one line each (`path: rule: detail`); [] when safe."""
    check = _Check(allowed)
    check.manifest(manifest)
    return check.out
