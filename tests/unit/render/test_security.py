"""Enforced security: each restricted-profile rule, with and without the admin's exception."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings

from .helpers import job_template, make_item, make_spec, restricted_violations

SETTINGS = RenderSettings()


def pod(spec: dict[str, Any] | None = None, **container: Any) -> dict[str, Any]:
    """A submitter layer that sets pod-level `spec` keys and main-container keys."""
    return {
        "spec": {
            "template": {"spec": {**(spec or {}), "containers": [{"name": "main", **container}]}}
        }
    }


# (rule, submitter layer, security exception that allows it, what the result keeps if granted)
RULES = [
    (
        "privileged",
        pod(securityContext={"privileged": True}),
        {"privileged": True},
        ("containers", "securityContext", "privileged", True),
    ),
    (
        "allowPrivilegeEscalation",
        pod(securityContext={"allowPrivilegeEscalation": True}),
        {"allowPrivilegeEscalation": True},
        ("containers", "securityContext", "allowPrivilegeEscalation", True),
    ),
    (
        "capabilities",
        pod(securityContext={"capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}}),
        {"capabilities": ["SYS_ADMIN"]},
        None,
    ),
    ("capabilities.drop", pod(securityContext={"capabilities": {"drop": ["NET_RAW"]}}), None, None),
    (
        "seccomp",
        pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        {"seccompUnconfined": True},
        None,
    ),
    ("runAsNonRoot", pod(securityContext={"runAsNonRoot": False}), {"runAsRoot": True}, None),
    ("runAsRoot", pod({"securityContext": {"runAsUser": 0}}), {"runAsUser": 0}, None),
    (
        "hostNetwork",
        pod({"hostNetwork": True}),
        {"hostNetwork": True},
        ("pod", "hostNetwork", True),
    ),
    ("hostPID", pod({"hostPID": True}), {"hostPID": True}, ("pod", "hostPID", True)),
    ("hostIPC", pod({"hostIPC": True}), {"hostIPC": True}, ("pod", "hostIPC", True)),
    (
        "hostPorts",
        pod(ports=[{"name": "p", "containerPort": 80, "hostPort": 80}]),
        {"hostPorts": True},
        None,
    ),
    (
        "hostPath",
        pod(
            {"volumes": [{"name": "h", "hostPath": {"path": "/var/run"}}]},
            volumeMounts=[{"name": "h", "mountPath": "/h"}],
        ),
        {"hostPaths": ["/var"]},
        None,
    ),
    (
        "volumeTypes",
        pod({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}),
        {"volumeTypes": ["nfs"]},
        None,
    ),
    (
        "sysctls",
        pod({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
        {"sysctls": ["kernel.msgmax"]},
        None,
    ),
    (
        "appArmor",
        pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        {"appArmorUnconfined": True},
        None,
    ),
    ("procMount", pod(securityContext={"procMount": "Unmasked"}), None, None),
    ("serviceAccount", pod({"serviceAccountName": "cluster-admin"}), None, None),
    (
        "automountServiceAccountToken",
        pod({"automountServiceAccountToken": True}),
        {"automountServiceAccountToken": True},
        None,
    ),
]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    tmpl: dict[str, Any] = obj["spec"]["template"]
    return tmpl


@pytest.mark.parametrize(("rule", "layer", "exception", "kept"), RULES, ids=[r[0] for r in RULES])
def test_submitter_cannot_break_the_profile(
    rule: str, layer: dict[str, Any], exception: Any, kept: Any
) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    out = render(spec, make_item(layer), None, SETTINGS)
    assert restricted_violations(_pod(out.workload)) == []
    assert out.warnings, "a changed submitter value must be reported"


@pytest.mark.parametrize(
    ("rule", "layer", "exception", "kept"),
    [r for r in RULES if r[2]],
    ids=[r[0] for r in RULES if r[2]],
)
def test_admin_exception_allows_exactly_that_rule(
    rule: str, layer: dict[str, Any], exception: Any, kept: Any
) -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"], security=exception)
    out = render(spec, make_item(layer), None, SETTINGS)
    violations = set(restricted_violations(_pod(out.workload)))
    assert violations <= {
        rule,
        "runAsNonRoot",
        "allowPrivilegeEscalation",
        "runAsRoot",
        "automountServiceAccountToken",
        "capabilities",
    }
    assert rule in violations or rule in ("capabilities",)
    if kept is not None:
        where, *path, value = kept
        node = _pod(out.workload)["spec"]
        if where == "containers":
            node = node["containers"][0]
        for key in path[:-1]:
            node = node[key]
        assert node[path[-1]] == value


def test_service_account_comes_only_from_the_admin() -> None:
    spec = make_spec(
        job_template(image="i"), overridable=["**"], security={"serviceAccountName": "reader"}
    )
    out = render(spec, make_item(pod({"serviceAccountName": "cluster-admin"})), None, SETTINGS)
    assert _pod(out.workload)["spec"]["serviceAccountName"] == "reader"
    assert _pod(out.workload)["spec"]["automountServiceAccountToken"] is False


def test_removed_host_path_volume_takes_its_mounts_along() -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = pod(
        {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
        volumeMounts=[{"name": "h", "mountPath": "/h"}],
    )
    out = _pod(render(spec, make_item(layer), None, SETTINGS).workload)
    assert out["spec"]["volumes"] == []
    assert out["spec"]["containers"][0]["volumeMounts"] == []


def test_init_and_ephemeral_containers_are_restricted_too() -> None:
    spec = make_spec(job_template(image="i"), overridable=["**"])
    layer = {
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {"name": "init", "image": "x", "securityContext": {"privileged": True}}
                    ],
                    "ephemeralContainers": [
                        {
                            "name": "debug",
                            "image": "x",
                            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
                        }
                    ],
                }
            }
        }
    }
    out = _pod(render(spec, make_item(layer), None, SETTINGS).workload)
    assert restricted_violations(out) == []


@pytest.mark.parametrize(
    ("container", "path"),
    [
        (
            {"securityContext": {"privileged": True}},
            "spec.template.spec.template.spec.containers[main].securityContext.privileged",
        ),
        (
            {"ports": [{"containerPort": 1, "hostPort": 1}]},
            "spec.template.spec.template.spec.containers[main].ports[1].hostPort",
        ),
    ],
)
def test_admin_template_must_be_restricted_or_granted(container: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        make_spec(job_template(image="i", **container))
    assert [p.path for p in exc.value.problems] == [path]
    assert "needs security." in exc.value.problems[0].reason


def test_admin_pod_settings_are_kept() -> None:
    tmpl = job_template(image="i")
    tmpl["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": 1000, "fsGroup": 2000}
    out = _pod(render(make_spec(tmpl), make_item(), None, SETTINGS).workload)
    assert out["spec"]["securityContext"] == {
        "runAsUser": 1000,
        "fsGroup": 2000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
