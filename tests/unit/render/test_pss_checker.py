"""The independent checker (`tests/pss_checker.py`) can fail: one known-good workload passes,
and each known-bad change to it (one per control of the standard and per project guarantee)
is reported with the rule it breaks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.pss_checker import Allowed, violations

ALLOWED = Allowed(namespace="ns", secrets=frozenset({"wandb-api-key-launch-agent"}))
SAFE_CTX = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def good_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"launch-agent.io/agent": "a"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "x"}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                        "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                    },
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "key", "secret": {"secretName": "wandb-api-key-launch-agent"}},
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "img:1",
                            "args": ["--name", "$$(WANDB_API_KEY)", "$(WANDB_PROJECT)"],
                            "securityContext": copy.deepcopy(SAFE_CTX),
                            "env": [
                                {
                                    "name": "WANDB_API_KEY",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": "wandb-api-key-launch-agent",
                                            "key": "password",
                                        }
                                    },
                                },
                                {"name": "WANDB_NAME", "value": "run $$(WANDB_API_KEY)"},
                            ],
                            "ports": [{"containerPort": 80}],
                        }
                    ],
                },
            }
        },
    }


Edit = Callable[[dict[str, Any]], None]


def _pod(m: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = m["spec"]["template"]["spec"]
    return spec


def _main(m: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(m)["containers"][0]
    return container


def _csc(m: dict[str, Any]) -> dict[str, Any]:
    ctx: dict[str, Any] = _main(m)["securityContext"]
    return ctx


def _ann(m: dict[str, Any]) -> dict[str, Any]:
    ann: dict[str, Any] = m["spec"]["template"]["metadata"].setdefault("annotations", {})
    return ann


BAD: list[tuple[str, Edit, str]] = [
    ("hostNetwork", lambda m: _pod(m).update(hostNetwork=True), "host namespaces"),
    ("hostPID", lambda m: _pod(m).update(hostPID=True), "host namespaces"),
    ("hostIPC", lambda m: _pod(m).update(hostIPC=True), "host namespaces"),
    ("privileged", lambda m: _csc(m).update(privileged=True), "privileged"),
    ("privileged-string", lambda m: _csc(m).update(privileged="true"), "malformed"),
    ("hostIPC-list", lambda m: _pod(m).update(hostIPC=[]), "malformed"),
    (
        "cap-add",
        lambda m: _csc(m)["capabilities"].update(add=["SYS_ADMIN"]),
        "capabilities",
    ),
    ("cap-add-string", lambda m: _csc(m)["capabilities"].update(add="SYS_ADMIN"), "malformed"),
    ("cap-no-drop", lambda m: _csc(m)["capabilities"].pop("drop"), "capabilities"),
    (
        "hostPath",
        lambda m: _pod(m)["volumes"].append({"name": "h", "hostPath": {"path": "/etc"}}),
        "hostPath",
    ),
    (
        "nfs",
        lambda m: _pod(m)["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
        "volume types",
    ),
    ("hostPort", lambda m: _main(m)["ports"][0].update(hostPort=80), "hostPorts"),
    (
        "apparmor-field",
        lambda m: _csc(m).update(appArmorProfile={"type": "Unconfined"}),
        "appArmor",
    ),
    (
        "apparmor-annotation",
        lambda m: _ann(m).update({"container.apparmor.security.beta.kubernetes.io/main": "x"}),
        "appArmor",
    ),
    ("selinux-user", lambda m: _csc(m).update(seLinuxOptions={"user": "root"}), "SELinux"),
    ("selinux-type", lambda m: _csc(m).update(seLinuxOptions={"type": "spc_t"}), "SELinux"),
    ("procMount", lambda m: _csc(m).update(procMount="Unmasked"), "procMount"),
    (
        "seccomp-unconfined",
        lambda m: _csc(m).update(seccompProfile={"type": "Unconfined"}),
        "seccomp",
    ),
    ("seccomp-unset", lambda m: _pod(m)["securityContext"].pop("seccompProfile"), "seccomp"),
    (
        "seccomp-annotation",
        lambda m: _ann(m).update({"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}),
        "seccomp",
    ),
    (
        "sysctl",
        lambda m: _pod(m)["securityContext"]["sysctls"].append({"name": "kernel.msgmax"}),
        "sysctls",
    ),
    ("escalation", lambda m: _csc(m).pop("allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    ("nonroot-unset", lambda m: _pod(m)["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    ("nonroot-false", lambda m: _csc(m).update(runAsNonRoot=False), "runAsNonRoot"),
    ("uid0", lambda m: _csc(m).update(runAsUser=0), "runAsUser"),
    (
        "hostProcess",
        lambda m: _csc(m).update(windowsOptions={"hostProcess": True}),
        "hostProcess",
    ),
    (
        "init-container",
        lambda m: _pod(m).update(initContainers=[{"name": "i", "image": "x"}]),
        "allowPrivilegeEscalation",
    ),
    (
        "expansion-env",
        lambda m: _main(m)["env"].append({"name": "X", "value": "$(WANDB_API_KEY)"}),
        "$(...) expansion",
    ),
    ("expansion-args", lambda m: _main(m).update(args=["a$(WANDB_API_KEY)"]), "$(...) expansion"),
    ("automount-unset", lambda m: _pod(m).pop("automountServiceAccountToken"), "token"),
    (
        "projected-token",
        lambda m: _pod(m)["volumes"].append(
            {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}
        ),
        "token",
    ),
    ("service-account", lambda m: _pod(m).update(serviceAccountName="admin"), "service account"),
    (
        "secret-env",
        lambda m: _main(m)["env"].append(
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
        ),
        "secret reference",
    ),
    (
        "secret-envfrom",
        lambda m: _main(m).update(envFrom=[{"secretRef": {"name": "db"}}]),
        "secret reference",
    ),
    (
        "secret-volume",
        lambda m: _pod(m)["volumes"].append({"name": "s", "secret": {"secretName": "db"}}),
        "secret reference",
    ),
    (
        "pull-secret",
        lambda m: _pod(m).update(imagePullSecrets=[{"name": "other-team"}]),
        "secret reference",
    ),
    ("namespace", lambda m: m["metadata"].update(namespace="kube-system"), "namespace"),
    (
        "nested-namespace",
        lambda m: m["spec"]["template"]["metadata"].update(namespace="kube-system"),
        "namespace",
    ),
    (
        "kueue-label",
        lambda m: m["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "vip"}),
        "reserved key",
    ),
    ("containers-map", lambda m: _pod(m).update(containers={}), "malformed"),
    ("image-map", lambda m: _main(m).update(image={}), "malformed"),
    ("env-map", lambda m: _main(m).update(env={}), "malformed"),
    ("template-map", lambda m: m["spec"].update(template=[]), "malformed"),
    (
        "smuggled-pod",
        lambda m: m["spec"].update(extra={"spec": {"containers": [{"name": "x", "image": "y"}]}}),
        "allowPrivilegeEscalation",
    ),
]


def test_the_good_workload_passes() -> None:
    assert violations(good_job(), allowed=ALLOWED) == []


@pytest.mark.parametrize(("edit", "rule"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_each_bad_change_is_reported(edit: Edit, rule: str) -> None:
    manifest = good_job()
    edit(manifest)
    found = violations(manifest, allowed=ALLOWED)
    assert any(f": {rule}" in v for v in found), found


def test_exceptions_the_spec_grants_are_not_violations() -> None:
    manifest = good_job()
    _pod(manifest).update(hostNetwork=True, serviceAccountName="reader")
    _csc(manifest)["capabilities"]["add"] = ["IPC_LOCK"]
    _pod(manifest)["volumes"].append({"name": "d", "hostPath": {"path": "/data/x"}})
    allowed = Allowed(
        namespace="ns",
        secrets=ALLOWED.secrets,
        host_network=True,
        service_account="reader",
        capabilities=frozenset({"IPC_LOCK"}),
        host_paths=("/data",),
    )
    assert violations(manifest, allowed=allowed) == []
    _pod(manifest)["volumes"].append({"name": "e", "hostPath": {"path": "/data/../etc"}})
    assert any("hostPath" in v for v in violations(manifest, allowed=allowed))


def rayjob(**spec: Any) -> dict[str, Any]:
    pod = good_job()["spec"]["template"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {
            "submitterPodTemplate": copy.deepcopy(pod),
            "rayClusterSpec": {"headGroupSpec": {"template": copy.deepcopy(pod)}},
            **spec,
        },
    }


def test_operator_generated_ray_pods_are_checked() -> None:
    assert violations(rayjob(), allowed=ALLOWED) == []
    default_submitter = rayjob()
    del default_submitter["spec"]["submitterPodTemplate"]
    assert any("default submitter" in v for v in violations(default_submitter, allowed=ALLOWED))
    assert violations(rayjob(submissionMode="HTTPMode"), allowed=ALLOWED) == []
    autoscaler = rayjob()
    autoscaler["spec"]["rayClusterSpec"].update(
        enableInTreeAutoscaling=True,
        autoscalerOptions={"image": "x", "securityContext": {"privileged": True}},
    )
    found = violations(autoscaler, allowed=ALLOWED)
    assert any("autoscalerOptions.securityContext.privileged" in v for v in found), found
    selector = rayjob(clusterSelector={"ray.io/cluster": "someone-elses"})
    assert any("cluster" in v for v in violations(selector, allowed=ALLOWED))
    redis = rayjob()
    redis["spec"]["rayClusterSpec"]["gcsFaultToleranceOptions"] = {
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
    }
    assert any("secret reference" in v for v in violations(redis, allowed=ALLOWED))


def test_trainjob_runtime_and_trainer_env_are_checked() -> None:
    allowed = Allowed(
        namespace="ns", secrets=ALLOWED.secrets, train_runtime={"name": "torch-distributed"}
    )
    tj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "x"}},
    }
    assert violations(tj, allowed=allowed) == []
    other = copy.deepcopy(tj)
    other["spec"]["runtimeRef"] = {"name": "privileged-runtime"}
    assert any("runtime" in v for v in violations(other, allowed=allowed))
    leak = copy.deepcopy(tj)
    leak["spec"]["trainer"]["args"] = ["$(WANDB_API_KEY)"]
    assert any("expansion" in v for v in violations(leak, allowed=allowed))
    init = copy.deepcopy(tj)
    init["spec"]["initializer"] = {"dataset": {"secretRef": {"name": "db"}}}
    assert any("secret reference" in v for v in violations(init, allowed=allowed))
