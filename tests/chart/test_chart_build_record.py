"""The build record's RBAC: the agent may keep it; Kaniko builds can reach nothing of it.

The record of the digests the agent built (docs/builds.md, "Image trust") is what the build
cache trusts instead of registry tags, so builds must not be able to write it: it is a
ConfigMap in the agent's namespace; the agent's Role there names it (get, update) and may create
ConfigMaps; the Kaniko service account is bound to no Role anywhere and mounts no token.
"""

from __future__ import annotations

import pytest

from tests.chart.helm import RELEASE, Manifest, find

KANIKO_VALUES = "multi-namespace-values.yaml"
AGENT_NS = "launch-agent"


def _role(manifests: list[Manifest], name: str) -> Manifest:
    return next(r for r in find(manifests, "Role") if r["metadata"]["name"] == name)


def test_the_agent_may_keep_its_record_in_its_own_namespace(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered[KANIKO_VALUES]
    role = _role(manifests, f"{RELEASE}-build-record")
    assert role["metadata"]["namespace"] == AGENT_NS
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [f"{RELEASE}-image-digests"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]
    binding = next(
        b
        for b in find(manifests, "RoleBinding")
        if b["metadata"]["name"] == role["metadata"]["name"]
    )
    assert binding["metadata"]["namespace"] == AGENT_NS
    agent = next(
        b for b in find(manifests, "RoleBinding") if b["metadata"]["name"] == f"{RELEASE}-agent"
    )
    assert binding["subjects"] == agent["subjects"]  # the agent's service account, alone
    assert len(binding["subjects"]) == 1
    # The agent names the record after itself and finds it in its pod's namespace.
    (deployment,) = find(manifests, "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LAUNCH_AGENT_NAME"]["value"] == RELEASE
    assert env["LAUNCH_AGENT_BUILD_RECORD_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }


def test_kaniko_builds_are_bound_to_nothing(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered[KANIKO_VALUES]
    (kaniko_ns,) = [n["metadata"]["name"] for n in find(manifests, "Namespace")]
    assert kaniko_ns != AGENT_NS
    kaniko_sa = next(
        sa for sa in find(manifests, "ServiceAccount") if sa["metadata"]["namespace"] == kaniko_ns
    )
    assert kaniko_sa["automountServiceAccountToken"] is False
    subjects = [
        (s.get("namespace"), s["name"])
        for b in find(manifests, "RoleBinding") + find(manifests, "ClusterRoleBinding")
        for s in b.get("subjects") or []
    ]
    assert (kaniko_ns, kaniko_sa["metadata"]["name"]) not in subjects
    assert all(ns == AGENT_NS for ns, _ in subjects)  # only the agent is bound to anything


@pytest.mark.parametrize("values", ["default-values.yaml", "ha-values.yaml"])
def test_no_record_role_without_kaniko(rendered: dict[str, list[Manifest]], values: str) -> None:
    names = {r["metadata"]["name"] for r in find(rendered[values], "Role")}
    assert f"{RELEASE}-build-record" not in names
