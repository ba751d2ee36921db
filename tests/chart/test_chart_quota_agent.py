"""quota.mode agent in the chart: the tree reaches the agent and the Role may patch workloads."""

from __future__ import annotations

from tests.chart.helm import Helm, find
from tests.chart.test_chart_rbac import rule_grants
from tests.chart.test_chart_values import DEFAULT, load_agent_config

TREE = {
    "quota.mode": "agent",
    "quota.tree.root.name": "root",
    "workloads.jobset": True,
}


def test_agent_mode_grants_patch_on_every_enabled_workload_kind(helm: Helm) -> None:
    manifests = helm.template([DEFAULT], TREE)
    assert load_agent_config(manifests).config.quota.tree == {"root": {"name": "root"}}
    roles = [r for r in find(manifests, "Role") if r["metadata"]["name"].endswith("-agent")]
    assert roles
    for role in roles:
        grants = rule_grants(role["rules"])
        for kind in (("batch", "jobs"), ("jobset.x-k8s.io", "jobsets")):
            assert grants[kind] == {"create", "get", "list", "watch", "delete", "patch"}, kind
        assert all("patch" not in verbs for k, verbs in grants.items() if k[0] == ""), grants


def test_other_modes_grant_no_patch(helm: Helm) -> None:
    for mode in ("off", "kueue"):
        manifests = helm.template([DEFAULT], {"quota.mode": mode, "workloads.jobset": True})
        for role in find(manifests, "Role"):
            assert all("patch" not in r["verbs"] for r in role["rules"]), (mode, role)
