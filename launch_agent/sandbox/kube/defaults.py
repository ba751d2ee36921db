"""Defaulting and the built-in validation kube-apiserver always applies to Pods and Jobs.

Clients read these defaults back (a Job's `spec.selector` and `controller-uid` label, a pod's
`restartPolicy`, an image's `imagePullPolicy`), and a manifest that a real cluster refuses must
be refused here too, with the same field path, or tests would pass against the sandbox and
fail in production. Only the rules the launch agent can trip over are modelled.
"""

from __future__ import annotations

from typing import Any

Causes = list[tuple[str, str]]


def _pull_policy(image: str) -> str:
    tag = image.rsplit("/", 1)[-1]
    if "@" in tag:
        return "IfNotPresent"
    return "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent"


def default_pod_spec(spec: dict[str, Any], path: str, *, job: bool) -> Causes:
    """Fill in pod spec defaults in place; return validation causes."""
    causes: Causes = []
    spec.setdefault("restartPolicy", "Never" if job else "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append((f"{path}.containers", "Required value"))
        containers = []
    valid_restart = ("OnFailure", "Never") if job else ("Always", "OnFailure", "Never")
    if spec["restartPolicy"] not in valid_restart:
        allowed = ", ".join(f'"{v}"' for v in valid_restart)
        causes.append(
            (
                f"{path}.restartPolicy",
                f'Unsupported value: "{spec["restartPolicy"]}": supported values: {allowed}',
            )
        )
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            where = f"{path}.{field}[{i}]"
            if not isinstance(container, dict):
                causes.append((where, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                causes.append((f"{where}.name", "Required value"))
            elif name in seen:
                causes.append((f"{where}.name", f'Duplicate value: "{name}"'))
            else:
                seen.add(str(name))
            image = container.get("image")
            if not image:
                causes.append((f"{where}.image", "Required value"))
            else:
                container.setdefault("imagePullPolicy", _pull_policy(str(image)))
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            for env in container.get("env") or []:
                ref = (
                    (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
                )
                if isinstance(ref, dict):
                    # `SetDefaults_ObjectFieldSelector` (pkg/apis/core/v1/defaults.go).
                    ref.setdefault("apiVersion", "v1")
    return causes


def _qos(spec: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        set(r.get("limits") or {}) >= {"cpu", "memory"}
        and all(
            (r.get("requests") or {}).get(k, v) == v for k, v in (r.get("limits") or {}).items()
        )
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"


# plugin/pkg/admission/defaulttolerationseconds/admission.go: the taints the node lifecycle
# controller puts on a failing node, tolerated for 300 s unless the pod says otherwise.
_DEFAULT_TOLERATIONS = tuple(
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
)


def _pod_only_defaults(spec: dict[str, Any]) -> None:
    """What a Pod gets and a Job's pod template does not, as kube-apiserver 1.37 serves them
    (checked by tests/cluster/test_compare.py): `SetDefaults_Pod` (a request defaults to its
    limit), `enableServiceLinks`, the Priority admission plugin (`priority` 0 without a
    priority class, `preemptionPolicy`) and DefaultTolerationSeconds."""
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, limit in resources["limits"].items():
                        requests.setdefault(name, limit)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        for default in _DEFAULT_TOLERATIONS:
            tolerated = any(
                isinstance(t, dict)
                and t.get("key") == default["key"]
                and t.get("effect") in (None, "", "NoExecute")
                for t in tolerations
            )
            if not tolerated:
                tolerations.append(dict(default))


def admit_pod(obj: dict[str, Any]) -> Causes:
    spec = obj.setdefault("spec", {})
    causes = default_pod_spec(spec, "spec", job=False)
    spec.setdefault("serviceAccountName", "default")
    # v1's deprecated alias, written on the way out (`Convert_core_PodSpec_To_v1_PodSpec`).
    spec["serviceAccount"] = spec["serviceAccountName"]
    _pod_only_defaults(spec)
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos(spec))
    return causes


def admit_job(obj: dict[str, Any]) -> Causes:
    """Job defaults (selector and labels from the uid the store just assigned)."""
    meta = obj["metadata"]
    spec = obj.setdefault("spec", {})
    causes: Causes = []
    template = spec.get("template")
    if not isinstance(template, dict):
        return [("spec.template", "Required value")]
    tmeta = template.setdefault("metadata", {})
    tspec = template.setdefault("spec", {})
    if not spec.get("manualSelector"):
        labels = {
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
        spec["selector"] = {
            "matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]},
        }
    if not meta.get("labels") and tmeta.get("labels"):
        # `SetDefaults_Job` (pkg/apis/batch/v1/defaults.go): a Job without labels takes its
        # template's; kube-apiserver 1.37 serves the generated ones among them.
        meta["labels"] = dict(tmeta["labels"])
    causes += default_pod_spec(tspec, "spec.template.spec", job=True)
    for key, default in (
        ("parallelism", 1),
        ("backoffLimit", 6),
        ("completionMode", "NonIndexed"),
        ("suspend", False),
        # pkg/apis/batch/v1/defaults.go (`SetDefaults_Job`): `Failed` under a pod failure
        # policy, the only value validation.go allows with one.
        (
            "podReplacementPolicy",
            "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed",
        ),
        ("manualSelector", False),
    ):
        spec.setdefault(key, default)
    causes += _pod_failure_policy(spec)
    if "completions" not in spec and spec.get("parallelism", 1) == 1:
        spec["completions"] = 1
    for key in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{key}", f"Invalid value: {value!r}: must be >= 0"))
    if spec.get("activeDeadlineSeconds") == 0:
        causes.append(("spec.activeDeadlineSeconds", "Invalid value: 0: must be greater than 0"))
    return causes


def _pod_failure_policy(spec: dict[str, Any]) -> Causes:
    """`SetDefaults_Job` (a pattern's `status` defaults to True) and the checks of
    pkg/apis/batch/validation/validation.go (`validateJobSpec`, `validatePodFailurePolicy`,
    `validatePodReplacementPolicy`) that a policy the agent renders could trip."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return []
    path = "spec.podFailurePolicy"
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        return [(f"{path}.rules", "Required value")]
    causes: Causes = []
    if len(rules) > 20:
        causes.append((f"{path}.rules", f"Too many: {len(rules)}: must have at most 20 items"))
    for rule in rules:
        for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
            if isinstance(pattern, dict):
                pattern.setdefault("status", "True")
    restart = (spec.get("template") or {}).get("spec", {}).get("restartPolicy")
    if restart != "Never":
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                f'Invalid value: "{restart}": only "Never" is supported when podFailurePolicy'
                " is specified",
            )
        )
    replacement = spec.get("podReplacementPolicy")
    if replacement != "Failed":
        causes.append(
            (
                "spec.podReplacementPolicy",
                f'Unsupported value: "{replacement}": supported values: "Failed"',
            )
        )
    return causes


ADMISSION = {"pods": admit_pod, "batch/jobs": admit_job}


# What kube-apiserver's Go types make of a status it stores and serves
# (`staging/src/k8s.io/api/core/v1/types.go`, `batch/v1/types.go`): a writer's JSON is decoded
# into the struct and encoded again, so an `omitempty` integer that is 0 is left out, and a
# struct field is always there, `omitempty` or not (encoding/json never omits a struct):
# `null` for an unset `metav1.Time`, `{}` for an empty `ContainerState`.
_JOB_OMITTED_WHEN_ZERO = ("active", "succeeded", "failed")


def _job_status(status: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in status.items()
        if not (k in _JOB_OMITTED_WHEN_ZERO and v == 0)
        and not (k == "completedIndexes" and v == "")
    }


def _pod_status(status: dict[str, Any]) -> dict[str, Any]:
    out = dict(status)
    if isinstance(out.get("conditions"), list):
        out["conditions"] = [
            {"lastProbeTime": None, **c} if isinstance(c, dict) else c for c in out["conditions"]
        ]
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        if isinstance(out.get(key), list):
            out[key] = [
                {"state": {}, "lastState": {}, **c} if isinstance(c, dict) else c for c in out[key]
            ]
    return out


SERIALIZED_STATUS = {"batch/jobs": _job_status, "pods": _pod_status}
