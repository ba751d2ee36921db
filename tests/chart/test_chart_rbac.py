"""Least-privilege RBAC: exactly the rights the agent uses, where it uses them, and no more.

Each CI values file states, in EXPECTED below, which workload resources it enables; the tests
check that every target namespace gets the same Role, that no rule has a wildcard, that Secrets
are reachable only by the agent's own Secret's name, and that cluster-wide rights exist only for
Kueue's ClusterQueues when Kueue admission is on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from tests.chart.conftest import ci_file
from tests.chart.helm import CI_VALUES, RELEASE, RELEASE_NAMESPACE, Helm, HelmError, Manifest, find

READ = {"get", "list", "watch"}
WORKLOAD_VERBS = {"create", "get", "list", "watch", "delete"}

# Values file -> (agent namespace, target namespaces, enabled workload resources).
JOB = ("batch", "jobs")
EXPECTED: dict[str, tuple[str, set[str], set[tuple[str, str]]]] = {
    "default-values.yaml": (RELEASE_NAMESPACE, {RELEASE_NAMESPACE}, {JOB}),
    "observability-values.yaml": (RELEASE_NAMESPACE, {RELEASE_NAMESPACE}, {JOB}),
    "diagnostics-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {JOB, ("jobset.x-k8s.io", "jobsets")},
    ),
    "existing-secret-values.yaml": (RELEASE_NAMESPACE, {RELEASE_NAMESPACE, "ml-training"}, {JOB}),
    "ha-values.yaml": (RELEASE_NAMESPACE, {RELEASE_NAMESPACE}, {JOB}),
    "kueue-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {JOB, ("jobset.x-k8s.io", "jobsets")},
    ),
    "multikueue-values.yaml": (RELEASE_NAMESPACE, {RELEASE_NAMESPACE, "ml-training"}, {JOB}),
    "multi-namespace-values.yaml": (
        "launch-agent",
        {"launch-agent", "team-a", "team-b", "team-c"},
        {JOB},
    ),
    "wandb-all-options-values.yaml": ("agents", {"agents", "ml-training"}, {JOB}),
    "wandb-values.yaml": ("wandb", {"wandb", "default"}, {JOB}),
    "workload-jobset-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("jobset.x-k8s.io", "jobsets")},
    ),
    "workload-leaderworkerset-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("leaderworkerset.x-k8s.io", "leaderworkersets")},
    ),
    "workload-pytorchjob-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("kubeflow.org", "pytorchjobs")},
    ),
    "workload-rayjob-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("ray.io", "rayjobs")},
    ),
    "workload-trainjob-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("trainer.kubeflow.org", "trainjobs")},
    ),
    "workload-volcanojob-values.yaml": (
        RELEASE_NAMESPACE,
        {RELEASE_NAMESPACE, "ml-training"},
        {("batch.volcano.sh", "jobs")},
    ),
}


def test_every_ci_file_has_an_rbac_expectation() -> None:
    assert {p.name for p in CI_VALUES} == set(EXPECTED)


def kueue_mode(values: Path) -> bool:
    """Whether the CI file hands admission to Kueue (the Kueue rights and the one ClusterRole)."""
    data = yaml.safe_load(values.read_text()) or {}
    return bool((data.get("quota") or {}).get("mode") == "kueue")


def rule_grants(rules: Sequence[Manifest]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, for rules without resourceNames."""
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def wildcards(manifests: Sequence[Manifest]) -> list[str]:
    """Every `*` in any Role or ClusterRole rule (pure, tested below)."""
    found = []
    for role in find(manifests, "Role") + find(manifests, "ClusterRole"):
        for index, rule in enumerate(role.get("rules", [])):
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                if any("*" in str(item) for item in rule.get(field, [])):
                    found.append(
                        f"{role['kind']}/{role['metadata']['name']} rules[{index}].{field}"
                    )
    return found


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"apiGroups": ["*"], "resources": ["jobs"], "verbs": ["get"]}, 1),
        ({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]}, 1),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, 1),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, 0),
    ],
)
def test_wildcard_check(rule: Manifest, expected: int) -> None:
    role = {"kind": "Role", "metadata": {"name": "r"}, "rules": [rule]}
    assert len(wildcards([role])) == expected


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_no_rbac_wildcards(rendered: dict[str, list[Manifest]], values: Path) -> None:
    assert not wildcards(rendered[values.name])


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_roles_grant_only_what_the_agent_uses(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    manifests = rendered[values.name]
    agent_ns, targets, workloads = EXPECTED[values.name]
    kueue = kueue_mode(values)
    agent_roles = {
        r["metadata"]["namespace"]: r
        for r in find(manifests, "Role")
        if r["metadata"]["name"] == f"{RELEASE}-agent"
    }
    assert set(agent_roles) == targets

    expected = dict.fromkeys(workloads, WORKLOAD_VERBS)
    expected |= {("", "pods"): READ, ("", "events"): READ, ("", "pods/log"): {"get"}}
    if kueue:
        expected |= {("kueue.x-k8s.io", "localqueues"): READ}
        expected |= {("kueue.x-k8s.io", "workloads"): READ}
    for namespace, role in agent_roles.items():
        assert rule_grants(role["rules"]) == expected, namespace
        named = [r for r in role["rules"] if r.get("resourceNames")]
        assert len(named) == 1, "only the API-key Secret is granted by name"
        assert named[0]["resources"] == ["secrets"]
        assert named[0]["verbs"] == ["get"]
        assert all(name.startswith("wandb-") for name in named[0]["resourceNames"]) or (
            values.name == "existing-secret-values.yaml"
            and named[0]["resourceNames"] == ["wandb-launch-credentials"]
        )

    bindings = {
        b["metadata"]["namespace"]: b
        for b in find(manifests, "RoleBinding")
        if b["metadata"]["name"] == f"{RELEASE}-agent"
    }
    for namespace in targets:
        subject = bindings[namespace]["subjects"][0]
        assert subject["kind"] == "ServiceAccount"
        assert subject["namespace"] == agent_ns
        assert bindings[namespace]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": f"{RELEASE}-agent",
        }


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_cluster_scope_only_for_kueue_cluster_queues(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    manifests = rendered[values.name]
    cluster_roles = find(manifests, "ClusterRole")
    cluster_bindings = find(manifests, "ClusterRoleBinding")
    if not kueue_mode(values):
        assert cluster_roles == [] and cluster_bindings == []
        return
    assert len(cluster_roles) == 1 and len(cluster_bindings) == 1
    assert rule_grants(cluster_roles[0]["rules"]) == {("kueue.x-k8s.io", "clusterqueues"): READ}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_no_secret_access_beyond_the_api_key(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    for role in find(rendered[values.name], "Role") + find(rendered[values.name], "ClusterRole"):
        for rule in role["rules"]:
            if "secrets" in rule["resources"]:
                assert rule.get("resourceNames"), f"{role['metadata']['name']}: all Secrets"
                assert set(rule["verbs"]) == {"get"}


def test_kaniko_builds_are_confined_to_their_namespace(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered["multi-namespace-values.yaml"]
    namespace = next(n for n in find(manifests, "Namespace"))
    name = namespace["metadata"]["name"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    kaniko_sa = next(
        sa for sa in find(manifests, "ServiceAccount") if sa["metadata"]["namespace"] == name
    )
    assert kaniko_sa["automountServiceAccountToken"] is False
    role = next(r for r in find(manifests, "Role") if r["metadata"]["namespace"] == name)
    assert rule_grants(role["rules"]) == {
        ("batch", "jobs"): WORKLOAD_VERBS,
        ("", "pods"): READ,
        ("", "events"): READ,
        ("", "pods/log"): {"get"},
    }
    assert name not in EXPECTED["multi-namespace-values.yaml"][1], "no run workloads there"


def test_rbac_can_be_left_to_the_admin(helm: Helm) -> None:
    manifests = helm.template([ci_file("default-values.yaml")], {"rbac.create": False})
    assert find(manifests, "Role") == [] and find(manifests, "RoleBinding") == []


def test_extra_rules_are_added_and_wildcards_refused(helm: Helm) -> None:
    manifests = helm.template(
        [ci_file("default-values.yaml")],
        {
            "rbac.extraRules[0].apiGroups[0]": "",
            "rbac.extraRules[0].resources[0]": "services",
            "rbac.extraRules[0].verbs[0]": "get",
        },
    )
    role = next(r for r in find(manifests, "Role") if r["metadata"]["name"] == f"{RELEASE}-agent")
    assert rule_grants(role["rules"])[("", "services")] == {"get"}
    with pytest.raises(HelmError, match="extraRules"):
        helm.template(
            [ci_file("default-values.yaml")],
            {
                "rbac.extraRules[0].apiGroups[0]": "",
                "rbac.extraRules[0].resources[0]": "*",
                "rbac.extraRules[0].verbs[0]": "get",
            },
        )
