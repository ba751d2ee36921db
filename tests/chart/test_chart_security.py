"""Every pod the chart runs passes the Kubernetes *restricted* Pod Security Standard.

`restricted_violations` is a small pure reading of the standard
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, "Restricted" and the
"Baseline" controls it includes), written here rather than imported so the chart is checked
against the standard, not against itself. The table test below makes sure the checker itself
catches each control.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import CI_VALUES, Manifest, one, pod_templates
from tests.pod_security_standard import ALLOWED_VOLUMES, SAFE_SYSCTLS


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """Why a pod spec fails the restricted profile; empty when it passes."""
    problems: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag) is True:
            problems.append(f"{flag} is true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"volume {volume.get('name')}: type {sorted(kinds)} not allowed")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"sysctl {sysctl.get('name')} is not in the safe set")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        problems.append(f"pod seccompProfile {pod_seccomp}")
    if pod_sc.get("runAsUser") == 0:
        problems.append("pod runAsUser is 0")
    containers = [
        *(spec.get("containers") or []),
        *(spec.get("initContainers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]
    for container in containers:
        name = container.get("name")
        sc = container.get("securityContext") or {}
        if sc.get("privileged") is True:
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if not (sc.get("runAsNonRoot") is True or pod_sc.get("runAsNonRoot") is True):
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsNonRoot") is False:
            problems.append(f"{name}: runAsNonRoot is false")
        if sc.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps.get('add')}")
        if sc.get("procMount") not in (None, "Default"):
            problems.append(f"{name}: procMount {sc.get('procMount')}")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{name}: AppArmor unconfined")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort {port['hostPort']}")
    return problems


GOOD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "main",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
}


def _with(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    target: Any = spec
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    target[parts[-1]] = value
    return spec


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (_with("hostNetwork", True), "hostNetwork"),
        (_with("hostPID", True), "hostPID"),
        (_with("volumes", [{"name": "h", "hostPath": {"path": "/"}}]), "hostPath"),
        (_with("securityContext.runAsNonRoot", False), "runAsNonRoot"),
        (_with("securityContext.seccompProfile", {"type": "Unconfined"}), "seccomp"),
        (_with("containers.0.securityContext.privileged", True), "privileged"),
        (_with("containers.0.securityContext.allowPrivilegeEscalation", True), "Escalation"),
        (_with("containers.0.securityContext.capabilities", {"drop": []}), "drop ALL"),
        (
            _with(
                "containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
            ),
            "adds capabilities",
        ),
        (_with("containers.0.securityContext.runAsUser", 0), "runAsUser is 0"),
        (_with("containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), "hostPort"),
        (_with("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]), "sysctl"),
        (
            _with("initContainers", [{"name": "init", "securityContext": {"runAsUser": 0}}]),
            "init: allowPrivilegeEscalation",
        ),
    ],
)
def test_checker_catches_each_control(spec: dict[str, Any], fragment: str) -> None:
    assert any(fragment in problem for problem in restricted_violations(spec))


def test_checker_passes_a_compliant_pod() -> None:
    assert restricted_violations(GOOD) == []


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_pod_is_restricted(rendered: dict[str, list[Manifest]], values: Path) -> None:
    pods = list(pod_templates(rendered[values.name]))
    assert pods, "the chart always runs the agent"
    problems = [f"{name}: {p}" for name, spec in pods for p in restricted_violations(spec)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_read_only_root_with_writable_home_and_tmp(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    for name, spec in pod_templates(rendered[values.name]):
        empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert mounts.get("/tmp") in empty_dirs, f"{name}: /tmp is not an emptyDir"
        assert spec.get("automountServiceAccountToken") is (name.startswith("Deployment")), (
            f"{name}: only the agent gets an API token"
        )
    agent = one(rendered[values.name], "Deployment")["spec"]["template"]["spec"]
    container = agent["containers"][0]
    home = next(e["value"] for e in container["env"] if e["name"] == "HOME")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[home] == "home"


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_probes_use_health_endpoints(rendered: dict[str, list[Manifest]], values: Path) -> None:
    spec = one(rendered[values.name], "Deployment")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
