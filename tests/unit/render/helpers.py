"""Shared builders for the render tests, and an independent restricted-profile checker.

The checker is written from the Pod Security Standards page, not from
`launch_agent.render.security`, so the property tests compare the enforcement against a
second reading of the rules instead of against itself.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.spec_load import build_queue_spec
from tests.pod_security_standard import ALLOWED_VOLUMES, SAFE_SYSCTLS

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "queue-specs"
RQI = "UnVuUXVldWVJdGVtOjEyMzQ1Njc4OQ=="  # RunQueueItem:123456789


def job_template(**container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"template": {"spec": {"containers": [{"name": "main", **container}]}}},
    }


def make_spec(
    template: dict[str, Any] | None = None,
    *,
    overridable: list[str] | None = None,
    name: str = "test-spec",
    **extra: Any,
) -> QueueSpec:
    spec: dict[str, Any] = {
        "queues": ["q"],
        "namespace": "ns",
        "template": template if template is not None else job_template(image="${image_uri}"),
    }
    if overridable is not None:
        spec["overridable"] = overridable
    spec.update(extra)
    data = {
        "apiVersion": "launch-agent/v1",
        "kind": "QueueSpec",
        "metadata": {"name": name},
        "spec": spec,
    }
    queue_spec, _ = build_queue_spec(copy.deepcopy(data))
    return queue_spec


def make_item(
    resource_args: dict[str, Any] | None = None,
    *,
    rqi: str = RQI,
    **run_spec: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "entity": "ent",
        "project": "proj",
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example.com/img:1"},
    }
    if resource_args is not None:
        spec["resource_args"] = {"kubernetes": resource_args}
    spec.update(run_spec)
    return {"runQueueItemId": rqi, "runSpec": spec}


def restricted_violations(pod_template: dict[str, Any]) -> list[str]:
    """Names of the restricted-profile rules `pod_template` breaks (PSS, Kubernetes 1.33)."""
    out = []
    spec = pod_template.get("spec", {})
    meta = pod_template.get("metadata", {}) or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(key)
    for v in spec.get("volumes", []) or []:
        kinds = set(v) - {"name"}
        if "hostPath" in kinds:
            out.append("hostPath")
        elif kinds - ALLOWED_VOLUMES:
            out.append("volumeTypes")
    psc = spec.get("securityContext", {}) or {}
    for s in psc.get("sysctls", []) or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append("sysctls")
    for k, v in (meta.get("annotations") or {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and v == "unconfined":
            out.append("appArmor")
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("appArmor")
    if psc.get("runAsUser") == 0:
        out.append("runAsRoot")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    pod_nonroot = psc.get("runAsNonRoot") is True
    if spec.get("serviceAccountName") is not None or spec.get("serviceAccount") is not None:
        out.append("serviceAccount")
    if spec.get("automountServiceAccountToken") is not False:
        out.append("automountServiceAccountToken")
    for list_key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(list_key, []) or []:
            sc = c.get("securityContext", {}) or {}
            if sc.get("privileged"):
                out.append("privileged")
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append("allowPrivilegeEscalation")
            caps = sc.get("capabilities", {}) or {}
            if "ALL" not in (caps.get("drop") or []):
                out.append("capabilities.drop")
            if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
                out.append("capabilities")
            seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
            if seccomp not in ("RuntimeDefault", "Localhost"):
                out.append("seccomp")
            nonroot = sc.get("runAsNonRoot", pod_nonroot)
            if nonroot is not True:
                out.append("runAsNonRoot")
            if sc.get("runAsUser") == 0:
                out.append("runAsRoot")
            if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
                out.append("appArmor")
            if sc.get("procMount", "Default") != "Default":
                out.append("procMount")
            for p in c.get("ports", []) or []:
                if p.get("hostPort"):
                    out.append("hostPorts")
    return out
