"""Values: the schema, W&B compatibility, the API-key checksum, and the agent loading what the
chart renders.

The launch config rendered into the ConfigMap, together with the environment the Deployment
sets, is loaded with the agent's own resolver (`launch_agent.model.config_resolve.resolve`), so
a chart value the agent would refuse fails here rather than in a crash-looping pod.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from launch_agent import __version__
from launch_agent.model.config_resolve import ConfigError, resolve
from tests.chart.conftest import ci_file
from tests.chart.helm import (
    CHART,
    CI_VALUES,
    RELEASE,
    ROOT,
    Helm,
    HelmError,
    Manifest,
    agent_env,
    find,
    one,
)
from tests.chart.test_chart_rbac import EXPECTED

DEFAULT = ci_file("default-values.yaml")


def load_agent_config(manifests: list[Manifest]) -> Any:
    """Resolve the agent's configuration exactly as the container would see it."""
    deployment = one(manifests, "Deployment")
    env = agent_env(manifests)
    config_maps = {m["metadata"]["name"]: m for m in find(manifests, "ConfigMap")}
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    config_map = next(v["configMap"]["name"] for v in volumes if v["name"] == "launch-config")
    path = env["LAUNCH_AGENT_CONFIG"]
    text = config_maps[config_map]["data"][Path(path).name]
    plain = {name: value for name, value in env.items() if isinstance(value, str)}
    ref = env["WANDB_API_KEY"]["secretKeyRef"]
    secrets = [s for s in find(manifests, "Secret") if s["metadata"]["name"] == ref["name"]]
    if secrets:
        plain["WANDB_API_KEY"] = secrets[0]["stringData"][ref["key"]]
    return resolve(file_text=text, filename=path, env=plain)


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_agent_loads_the_rendered_configuration(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    manifests = rendered[values.name]
    resolved = load_agent_config(manifests)
    config = resolved.config
    agent_ns, targets, _ = EXPECTED[values.name]
    assert config.agent_name == RELEASE
    assert set(config.namespaces) == targets and config.namespaces[0] == agent_ns
    assert config.health.port == 8080
    assert config.queue_specs_dir == "/etc/launch-agent/queue-specs"
    assert config.log_format == "json"
    assert resolved.sources["namespaces"].kind == "env"
    if values.name != "existing-secret-values.yaml":
        assert config.api_key is not None
    # Run pods must reference the Secret the chart made (or the admin's existing one).
    ref = agent_env(manifests)["WANDB_API_KEY"]["secretKeyRef"]
    assert (config.api_key_secret_name, config.api_key_secret_key) == (ref["name"], ref["key"])


def test_quota_values_reach_the_agent(rendered: dict[str, list[Manifest]]) -> None:
    config = load_agent_config(rendered["kueue-values.yaml"]).config
    assert config.quota.mode == "kueue"
    assert config.quota.kueue.default_local_queue == "team-a"
    assert config.all_queues == ["kueue-jobs"]


def test_wandb_launch_config_is_kept_verbatim(rendered: dict[str, list[Manifest]]) -> None:
    # Line numbers in the agent's errors must point at the admin's own text.
    text = next(
        m["data"]["launch-config.yaml"]
        for m in find(rendered["wandb-values.yaml"], "ConfigMap")
        if "launch-config.yaml" in m.get("data", {})
    )
    assert text.startswith("queues:\n  - <YOUR QUEUE NAME>\nmax_jobs: 10\n")


def test_a_launch_config_typo_is_reported_by_the_agent_with_its_line(helm: Helm) -> None:
    manifests = helm.template([DEFAULT], {"launchConfig": "queues: [a]\nmax_job: 3\n"})
    with pytest.raises(ConfigError) as caught:
        load_agent_config(manifests)
    assert "launch-config.yaml:2: max_job: unknown key 'max_job'; did you mean 'max_jobs'?" in (
        str(caught.value)
    )


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        ({"agent.imagePulPolicy": "Always"}, "additional properties 'imagePulPolicy' not allowed"),
        ({"namepsace": "x"}, "additional properties 'namepsace' not allowed"),
        ({"workloads.pytorchJob": True}, "additional properties 'pytorchJob' not allowed"),
        ({"healthPort": "http"}, "/healthPort': got string, want integer"),
        ({"quota.mode": "kueu"}, "/quota/mode"),
        ({"agent.imagePullPolicy": "Sometimes"}, "/agent/imagePullPolicy"),
        ({"additionalTargetNamespaces[0]": "Team_A"}, "/additionalTargetNamespaces/0"),
        ({"agent.apiKey": ""}, "/agent/apiKey"),
        ({"baseUrl": "wandb.example.com"}, "/baseUrl"),
    ],
)
def test_schema_rejects_typos_and_wrong_types(
    helm: Helm, set_values: dict[str, object], message: str
) -> None:
    with pytest.raises(HelmError) as caught:
        helm.template([DEFAULT], set_values)
    assert "values don't meet the specifications of the schema" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        (
            {"launchConfig": "queues: [a]\napi_key: abc\n"},
            "launchConfig: api_key may not be stored in the launch config",
        ),
        ({"launchConfig": "queues: [a\n"}, "launchConfig: not a YAML mapping"),
        ({"launchConfig": "- a\n- b\n"}, "launchConfig: not a YAML mapping"),
        (
            {"quota.mode": "kueue", "launchConfig": "quota:\n  mode: agent\n"},
            "launchConfig: has its own quota block",
        ),
        (
            {"queueSpecs.a\\.yaml": "spec:\n  template:\n    kubernetes:\n      kind: RayJob\n"},
            "queueSpecs.a.yaml: workload kind RayJob needs workloads.rayjob: true",
        ),
        (
            {"queueSpecs.a\\.yaml": "spec:\n  namespace: elsewhere\n"},
            'queueSpecs.a.yaml: spec.namespace "elsewhere" is not a target namespace',
        ),
        ({"diagnostics.enabled": True}, "diagnostics.image is required"),
        (
            {
                "agent.apiKey": "",
                "agent.useExternalWandbSecret": True,
                "serviceAccount.create": False,
            },
            "serviceAccount.name is required",
        ),
    ],
)
def test_render_time_checks_name_the_value(
    helm: Helm, set_values: dict[str, object], message: str
) -> None:
    with pytest.raises(HelmError) as caught:
        helm.template([DEFAULT], set_values)
    assert message in str(caught.value)


def pod_annotations(manifests: list[Manifest]) -> dict[str, str]:
    return dict(one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"])


def test_api_key_checksum_rolls_the_pod_when_the_key_changes(helm: Helm) -> None:
    first = pod_annotations(helm.template([DEFAULT], {"agent.apiKey": "key-one"}))
    again = pod_annotations(helm.template([DEFAULT], {"agent.apiKey": "key-one"}))
    second = pod_annotations(helm.template([DEFAULT], {"agent.apiKey": "key-two"}))
    assert re.fullmatch(r"[0-9a-f]{64}", first["checksum/api-key"])
    assert first["checksum/api-key"] == again["checksum/api-key"]
    assert first["checksum/api-key"] != second["checksum/api-key"]
    assert first["checksum/config"] == second["checksum/config"]
    assert "key-one" not in str(first)


def test_config_checksum_changes_with_the_launch_config(helm: Helm) -> None:
    before = pod_annotations(helm.template([DEFAULT]))
    after = pod_annotations(helm.template([DEFAULT], {"launchConfig": "queues: [b]\n"}))
    assert before["checksum/config"] != after["checksum/config"]
    assert before["checksum/api-key"] == after["checksum/api-key"]


def test_existing_secret_renders_no_secret(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["existing-secret-values.yaml"]
    assert find(manifests, "Secret") == []
    ref = agent_env(manifests)["WANDB_API_KEY"]["secretKeyRef"]
    assert ref == {"name": "wandb-launch-credentials", "key": "api-key"}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_object_lands_in_a_namespace_the_release_owns(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    # W&B's chart sent two Secrets to a hard-coded `wandb` and its PDB to another namespace.
    manifests = rendered[values.name]
    agent_ns, targets, _ = EXPECTED[values.name]
    kaniko = {m["metadata"]["name"] for m in find(manifests, "Namespace")}
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for manifest in manifests:
        namespace = manifest["metadata"].get("namespace")
        if manifest["kind"] in cluster_scoped:
            assert namespace is None
        elif manifest["kind"] in {"Role", "RoleBinding", "Secret", "ServiceAccount"}:
            assert namespace in targets | kaniko, manifest["metadata"]["name"]
        else:
            assert namespace == agent_ns, f"{manifest['kind']}/{manifest['metadata']['name']}"


def test_api_key_secret_in_every_target_namespace(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["multi-namespace-values.yaml"]
    secrets = [
        s for s in find(manifests, "Secret") if s["metadata"]["name"] == f"wandb-api-key-{RELEASE}"
    ]
    assert {s["metadata"]["namespace"] for s in secrets} == EXPECTED["multi-namespace-values.yaml"][
        1
    ]


def test_wandb_values_keep_their_meaning(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["wandb-all-options-values.yaml"]
    env = agent_env(manifests)
    assert env["FEATURE_ENABLED"] == "true" and env["PORT"] == "8080"
    assert env["WANDB_LAUNCH_START_TIMEOUT"] == "3600"
    assert env["WANDB_BASE_URL"] == "https://wandb.example.com"
    assert env["HF_TOKEN"]["secretKeyRef"] == {
        "name": f"{RELEASE}-secret-env-vars",
        "key": "HF_TOKEN",
    }
    assert env["REQUESTS_CA_BUNDLE"] == "/etc/launch-agent/ca-bundle/ca-certificates.crt"
    assert env["WANDB_LAUNCH_KANIKO_PVC_NAME"] == "kaniko-contexts"
    assert env["WANDB_LAUNCH_KANIKO_AUTH_SECRET"] == "registry-push"
    template = one(manifests, "Deployment")["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "ml-platform"
    assert template["spec"]["tolerations"][0]["key"] == "dedicated"
    account = one(manifests, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/launch-agent"
    }
    names = {s["metadata"]["name"] for s in find(manifests, "Secret")}
    assert {f"{RELEASE}-git-creds", f"{RELEASE}-azure-storage-access-key"} <= names
    # W&B's own defaults: its image and minAvailable 1 are honoured as given.
    wandb = rendered["wandb-values.yaml"]
    # W&B's agent image would crash-loop on this chart's arguments: it is replaced.
    assert one(wandb, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/launch-agent/launch-agent:{__version__}"
    )
    assert one(wandb, "PodDisruptionBudget")["spec"] == {
        "minAvailable": 1,
        "selector": one(wandb, "PodDisruptionBudget")["spec"]["selector"],
    }


def test_pdb_never_blocks_drains_by_default(rendered: dict[str, list[Manifest]]) -> None:
    spec = one(rendered["default-values.yaml"], "PodDisruptionBudget")["spec"]
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec


def test_notes_summarise_the_install(helm: Helm) -> None:
    result = helm.run(
        "install",
        RELEASE,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        "agents",
        "--values",
        str(ci_file("wandb-values.yaml")),
    )
    assert result.returncode == 0, result.stderr
    assert "Queues:             <YOUR QUEUE NAME>" in result.stdout
    assert "Target namespaces:  wandb, default" in result.stdout
    assert "NOTE: agent.image names W&B's agent image (wandb/launch-agent:0.17.3)" in result.stdout
    assert "minAvailable 1 blocks node drains" in result.stdout


def test_dockerfile_matches_the_chart() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    values = (CHART / "values.yaml").read_text()
    assert "USER 10001:10001" in dockerfile
    assert "EXPOSE 8080" in dockerfile and "healthPort: 8080" in values
    assert 'ENTRYPOINT ["launch-agent"]' in dockerfile and 'CMD ["run"]' in dockerfile
    assert "LAUNCH_AGENT_QUEUE_SPECS_DIR=/etc/launch-agent/queue-specs" in dockerfile
    assert "queueSpecsMountPath: /etc/launch-agent/queue-specs" in values
    assert "HOME=/home/launch-agent" in dockerfile
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert "runAsUser: 10001" in helpers and "runAsGroup: 10001" in helpers


def test_install_doc_shows_the_real_notes(helm: Helm) -> None:
    # docs/install.md quotes the notes for the realistic values file; keep them in step.
    result = helm.run(
        "install",
        "launch-agent",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        "launch-agent",
        "--values",
        str(ci_file("multi-namespace-values.yaml")),
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:\n", 1)[1].strip().splitlines()
    doc = (ROOT / "docs" / "install.md").read_text()
    missing = [line for line in notes if line.strip() and line not in doc]
    assert not missing, f"docs/install.md is out of date: {missing}"


@pytest.mark.parametrize("entry", ["ghcr-pull", {"name": "ghcr-pull"}])
def test_image_pull_secrets_as_names_or_references(helm: Helm, entry: object) -> None:
    key = "imagePullSecrets[0]" if isinstance(entry, str) else "imagePullSecrets[0].name"
    manifests = helm.template([DEFAULT], {key: "ghcr-pull"})
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}]


def test_agent_quota_tree_reaches_the_agent(helm: Helm) -> None:
    manifests = helm.template([DEFAULT], {"quota.mode": "agent", "quota.tree.name": "root"})
    config = load_agent_config(manifests).config
    assert config.quota.mode == "agent"
    assert config.quota.tree == {"name": "root"}
    assert find(manifests, "ClusterRole") == [], "only Kueue admission reads cluster scope"


def test_rate_limit_keys_flow_through_the_launch_config(helm: Helm) -> None:
    text = (
        "queues: [a]\nkubernetes:\n  qps: 50\n  burst: 100\n"
        "dispatch:\n  max_runs_per_second_per_project: 2\n"
    )
    config = load_agent_config(helm.template([DEFAULT], {"launchConfig": text})).config
    assert (config.kubernetes.qps, config.kubernetes.burst) == (50.0, 100)
    assert config.dispatch.max_runs_per_second_per_project == 2.0
