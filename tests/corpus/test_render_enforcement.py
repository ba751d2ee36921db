"""Hostile corpus for render enforcement: every pod restricted, nothing expanded into the key.

Each case (`render_enforcement/NNN-name.yaml`, format in that directory's README) is rendered
through the `launch-agent render` command in-process, from temporary files, with a fixed
agent configuration. A refused case must exit 2 with every expected substring on stderr. A
safe case must exit 0, and then every pod template in the output (found by this file's own
walk, not the product's kind table) must pass `restricted_problems`, a checker written here
from the Pod Security Standards (restricted profile, Kubernetes 1.33), and no container may see
the API key anywhere but `WANDB_API_KEY` once the kubelet has expanded its env, command and
args (`tests/kubelet_expansion.py`). Nothing here imports the product except the CLI entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from tests.kubelet_expansion import container_view
from tests.pod_security_standard import (
    ALLOWED_VOLUMES,
    LEGACY_APPARMOR_VALUES,
    LEGACY_SECCOMP_VALUES,
    RESTRICTED_CAPABILITY_ADDS,
    SAFE_SYSCTLS,
    SELINUX_TYPES,
)

HERE = Path(__file__).parent / "render_enforcement"
CASES = sorted(HERE.glob("[0-9][0-9][0-9]-*.yaml"))
SECRET = "wandb-api-key-corpus"
KEY = "sk-corpus-THE-API-KEY"
CONFIG = f"agent_name: corpus-agent\napi_key_secret: {SECRET}\nbase_url: http://wandb.test\n"

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


# ----------------------------------------------------------------------------- the checker


def _confined_profile(profile: Any) -> bool | None:
    """True/False for a set seccomp or AppArmor profile (Unconfined is not), None when unset."""
    if profile is None:
        return None
    return isinstance(profile, dict) and profile.get("type") in ("RuntimeDefault", "Localhost")


def _legacy_annotation_ok(value: Any, *, seccomp: bool) -> bool:
    if not isinstance(value, str):
        return False
    fixed = LEGACY_SECCOMP_VALUES if seccomp else LEGACY_APPARMOR_VALUES
    return value in fixed or value.startswith("localhost/")


def _container_problems(c: Any, where: str, pod: dict[str, Any]) -> list[str]:
    if not isinstance(c, dict):
        return [f"{where}: not a mapping"]
    out = []
    sc = c.get("securityContext")
    if sc is None:
        sc = {}
    if not isinstance(sc, dict):
        return [f"{where}.securityContext: not a mapping"]
    psc = pod.get("securityContext") or {}
    if sc.get("privileged") not in (None, False):
        out.append(f"{where}: privileged")  # Baseline: Privileged Containers
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}: allowPrivilegeEscalation must be false")  # Restricted
    caps = sc.get("capabilities")
    if not isinstance(caps, dict):
        out.append(f"{where}: capabilities.drop must include ALL")
    else:
        drop, add = caps.get("drop"), caps.get("add")
        if not isinstance(drop, list) or "ALL" not in drop:
            out.append(f"{where}: capabilities.drop must include ALL")
        if add is not None and (
            not isinstance(add, list) or any(a not in RESTRICTED_CAPABILITY_ADDS for a in add)
        ):
            out.append(f"{where}: capabilities.add {add!r}")
    nonroot = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    if nonroot is not True:
        out.append(f"{where}: runAsNonRoot must be true")
    if sc.get("runAsUser", psc.get("runAsUser")) is not None and not (
        isinstance(sc.get("runAsUser", psc.get("runAsUser")), int)
        and sc.get("runAsUser", psc.get("runAsUser")) != 0
    ):
        out.append(f"{where}: runAsUser must be a non-zero integer")
    seccomp = _confined_profile(sc.get("seccompProfile"))
    pod_seccomp = _confined_profile(psc.get("seccompProfile"))
    if seccomp is False or (seccomp is None and pod_seccomp is not True):
        out.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
    if _confined_profile(sc.get("appArmorProfile")) is False:
        out.append(f"{where}: appArmorProfile")
    se = sc.get("seLinuxOptions") or {}
    if not isinstance(se, dict) or se.get("user") or se.get("role"):
        out.append(f"{where}: seLinuxOptions user/role")
    elif se.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type")
    if sc.get("procMount", "Default") != "Default":
        out.append(f"{where}: procMount")
    if (sc.get("windowsOptions") or {}).get("hostProcess") not in (None, False):
        out.append(f"{where}: hostProcess")
    for p in c.get("ports") or []:
        if isinstance(p, dict) and p.get("hostPort") not in (None, 0):
            out.append(f"{where}: hostPort")
    return out


def restricted_problems(tmpl: dict[str, Any], where: str) -> list[str]:
    """What the restricted profile (PSS, Kubernetes 1.33) forbids in one PodTemplateSpec."""
    out = []
    spec = tmpl.get("spec")
    if not isinstance(spec, dict):
        return [f"{where}.spec: not a mapping"]
    meta = tmpl.get("metadata") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) not in (None, False):
            out.append(f"{where}: {key}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"} if isinstance(v, dict) else {"?"}
        if kinds - ALLOWED_VOLUMES:
            out.append(f"{where}: volume types {sorted(kinds - ALLOWED_VOLUMES)}")
    psc = spec.get("securityContext") or {}
    if not isinstance(psc, dict):
        return [*out, f"{where}.spec.securityContext: not a mapping"]
    for s in psc.get("sysctls") or []:
        if not isinstance(s, dict) or s.get("name") not in SAFE_SYSCTLS:
            out.append(f"{where}: sysctl {s!r}")
    if _confined_profile(psc.get("seccompProfile")) is False:
        out.append(f"{where}: pod seccompProfile")
    if _confined_profile(psc.get("appArmorProfile")) is False:
        out.append(f"{where}: pod appArmorProfile")
    if (psc.get("windowsOptions") or {}).get("hostProcess") not in (None, False):
        out.append(f"{where}: hostProcess")
    se = psc.get("seLinuxOptions") or {}
    if se.get("user") or se.get("role") or se.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: pod seLinuxOptions")
    for key, value in (meta.get("annotations") or {}).items():
        legacy_seccomp = key == "seccomp.security.alpha.kubernetes.io/pod" or key.startswith(
            "container.seccomp.security.alpha.kubernetes.io/"
        )
        legacy_apparmor = key.startswith("container.apparmor.security.beta.kubernetes.io/")
        if (legacy_seccomp or legacy_apparmor) and not _legacy_annotation_ok(
            value, seccomp=legacy_seccomp
        ):
            out.append(f"{where}: annotation {key}={value!r}")
    if "namespace" in meta:
        out.append(f"{where}: metadata.namespace")  # the agent's own rule, not the PSS
    for list_key in CONTAINER_LISTS:
        for i, c in enumerate(spec.get(list_key) or []):
            out += _container_problems(c, f"{where}.spec.{list_key}[{i}]", spec)
    return out


def pod_templates(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every mapping whose `spec` holds a container list, anywhere in `node`."""
    out = []
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and any(isinstance(spec.get(k), list) for k in CONTAINER_LISTS):
            out.append((path or "(root)", node))
        for k, v in node.items():
            out += pod_templates(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += pod_templates(v, f"{path}[{i}]")
    return out


def _operator_containers(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """KubeRay's autoscaler: a container in the head pod built from `autoscalerOptions`
    (kuberay common/pod.go BuildAutoscalerContainer + mergeAutoscalerOverrides)."""
    if obj.get("kind") != "RayJob":
        return []
    rcs = (obj.get("spec") or {}).get("rayClusterSpec") or {}
    if rcs.get("enableInTreeAutoscaling") is not True:
        return []
    head = ((rcs.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    options = rcs.get("autoscalerOptions") or {}
    return [("autoscaler", {"securityContext": options.get("securityContext")}, head)]


# ----------------------------------------------------------------------------- the runner


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(node, list) and part.lstrip("-").isdigit():
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(dotted)
    return node


def _has(node: Any, dotted: str) -> bool:
    try:
        _get(node, dotted)
    except (KeyError, IndexError):
        return False
    return True


def _run(
    case: dict[str, Any], tmp: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    spec, item, config = tmp / "spec.yaml", tmp / "item.json", tmp / "launch-config.yaml"
    spec.write_text(yaml.safe_dump(case["input"]["spec"], sort_keys=False))
    item.write_text(json.dumps(case["input"]["item"]))
    config.write_text(CONFIG)
    argv = ["render", "--spec", str(spec), "--item", str(item), "-c", str(config), "-o", "json"]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = yaml.safe_load(path.read_text())
    assert set(case) == {"description", "input", "expect"}, path.name
    code, out, err = _run(case, tmp_path, capsys)
    expect = case["expect"]
    if "error" in expect:
        assert code == 2, f"expected a refusal, got exit {code}:\n{out[:2000]}"
        for text in expect["error"]:
            assert text in err, f"{text!r} not in:\n{err}"
        return
    assert code == 0, err
    safe = expect["safe"] or {}
    (obj,) = json.loads(out)
    allow = set(safe.get("allow", ()))
    templates = pod_templates(obj)
    problems = []
    for where, tmpl in templates:
        problems += [p for p in restricted_problems(tmpl, where) if not any(a in p for a in allow)]
    for where, container, pod in _operator_containers(obj):
        problems += _container_problems(container, where, pod)
    assert problems == []
    secrets = {(SECRET, "password"): KEY}
    for where, tmpl in templates:
        for list_key in CONTAINER_LISTS:
            for c in tmpl["spec"].get(list_key) or []:
                view = container_view(c, secrets)
                leaked = [n for n, v in view["env"].items() if KEY in v and n != "WANDB_API_KEY"]
                leaked += [a for a in view["command"] + view["args"] if KEY in a]
                assert leaked == [], f"{where}: {leaked}"
    if "pods" in safe:
        assert len(templates) == safe["pods"], [w for w, _ in templates]
    for dotted in safe.get("absent", ()):
        assert not _has(obj, dotted), dotted
    for dotted, value in (safe.get("equals") or {}).items():
        assert _get(obj, dotted) == value, dotted
    for key, value in (safe.get("annotations") or {}).items():
        assert (templates[0][1].get("metadata") or {}).get("annotations", {}).get(key) == value
    for text in safe.get("warnings", ()):
        assert text in err, f"{text!r} not in:\n{err}"
    if "env" in safe or "args" in safe or "command" in safe:
        first = templates[0][1]["spec"]["containers"][0]
        view = container_view(first, secrets)
        for name, value in (safe.get("env") or {}).items():
            assert view["env"].get(name) == value, name
        for key in ("args", "command"):
            if key in safe:
                assert view[key] == safe[key], key


def test_corpus_is_large_and_covers_every_example_kind() -> None:
    assert len(CASES) >= 70
    kinds = set()
    for path in CASES:
        case = yaml.safe_load(path.read_text())
        tmpl = case["input"]["spec"]["spec"]["template"]
        body = tmpl.get("kubernetes", tmpl)
        kinds.add((body.get("apiVersion", "batch/v1"), body.get("kind", "Job")))
    examples = Path(__file__).resolve().parents[2] / "queue-specs"
    for example in examples.glob("*.yaml"):
        tmpl = yaml.safe_load(example.read_text())["spec"]["template"]
        body = tmpl.get("kubernetes", tmpl)
        kind = (body.get("apiVersion", "batch/v1"), body.get("kind", "Job"))
        assert kind in kinds, f"no corpus case for {kind} ({example.name})"


def test_the_checker_itself_flags_each_rule() -> None:
    # The checker must be able to fail: an unrestricted template breaks every rule it knows.
    bad = {
        "metadata": {
            "namespace": "other",
            "annotations": {
                "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/c": "unconfined",
            },
        },
        "spec": {
            "hostNetwork": True,
            "hostPID": "true",
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "containers": [
                {
                    "name": "c",
                    "ports": [{"containerPort": 1, "hostPort": 1}],
                    "securityContext": {
                        "privileged": "true",
                        "capabilities": {"add": "SYS_ADMIN", "drop": ["NET_RAW"]},
                        "runAsUser": "0",
                        "procMount": "Unmasked",
                        "seccompProfile": {"type": "Unconfined"},
                    },
                }
            ],
        },
    }
    found = "\n".join(restricted_problems(bad, "t"))
    for rule in (
        "hostNetwork",
        "hostPID",
        "volume types ['hostPath']",
        "sysctl",
        "annotation seccomp.security.alpha.kubernetes.io/pod",
        "annotation container.apparmor",
        "metadata.namespace",
        "privileged",
        "allowPrivilegeEscalation",
        "capabilities.drop",
        "capabilities.add",
        "runAsNonRoot",
        "runAsUser",
        "procMount",
        "seccompProfile",
        "hostPort",
    ):
        assert rule in found, rule
    leaky: dict[str, Any] = {
        "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "password"}}}],
        "args": ["$(K)"],
    }
    assert container_view(leaky, {(SECRET, "password"): KEY})["args"] == [KEY]
