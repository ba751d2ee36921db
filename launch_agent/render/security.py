"""Enforced security, applied last: every pod template meets the *restricted* Pod Security
Standard except where the queue spec's `security` block grants a named exception.

W&B's agent scans the merged manifest with a deny-list and overwrites container
securityContexts wholesale (reference §2.2): it can neither let an admin grant a service
account or a capability nor stop a key it did not think of. Here the admin's exceptions are
explicit, the enforcement runs after every layer has been merged (so no layer can undo it), and
everything enforcement *changes* (as opposed to fills in) is reported back: as render warnings
for the submitter's values, and as errors by `validate` for the admin's template.

What is enforced, per pod template (containers, initContainers and ephemeralContainers alike):

| rule | exception (`security.`) |
| --- | --- |
| `allowPrivilegeEscalation: false` | `allowPrivilegeEscalation`, `privileged` |
| no `privileged: true` | `privileged` |
| `capabilities.drop: [ALL]`, add only `NET_BIND_SERVICE` | `capabilities: [IPC_LOCK, ...]` |
| `seccompProfile.type: RuntimeDefault` (or Localhost) | `seccompUnconfined` |
| `runAsNonRoot: true`, no `runAsUser: 0` | `runAsRoot` (or `runAsUser: 0`) |
| no hostNetwork / hostPID / hostIPC | `hostNetwork`, `hostPID`, `hostIPC` |
| no `hostPort` | `hostPorts` |
| volumes only of the restricted types, no hostPath | `hostPaths: [prefix]`, `volumeTypes: [nfs]` |
| only safe sysctls | `sysctls: [name]` |
| no Unconfined AppArmor | `appArmorUnconfined` |
| no custom SELinux user/role, no Unmasked procMount, no hostProcess | (none) |
| legacy seccomp annotations only confined (below) | `seccompUnconfined` |
| legacy AppArmor annotations only confined (below) | `appArmorUnconfined` |
| no `metadata.namespace` inside a pod template | (none) |
| `serviceAccountName` only from `security.serviceAccountName` | (admin only) |
| `automountServiceAccountToken: false` | `automountServiceAccountToken: true` |

Confined legacy annotation values: seccomp `runtime/default`, `docker/default`, `localhost/*`;
AppArmor `runtime/default`, `localhost/*`. Any other value is removed (the exceptions allow
exactly `unconfined`). Every securityContext field of the wrong type (`privileged: "true"`,
`runAsUser: "0"`, `capabilities.add: SYS_ADMIN`) is removed before the rules run, and a
hostPath must lie under a granted prefix on whole components of its normalised path.
"""

from __future__ import annotations

import posixpath
from typing import Any

from launch_agent.model.queue_spec import Problem, SecurityExceptions
from launch_agent.render.edit import child_map

RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
BASE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# Pod Security admission's allowed types (pod-security-admission policy/check_seLinuxOptions.go,
# selinuxAllowedTypes1_0); 1.31 added container_engine_t, which older clusters still refuse.
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# The types of the securityContext fields (core/v1). A value of the wrong type is removed, never
# passed on: `privileged: "true"` or `runAsUser: "0"` must not slip past a check written for
# booleans and integers because some decoder downstream is lenient (or an operator copies the
# raw JSON). The rules below then fill in the restricted value.
_BOOL, _INT, _STR, _MAP, _LIST = "a boolean", "an integer", "a string", "a mapping", "a list"
_POD_CONTEXT_TYPES = {
    "runAsNonRoot": _BOOL,
    "runAsUser": _INT,
    "runAsGroup": _INT,
    "fsGroup": _INT,
    "fsGroupChangePolicy": _STR,
    "supplementalGroups": _LIST,
    "supplementalGroupsPolicy": _STR,
    "seccompProfile": _MAP,
    "appArmorProfile": _MAP,
    "seLinuxOptions": _MAP,
    "seLinuxChangePolicy": _STR,
    "windowsOptions": _MAP,
    "sysctls": _LIST,
}
_CONTAINER_CONTEXT_TYPES = {
    "privileged": _BOOL,
    "allowPrivilegeEscalation": _BOOL,
    "readOnlyRootFilesystem": _BOOL,
    "runAsNonRoot": _BOOL,
    "runAsUser": _INT,
    "runAsGroup": _INT,
    "procMount": _STR,
    "capabilities": _MAP,
    "seccompProfile": _MAP,
    "appArmorProfile": _MAP,
    "seLinuxOptions": _MAP,
    "windowsOptions": _MAP,
}
_PROFILE_TYPES = {"type": _STR, "localhostProfile": _STR}
_SELINUX_TYPES = {"user": _STR, "role": _STR, "type": _STR, "level": _STR}
_WINDOWS_TYPES = {
    "hostProcess": _BOOL,
    "gmsaCredentialSpecName": _STR,
    "gmsaCredentialSpec": _STR,
    "runAsUserName": _STR,
}
_POD_SPEC_TYPES = {
    "hostNetwork": _BOOL,
    "hostPID": _BOOL,
    "hostIPC": _BOOL,
    "hostUsers": _BOOL,
    "shareProcessNamespace": _BOOL,
    "automountServiceAccountToken": _BOOL,
    "serviceAccountName": _STR,
    "serviceAccount": _STR,
    "securityContext": _MAP,
    "volumes": _LIST,
    "initContainers": _LIST,
    "ephemeralContainers": _LIST,
}
_CONTAINER_TYPES = {"securityContext": _MAP, "ports": _LIST, "volumeMounts": _LIST}


def _has_type(value: Any, want: str) -> bool:
    if want == _BOOL:
        return isinstance(value, bool)
    if want == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if want == _STR:
        return isinstance(value, str)
    if want == _MAP:
        return isinstance(value, dict)
    return isinstance(value, list)


def host_path_allowed(path: Any, prefixes: tuple[str, ...]) -> bool:
    """`path` lies under one of `prefixes`, compared as normalised path components.

    A relative path or one with a `..` component is refused outright: the kubelet resolves it
    on the node, where `/data/../etc` is `/etc`. `/data` admits `/data/x`, not `/database`.
    """
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return False
    if ".." in path.split("/"):
        return False
    norm = "/" + posixpath.normpath(path).lstrip("/")
    for prefix in prefixes:
        if not prefix.startswith("/") or ".." in prefix.split("/"):
            continue
        root = "/" + posixpath.normpath(prefix).lstrip("/")
        if norm == root or norm.startswith(root.rstrip("/") + "/"):
            return True
    return False


class _Enforcer:
    def __init__(self, sec: SecurityExceptions, where: str) -> None:
        self.sec = sec
        self.where = where
        self.changes: list[Problem] = []

    def note(self, path: str, reason: str) -> None:
        self.changes.append(Problem(f"{self.where}.{path}", reason))

    def typed(self, node: dict[str, Any], types: dict[str, str], where: str) -> None:
        """Remove every field of `node` whose value has the wrong type (see the tables)."""
        for key, want in types.items():
            if key in node and node[key] is not None and not _has_type(node[key], want):
                self.note(f"{where}.{key}" if where else key, f"removed: must be {want}")
                del node[key]

    def pod(self, tmpl: dict[str, Any]) -> None:
        sec = self.sec
        meta = tmpl.get("metadata")
        if isinstance(meta, dict) and "namespace" in meta:
            # Some operators copy template metadata onto the pods they create: a namespace
            # here could put them outside the queue spec's namespace (and its Secret, quota).
            del meta["namespace"]
            self.note("metadata.namespace", "removed: pods run in the queue spec's namespace")
        spec = child_map(tmpl, "spec")
        self.typed(spec, _POD_SPEC_TYPES, "spec")
        for key in ("serviceAccountName", "serviceAccount"):
            value = spec.pop(key, None)
            if value and value != sec.service_account_name:
                self.note(f"spec.{key}", "removed: set only by the queue spec's security block")
        if sec.service_account_name:
            spec["serviceAccountName"] = sec.service_account_name
        if spec.get("automountServiceAccountToken") and not sec.automount_service_account_token:
            self.note("spec.automountServiceAccountToken", "set to false: not granted")
        spec["automountServiceAccountToken"] = sec.automount_service_account_token
        for key, ok in (
            ("hostNetwork", sec.host_network),
            ("hostPID", sec.host_pid),
            ("hostIPC", sec.host_ipc),
        ):
            if spec.get(key) and not ok:
                del spec[key]
                self.note(f"spec.{key}", f"removed: needs security.{key}")
        removed = self.volumes(spec)
        self.pod_context(spec)
        self.annotations(tmpl)
        for list_key in CONTAINER_LISTS:
            containers = spec.get(list_key)
            if not isinstance(containers, list):
                continue
            for i, c in enumerate(containers):
                if isinstance(c, dict):
                    label = c.get("name", i)
                    self.container(c, f"spec.{list_key}[{label}]", removed)

    def volumes(self, spec: dict[str, Any]) -> set[str]:
        vols = spec.get("volumes")
        if not isinstance(vols, list):
            return set()
        keep, removed = [], set()
        for v in vols:
            if not isinstance(v, dict):
                continue
            kinds = set(v) - {"name"}
            name = str(v.get("name", ""))
            if "hostPath" in kinds:
                hp = v.get("hostPath")
                path = hp.get("path") if isinstance(hp, dict) else None
                if not host_path_allowed(path, self.sec.host_paths):
                    removed.add(name)
                    self.note(
                        f"spec.volumes[{name}].hostPath",
                        f"removed: {path!r} is not under security.hostPaths"
                        " (normalised, no '..', whole path components)",
                    )
                    continue
            elif kinds - RESTRICTED_VOLUME_TYPES - self.sec.volume_types:
                removed.add(name)
                bad = ", ".join(sorted(kinds - RESTRICTED_VOLUME_TYPES))
                self.note(f"spec.volumes[{name}]", f"removed: {bad} needs security.volumeTypes")
                continue
            keep.append(v)
        if removed:
            spec["volumes"] = keep
        return removed

    def pod_context(self, spec: dict[str, Any]) -> None:
        sec = self.sec
        psc = child_map(spec, "securityContext")
        self.typed(psc, _POD_CONTEXT_TYPES, "spec.securityContext")
        self.nested_types(psc, "spec.securityContext")
        if sec.run_as_user is not None:
            psc["runAsUser"] = sec.run_as_user
        if sec.run_as_root:
            if psc.get("runAsUser") == 0:
                psc.pop("runAsNonRoot", None)
        else:
            if psc.get("runAsUser") == 0:
                del psc["runAsUser"]
                self.note("spec.securityContext.runAsUser", "removed: 0 needs security.runAsRoot")
            psc["runAsNonRoot"] = True
        self.seccomp(psc, "spec.securityContext", default=True)
        self.apparmor(psc, "spec.securityContext")
        self.selinux(psc, "spec.securityContext")
        sysctls = psc.get("sysctls")
        if isinstance(sysctls, list):
            allowed = SAFE_SYSCTLS | sec.sysctls
            kept = [
                s
                for s in sysctls
                if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"] in allowed
            ]
            for s in sysctls:
                if s not in kept:
                    name = s.get("name") if isinstance(s, dict) else s
                    self.note(
                        f"spec.securityContext.sysctls[{name}]", "removed: needs security.sysctls"
                    )
            psc["sysctls"] = kept
        wo = psc.get("windowsOptions")
        if isinstance(wo, dict) and wo.pop("hostProcess", None):
            self.note("spec.securityContext.windowsOptions.hostProcess", "removed")

    def seccomp(self, ctx: dict[str, Any], where: str, *, default: bool) -> None:
        sp = ctx.get("seccompProfile")
        kind = sp.get("type") if isinstance(sp, dict) else None
        if kind in ("RuntimeDefault", "Localhost"):
            return
        if kind == "Unconfined" and self.sec.seccomp_unconfined:
            return
        if kind is not None:
            self.note(
                f"{where}.seccompProfile", f"{kind} replaced: needs security.seccompUnconfined"
            )
        if default:
            ctx["seccompProfile"] = {"type": "RuntimeDefault"}
        else:
            ctx.pop("seccompProfile", None)

    def apparmor(self, ctx: dict[str, Any], where: str) -> None:
        ap = ctx.get("appArmorProfile")
        if (
            isinstance(ap, dict)
            and ap.get("type") == "Unconfined"
            and not self.sec.apparmor_unconfined
        ):
            del ctx["appArmorProfile"]
            self.note(f"{where}.appArmorProfile", "removed: needs security.appArmorUnconfined")

    def selinux(self, ctx: dict[str, Any], where: str) -> None:
        se = ctx.get("seLinuxOptions")
        if not isinstance(se, dict):
            return
        for key in ("user", "role"):
            if se.pop(key, None):
                self.note(f"{where}.seLinuxOptions.{key}", "removed: not allowed")
        if se.get("type", "") not in SELINUX_TYPES:
            self.note(f"{where}.seLinuxOptions.type", "removed: not an allowed type")
            del se["type"]

    def nested_types(self, ctx: dict[str, Any], where: str) -> None:
        for key, types in (
            ("seccompProfile", _PROFILE_TYPES),
            ("appArmorProfile", _PROFILE_TYPES),
            ("seLinuxOptions", _SELINUX_TYPES),
            ("windowsOptions", _WINDOWS_TYPES),
        ):
            node = ctx.get(key)
            if isinstance(node, dict):
                self.typed(node, types, f"{where}.{key}")

    def annotations(self, tmpl: dict[str, Any]) -> None:
        """The annotations older kubelets still read (seccomp before 1.25, AppArmor before
        1.30): the Pod Security Standards allow only the confined values."""
        ann = (tmpl.get("metadata") or {}).get("annotations")
        if not isinstance(ann, dict):
            return
        for key in list(ann):
            value = ann[key]
            if not isinstance(key, str):
                continue
            if key == SECCOMP_POD_ANNOTATION or key.startswith(SECCOMP_CONTAINER_ANNOTATION):
                confined = value in ("runtime/default", "docker/default") or (
                    isinstance(value, str) and value.startswith("localhost/")
                )
                granted = self.sec.seccomp_unconfined and value == "unconfined"
                need = "security.seccompUnconfined"
            elif key.startswith(APPARMOR_ANNOTATION):
                confined = value == "runtime/default" or (
                    isinstance(value, str) and value.startswith("localhost/")
                )
                granted = self.sec.apparmor_unconfined and value == "unconfined"
                need = "security.appArmorUnconfined"
            else:
                continue
            if not (confined or granted):
                del ann[key]
                self.note(f'metadata.annotations["{key}"]', f"removed {value!r}: needs {need}")

    def container(
        self,
        c: dict[str, Any],
        where: str,
        removed_volumes: set[str],
        *,
        standalone: bool = False,
    ) -> None:
        sec = self.sec
        self.typed(c, _CONTAINER_TYPES, where)
        csc = child_map(c, "securityContext")
        self.typed(csc, _CONTAINER_CONTEXT_TYPES, f"{where}.securityContext")
        self.nested_types(csc, f"{where}.securityContext")
        privileged = csc.get("privileged") is True
        if privileged and not sec.privileged:
            del csc["privileged"]
            self.note(f"{where}.securityContext.privileged", "removed: needs security.privileged")
            privileged = False
        if privileged:
            # The API server rejects privileged: true with allowPrivilegeEscalation: false.
            csc.pop("allowPrivilegeEscalation", None)
        elif not sec.allow_privilege_escalation:
            if csc.get("allowPrivilegeEscalation"):
                self.note(
                    f"{where}.securityContext.allowPrivilegeEscalation",
                    "set to false: needs security.allowPrivilegeEscalation",
                )
            csc["allowPrivilegeEscalation"] = False
        caps = child_map(csc, "capabilities")
        add = caps.get("add")
        if add is not None and not isinstance(add, list):
            # A string (`add: SYS_ADMIN`) is not a list of one: never guess, never pass it.
            del caps["add"]
            self.note(f"{where}.securityContext.capabilities.add", "removed: must be a list")
        elif isinstance(add, list):
            allowed = BASE_CAPABILITIES | sec.capabilities
            for cap in add:
                if not isinstance(cap, str) or cap not in allowed:
                    self.note(
                        f"{where}.securityContext.capabilities.add[{cap}]",
                        "removed: needs security.capabilities",
                    )
            caps["add"] = [cap for cap in add if isinstance(cap, str) and cap in allowed]
            if not caps["add"]:
                del caps["add"]
        drop = caps.get("drop")
        if not isinstance(drop, list) or "ALL" not in drop:
            if drop:
                self.note(f"{where}.securityContext.capabilities.drop", "set to [ALL]")
            caps["drop"] = ["ALL"]
        elif any(not isinstance(d, str) for d in drop):
            caps["drop"] = ["ALL"]
            self.note(f"{where}.securityContext.capabilities.drop", "set to [ALL]")
        if not sec.run_as_root:
            if csc.get("runAsNonRoot") is False:
                del csc["runAsNonRoot"]
                self.note(
                    f"{where}.securityContext.runAsNonRoot", "removed: needs security.runAsRoot"
                )
            if csc.get("runAsUser") == 0:
                del csc["runAsUser"]
                self.note(
                    f"{where}.securityContext.runAsUser", "removed: 0 needs security.runAsRoot"
                )
            if standalone:
                csc["runAsNonRoot"] = True
        self.seccomp(csc, f"{where}.securityContext", default=standalone)
        self.apparmor(csc, f"{where}.securityContext")
        self.selinux(csc, f"{where}.securityContext")
        pm = csc.get("procMount")
        if pm not in (None, "Default"):
            del csc["procMount"]
            self.note(f"{where}.securityContext.procMount", "removed: only Default is allowed")
        wo = csc.get("windowsOptions")
        if isinstance(wo, dict) and wo.pop("hostProcess", None):
            self.note(f"{where}.securityContext.windowsOptions.hostProcess", "removed")
        ports = c.get("ports")
        if isinstance(ports, list) and not sec.host_ports:
            for p in ports:
                if isinstance(p, dict) and p.pop("hostPort", None) is not None:
                    self.note(
                        f"{where}.ports[{p.get('name', p.get('containerPort'))}].hostPort",
                        "removed: needs security.hostPorts",
                    )
        mounts = c.get("volumeMounts")
        if removed_volumes and isinstance(mounts, list):
            c["volumeMounts"] = [
                m for m in mounts if not (isinstance(m, dict) and m.get("name") in removed_volumes)
            ]


def enforce_pod_template(
    tmpl: dict[str, Any], sec: SecurityExceptions, where: str
) -> list[Problem]:
    """Make one PodTemplateSpec restricted (in place); returns what had to be changed."""
    enforcer = _Enforcer(sec, where)
    enforcer.pod(tmpl)
    return enforcer.changes


def enforce_container(
    container: dict[str, Any], sec: SecurityExceptions, where: str, removed_volumes: set[str]
) -> list[Problem]:
    """Make one container restricted (in place), for a container an operator builds from
    fields of the workload (KubeRay's autoscaler from `autoscalerOptions`)."""
    parent, _, last = where.rpartition(".")
    enforcer = _Enforcer(sec, parent)
    # Restricted on its own, not by inheritance: the operator decides which pod the container
    # joins and may not copy that pod's securityContext (KubeRay's mergeAutoscalerOverrides in
    # ray-operator/controllers/ray/common/pod.go copies autoscalerOptions.securityContext whole
    # onto the container BuildAutoscalerContainer made).
    enforcer.container(container, last, removed_volumes, standalone=True)
    return enforcer.changes
