"""Validating admission of pod creation, from real-looking sources in the store.

kube-apiserver runs its admission chain after defaulting and before the write; a refusal is a
403 `Forbidden` whose message is `pods "<name>" is forbidden: <plugin's error>`
(`staging/src/k8s.io/apiserver/pkg/admission/errors.go`, `NewForbidden`). A controller that
creates the pod (the Job controller) turns it into a `FailedCreate` Event on its workload:
that Event is the only trace the refusal leaves. Three plugins are modelled, in the order of
kube-apiserver's default chain (`pkg/kubeapiserver/options/plugins.go`, `AllOrderedPlugins`):

- ServiceAccount (`plugin/pkg/admission/serviceaccount/admission.go`, `Admit` and
  `getServiceAccount`): the pod's `serviceAccountName` (default `default`) must name a
  ServiceAccount in the namespace. The `default` account is always there: the service account
  controller (`pkg/controller/serviceaccount/serviceaccounts_controller.go`) creates it in every
  namespace, and the plugin retries the lookup of `default` for that reason.
- PodSecurity (`staging/src/k8s.io/pod-security-admission/admission/admission.go`,
  `EvaluatePod`; checks in `.../policy/check_*.go`): the namespace label
  `pod-security.kubernetes.io/enforce` (`baseline` or `restricted`) selects the checks; the
  refusal lists each failed check as `<reason> (<detail>)`.
- LimitRanger (`plugin/pkg/admission/limitranger/admission.go`, `PodMutateLimitFunc` and
  `PodValidateLimitFunc`): a LimitRange's `type: Container` item fills in missing requests
  (`defaultRequest`) and limits (`default`), then refuses a container outside `min` / `max`
  (`maximum cpu usage per Container is 500m, but limit is 1`).
- ResourceQuota (`staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/
  controller.go`, `CheckRequest`): each ResourceQuota of the namespace limits the sum over the
  namespace's non-terminal pods (`pkg/quota/v1/evaluator/core/pods.go`, `QuotaV1Pod` and
  `podComputeUsageHelper`). The sandbox measures that usage from the pods themselves, as the
  quota controller's `status.used` would be once synced.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from launch_agent.sandbox.kube.errors import ApiError

Obj = dict[str, Any]

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"

_QUANTITY = re.compile(r"^([+-]?\d+(?:\.\d+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def forbidden(name: str, message: str) -> ApiError:
    """`admission.NewForbidden` for a pod: 403 with the plugin's words after the name."""
    return ApiError(
        403,
        "Forbidden",
        f'pods "{name}" is forbidden: {message}',
        {"name": name, "kind": "pods"},
    )


def admit_pod(
    pod: Obj,
    *,
    namespace: Mapping[str, Any] | None,
    has_account: Callable[[str], bool],
    quotas: Iterable[Mapping[str, Any]],
    pods: Callable[[], Iterable[Obj]],
    limit_ranges: Iterable[Mapping[str, Any]] = (),
) -> None:
    """Raise the first plugin's refusal of creating `pod` in its namespace (`namespace` is
    the Namespace object, `quotas` its ResourceQuotas; `pods` lists its pods, called only
    when a quota applies)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    account = spec.get("serviceAccountName") or "default"
    if account != "default" and not has_account(account):
        # serviceaccount/admission.go, Admit: `fmt.Errorf("error looking up service account
        # %s/%s: %w", ...)` around the lister's NotFound error. Admit is a mutating plugin, run
        # before the name is generated: the message names the `generateName` prefix.
        raise forbidden(
            str(meta.get("generateName") or name),
            f'error looking up service account {ns}/{account}: serviceaccount "{account}"'
            " not found",
        )
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE)
    if level in ("baseline", "restricted"):
        failures = pod_security(spec, restricted=level == "restricted")
        if failures:
            version = labels.get(ENFORCE_VERSION) or "latest"
            raise forbidden(
                name, f'violates PodSecurity "{level}:{version}": ' + ", ".join(failures)
            )
    refusals = limit_range(pod, limit_ranges)
    if refusals:
        # `utilerrors.NewAggregate`: one error as is, several as `[a, b]`.
        text = refusals[0] if len(refusals) == 1 else "[" + ", ".join(refusals) + "]"
        raise forbidden(name, text)
    quotas = list(quotas)
    others = list(pods()) if quotas else []
    for quota in sorted(quotas, key=lambda q: str(q["metadata"]["name"])):
        refusal = exceeded(quota, pod, others)
        if refusal:
            raise forbidden(name, refusal)


# --- ResourceQuota -------------------------------------------------------------------------


def quantity(value: Any) -> Decimal:
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def pretty(resource: str, value: Decimal) -> str:
    """`resource.Quantity.String()` for the values quotas hold: binary suffixes for byte
    amounts, millis for fractions, plain integers otherwise."""
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    number = int(value)
    if "memory" in resource or "storage" in resource:
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIX[suffix])
            if number and number % unit == 0:
                return f"{number // unit}{suffix}"
    return str(number)


def counted(pod: Obj) -> bool:
    """pods.go, `QuotaV1Pod`: terminal pods use no quota (the grace period of a terminating
    pod is not modelled here: the sandbox's kubelet ends it)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_usage(pod: Obj) -> dict[str, Decimal]:
    """pods.go, `podComputeUsageHelper`: the pod's quota usage by resource name."""
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource, value in (resources.get(kind) or {}).items():
                try:
                    amount = quantity(value)
                except ValueError:
                    continue
                key = f"{kind}.{resource}"
                usage[key] = usage.get(key, Decimal(0)) + amount
                if kind == "requests" and resource in ("cpu", "memory", "ephemeral-storage"):
                    # The bare names mean requests (pods.go: `corev1.ResourceCPU`).
                    usage[resource] = usage.get(resource, Decimal(0)) + amount
    return usage


def exceeded(quota: Mapping[str, Any], pod: Obj, pods: Iterable[Obj]) -> str | None:
    """controller.go, `CheckRequest`: the refusal of one quota, or None if the pod fits."""
    hard_raw = (quota.get("spec") or {}).get("hard") or {}
    try:
        hard = {str(k): quantity(v) for k, v in hard_raw.items()}
    except ValueError:
        return None
    requested = {k: v for k, v in pod_usage(pod).items() if k in hard and v}
    if not requested:
        return None
    used: dict[str, Decimal] = {k: Decimal(0) for k in hard}
    for other in pods:
        if counted(other):
            for key, value in pod_usage(other).items():
                if key in used:
                    used[key] += value
    over = sorted(k for k, v in requested.items() if used[k] + v > hard[k])
    if not over:
        return None

    def show(values: Mapping[str, Decimal]) -> str:
        return ",".join(f"{k}={pretty(k, values[k])}" for k in over)

    return (
        f"exceeded quota: {quota['metadata']['name']}, requested: {show(requested)}, "
        f"used: {show(used)}, limited: {show(hard)}"
    )


# --- LimitRange ----------------------------------------------------------------------------


def limit_range(pod: Obj, ranges: Iterable[Mapping[str, Any]]) -> list[str]:
    """Default the pod's containers from each LimitRange (mutating `pod`) and return the
    min / max violations, worded as `limitranger/admission.go` (`minConstraint`,
    `maxConstraint`) writes them."""
    problems: list[str] = []
    for item in (
        i
        for r in ranges
        for i in (r.get("spec") or {}).get("limits") or []
        if i.get("type") == "Container"
    ):
        for c in (pod.get("spec") or {}).get("containers") or []:
            resources = c.setdefault("resources", {})
            requests = resources.setdefault("requests", {})
            limits = resources.setdefault("limits", {})
            for resource, value in (item.get("default") or {}).items():
                limits.setdefault(resource, value)
            for resource, value in (item.get("defaultRequest") or {}).items():
                requests.setdefault(resource, limits.get(resource, value))
            for resource, value in limits.items():
                requests.setdefault(resource, value)  # a limit alone is also the request
            for resource, bound in (item.get("min") or {}).items():
                asked = requests.get(resource)
                if asked is None:
                    problems.append(
                        f"minimum {resource} usage per Container is {bound}.  No request is"
                        " specified"
                    )
                elif quantity(asked) < quantity(bound):
                    problems.append(
                        f"minimum {resource} usage per Container is {bound}, but request is {asked}"
                    )
            for resource, bound in (item.get("max") or {}).items():
                limit = limits.get(resource)
                if limit is None:
                    problems.append(
                        f"maximum {resource} usage per Container is {bound}.  No limit is specified"
                    )
                elif quantity(limit) > quantity(bound):
                    problems.append(
                        f"maximum {resource} usage per Container is {bound}, but limit is {limit}"
                    )
    return problems


# --- PodSecurity ---------------------------------------------------------------------------

_BASELINE_CAPS = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def _quote(names: list[str]) -> str:
    """policy/helpers.go, `joinQuote`."""
    return ", ".join(f'"{n}"' for n in names)


def _containers(names: list[str], singular: str = "container") -> str:
    return f"{singular if len(names) == 1 else singular + 's'} {_quote(names)}"


def pod_security(spec: Mapping[str, Any], *, restricted: bool) -> list[str]:
    """The failed checks, `<ForbiddenReason> (<ForbiddenDetail>)`, in the order the checks are
    registered (`policy/check_*.go`, alphabetical by check ID)."""
    containers = [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
        if isinstance(c, Mapping)
    ]
    pod_sc = spec.get("securityContext") or {}

    def sc(c: Mapping[str, Any]) -> Mapping[str, Any]:
        return c.get("securityContext") or {}

    failures: list[str] = []
    # check_allowPrivilegeEscalation.go, allowPrivilegeEscalation_1_8
    if restricted:
        bad = [c["name"] for c in containers if sc(c).get("allowPrivilegeEscalation") is not False]
        if bad:
            failures.append(
                "allowPrivilegeEscalation != false ("
                f"{_containers(bad)} must set securityContext.allowPrivilegeEscalation=false)"
            )
    added = {
        c["name"]: [str(cap) for cap in (sc(c).get("capabilities") or {}).get("add") or [] if cap]
        for c in containers
    }
    if not restricted:
        # check_capabilities_baseline.go, capabilitiesBaseline_1_0 (replaced at restricted by
        # the check below: its `OverrideCheckIDs`, registry.go)
        extra = {
            n: sorted({a for a in caps if a not in _BASELINE_CAPS}) for n, caps in added.items()
        }
        details = [
            f'container "{n}" must not include {_quote(caps)} in securityContext.capabilities.add'
            for n, caps in extra.items()
            if caps
        ]
        if details:
            failures.append(f"non-default capabilities ({'; '.join(details)})")
    else:
        # check_capabilities_restricted.go, capabilitiesRestricted_1_22: the containers that
        # add anything but NET_BIND_SERVICE, and the union of what they add, sorted.
        no_drop = [
            c["name"]
            for c in containers
            if "ALL" not in ((sc(c).get("capabilities") or {}).get("drop") or [])
        ]
        adding = [n for n, caps in added.items() if any(a != "NET_BIND_SERVICE" for a in caps)]
        forbidden = sorted({a for caps in added.values() for a in caps if a != "NET_BIND_SERVICE"})
        details = []
        if no_drop:
            details.append(
                f'{_containers(no_drop)} must set securityContext.capabilities.drop=["ALL"]'
            )
        if adding:
            details.append(
                f"{_containers(adding)} must not include {_quote(forbidden)} in"
                " securityContext.capabilities.add"
            )
        if details:
            failures.append(f"unrestricted capabilities ({'; '.join(details)})")
    # check_hostNamespaces.go, hostNamespaces_1_0
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        failures.append(f"host namespaces ({', '.join(hosts)})")
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, Mapping)]
    # check_hostPathVolumes.go, hostPathVolumes_1_0 (replaced at restricted by
    # restrictedVolumes, which names hostPath among the other types)
    host_paths = [str(v.get("name")) for v in volumes if "hostPath" in v]
    if host_paths and not restricted:
        failures.append(f"hostPath volumes ({_containers(host_paths, 'volume')})")
    # check_hostPorts.go, hostPorts_1_0
    ported = [c["name"] for c in containers if any(p.get("hostPort") for p in c.get("ports") or [])]
    if ported:
        failures.append(f"hostPort ({_containers(ported)} uses hostPort)")
    # check_privileged.go, privileged_1_0
    privileged = [c["name"] for c in containers if sc(c).get("privileged") is True]
    if privileged:
        failures.append(
            f"privileged ({_containers(privileged)} must not set securityContext.privileged=true)"
        )
    if restricted:
        # check_restrictedVolumes.go, restrictedVolumes_1_0
        kinds = [(str(v.get("name")), next((k for k in v if k != "name"), "")) for v in volumes]
        bad_volumes = [(n, k) for n, k in kinds if k and k not in _RESTRICTED_VOLUMES]
        if bad_volumes:
            names = [n for n, _ in bad_volumes]
            types = sorted({k for _, k in bad_volumes})
            one, many = len(names) == 1, len(types) == 1
            failures.append(
                f"restricted volume types ({'volume' if one else 'volumes'} {_quote(names)}"
                f" {'uses' if one else 'use'}"
                f" {'restricted volume type' if many else 'restricted volume types'}"
                f" {_quote(types)})"
            )
        # check_runAsNonRoot.go, runAsNonRoot_1_0
        pod_non_root = pod_sc.get("runAsNonRoot") is True
        not_set = [
            c["name"]
            for c in containers
            if sc(c).get("runAsNonRoot") is False
            or (sc(c).get("runAsNonRoot") is None and not pod_non_root)
        ]
        if not_set:
            failures.append(
                "runAsNonRoot != true (pod or "
                f"{_containers(not_set)} must set securityContext.runAsNonRoot=true)"
            )
        # check_runAsUser.go, runAsUser_1_23
        root = [c["name"] for c in containers if sc(c).get("runAsUser") == 0]
        if pod_sc.get("runAsUser") == 0:
            failures.append("runAsUser=0 (pod must not set runAsUser=0)")
        elif root:
            failures.append(f"runAsUser=0 ({_containers(root)} must not set runAsUser=0)")
        # check_seccompProfile_restricted.go, seccompProfileRestricted_1_19
        pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")

        def seccomp_ok(value: Any) -> bool:
            return value in ("RuntimeDefault", "Localhost")

        unset = [
            c["name"]
            for c in containers
            if not seccomp_ok((sc(c).get("seccompProfile") or {}).get("type") or pod_seccomp)
        ]
        if unset:
            failures.append(
                "seccompProfile (pod or "
                f"{_containers(unset)} must set securityContext.seccompProfile.type to"
                ' "RuntimeDefault" or "Localhost")'
            )
    return failures
