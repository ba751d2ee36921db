"""`agent.replicas` and the leader Lease: strategy, PDB, RBAC for the one Lease, identity."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import ci_file
from tests.chart.helm import RELEASE, RELEASE_NAMESPACE, Helm, HelmError, Manifest, find, one

HA = ci_file("ha-values.yaml")
DEFAULT = ci_file("default-values.yaml")


def env_of(manifests: list[Manifest]) -> dict[str, Any]:
    deployment = one(manifests, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def lease_roles(manifests: list[Manifest]) -> list[Manifest]:
    return [
        r
        for r in find(manifests, "Role")
        if any("coordination.k8s.io" in rule["apiGroups"] for rule in r["rules"])
    ]


def test_two_replicas_roll_with_a_pdb_keeping_one(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered[HA.name]
    spec = one(manifests, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert one(manifests, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_the_replica_is_the_pod_and_the_lease_is_the_release(
    rendered: dict[str, list[Manifest]],
) -> None:
    env = env_of(rendered[HA.name])
    assert env["LAUNCH_AGENT_LEADER_ELECTION"] == "true"
    assert env["LAUNCH_AGENT_LEASE_NAME"] == RELEASE
    assert env["LAUNCH_AGENT_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["LAUNCH_AGENT_POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_rbac_for_the_one_lease_in_the_agents_namespace_only(
    rendered: dict[str, list[Manifest]],
) -> None:
    (role,) = lease_roles(rendered[HA.name])
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    by_verbs = {tuple(rule["verbs"]): rule for rule in role["rules"]}
    assert set(by_verbs) == {("get", "update"), ("create",)}
    assert by_verbs[("get", "update")]["resourceNames"] == [RELEASE]
    assert all(rule["resources"] == ["leases"] for rule in role["rules"])
    binding = next(
        b
        for b in find(rendered[HA.name], "RoleBinding")
        if b["metadata"]["name"] == f"{RELEASE}-leader"
    )
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_one_replica_uses_the_lease_too_and_never_blocks_a_drain(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered[DEFAULT.name]
    spec = one(manifests, "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert one(manifests, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert len(lease_roles(manifests)) == 1


def test_without_the_lease_one_replica_recreates(helm: Helm) -> None:
    manifests = helm.template([DEFAULT], {"agent.leaderElection.enabled": False})
    assert one(manifests, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert lease_roles(manifests) == []
    assert "LAUNCH_AGENT_LEADER_ELECTION" not in env_of(manifests)


def test_more_replicas_without_the_lease_are_refused(helm: Helm) -> None:
    with pytest.raises(HelmError, match="more than one replica needs the leader Lease"):
        helm.template([HA], {"agent.leaderElection.enabled": False})


def test_the_lease_name_can_be_chosen(helm: Helm) -> None:
    manifests = helm.template([HA], {"agent.leaderElection.leaseName": "my-lease"})
    assert env_of(manifests)["LAUNCH_AGENT_LEASE_NAME"] == "my-lease"
    (role,) = lease_roles(manifests)
    assert role["rules"][0]["resourceNames"] == ["my-lease"]
