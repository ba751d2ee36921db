"""W&B's own values files, unchanged, against this chart.

The files are the real ones (tests/fixtures/SOURCES.md): `charts/launch-agent/values.yaml` of
every chart version in wandb/helm-charts' history, every version of its `ci/basic-values.yaml`,
and the values of W&B's Kubernetes tutorial. Each is rendered with only its placeholders filled
(`<queue name>`, an empty API key, ...), and must validate strictly against every supported
Kubernetes version, load in the agent's own configuration resolver, and mean what it meant in
W&B's chart: annotations without their empty examples, W&B's agent image replaced by this
chart's, placement and pod metadata copied, the start timeout passed through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import (
    CHART,
    KUBERNETES_VERSIONS,
    RELEASE,
    ROOT,
    Helm,
    Manifest,
    agent_env,
    find,
    one,
)
from tests.chart.test_chart_render import validate_manifest
from tests.chart.test_chart_security import restricted_violations
from tests.chart.test_chart_values import load_agent_config

FIXTURES = ROOT / "tests" / "fixtures"
WANDB_FILES = [
    *sorted((FIXTURES / "wandb-helm-charts" / "values").glob("*.yaml")),
    *sorted((FIXTURES / "wandb-helm-charts" / "ci").glob("*.yaml")),
    FIXTURES / "wandb-docs" / "setup-launch-kubernetes-values.yaml",
]
API_KEY = "0123456789abcdef0123456789abcdef01234567"
# What a W&B user types over each placeholder; nothing else in the files is touched.
PLACEHOLDERS = {
    "<YOUR QUEUE NAME>": "cpu",
    "<queue name>": "cpu",
    "<n concurrent jobs>": "4",
    "<aws-region>": "us-east-1",
    "<my-registry-uri>": "123456789012.dkr.ecr.us-east-1.amazonaws.com/launch",
    "<s3-bucket-uri>": "s3://ml-team-builds/contexts",
    "<an-api-key>": API_KEY,
}
CHART_IMAGE = "ghcr.io/launch-agent/launch-agent:{}".format(
    yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
)


def file_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def filled(path: Path, into: Path) -> list[Path]:
    """The file with its placeholders filled, plus an API key when the file has none."""
    text = path.read_text()
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    copy = into / f"{path.parent.name}-{path.name}"
    copy.write_text(text)
    values = yaml.safe_load(text) or {}
    files = [copy]
    if not ((values.get("agent") or {}).get("apiKey") or values.get("agent.apiKey")):
        key = into / "api-key.yaml"
        key.write_text(yaml.safe_dump({"agent": {"apiKey": API_KEY}}))
        files.append(key)
    return files


class Rendered:
    def __init__(self, helm: Helm, path: Path, into: Path) -> None:
        self.values: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
        files = filled(path, into)
        self.manifests: list[Manifest] = helm.template(files)
        args = ["install", RELEASE, str(CHART), "--dry-run=client", "--namespace", "agents"]
        for file in files:
            args += ["--values", str(file)]
        result = helm.run(*args)
        assert result.returncode == 0, result.stderr
        self.notes = result.stdout.split("NOTES:", 1)[1]

    @property
    def pod(self) -> dict[str, Any]:
        template: dict[str, Any] = one(self.manifests, "Deployment")["spec"]["template"]
        return template

    @property
    def agent(self) -> dict[str, Any]:
        return next(c for c in self.pod["spec"]["containers"] if c["name"] == "launch-agent")


@pytest.fixture(scope="module")
def rendered(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    out = {}
    for path in WANDB_FILES:
        into = tmp_path_factory.mktemp("wandb-values")
        out[file_id(path)] = Rendered(helm, path, into)
    return out


def test_every_wandb_source_is_vendored() -> None:
    # 30 chart versions of values.yaml (0.1.0 to 0.13.11), 5 versions of ci/basic-values.yaml,
    # the tutorial: a lost file would shrink the coverage without failing anything else.
    assert len(WANDB_FILES) == 36
    sources = (FIXTURES / "SOURCES.md").read_text()
    for path in WANDB_FILES:
        assert f"`{path.relative_to(FIXTURES)}`" in sources, path


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_renders_and_validates_strictly(rendered: dict[str, Rendered], path: Path) -> None:
    manifests = rendered[file_id(path)].manifests
    problems = [
        problem
        for version in KUBERNETES_VERSIONS
        for manifest in manifests
        if (problem := validate_manifest(manifest, version))
    ]
    assert not problems, "\n".join(problems)
    for name, spec in (
        (f"{m['kind']}/{m['metadata']['name']}", m["spec"]["template"]["spec"])
        for m in find(manifests, "Deployment")
    ):
        assert restricted_violations(spec) == [], name


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_the_agent_loads_what_the_chart_renders(rendered: dict[str, Rendered], path: Path) -> None:
    render = rendered[file_id(path)]
    config = load_agent_config(render.manifests).config
    assert config.api_key is not None and config.api_key.get_secret_value() == API_KEY
    timeout = (render.values.get("agent") or {}).get("startTimeout", 1800)
    assert config.tracking.start_timeout_seconds == float(timeout)
    assert agent_env(render.manifests)["WANDB_LAUNCH_START_TIMEOUT"] == str(timeout)


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_wandb_agent_image_is_replaced(rendered: dict[str, Rendered], path: Path) -> None:
    render = rendered[file_id(path)]
    wandb_image = (render.values.get("agent") or {}).get("image")
    assert render.agent["image"] == CHART_IMAGE
    assert render.agent["args"] == ["run"]
    if wandb_image:
        assert wandb_image.startswith("wandb/launch-agent")
        assert f"agent.image names W&B's agent image ({wandb_image})" in render.notes
        assert f"the chart's image {CHART_IMAGE} is used instead" in render.notes


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_annotations_keep_their_values_and_drop_the_empty_examples(
    rendered: dict[str, Rendered], path: Path
) -> None:
    render = rendered[file_id(path)]
    given = (render.values.get("serviceAccount") or {}).get("annotations") or {}
    account = one(render.manifests, "ServiceAccount")["metadata"].get("annotations") or {}
    assert account == {k: v for k, v in given.items() if v is not None}
    assert None not in account.values() and "" not in account.values()
    pod = render.pod["metadata"]["annotations"]
    for key, value in ((render.values.get("agent") or {}).get("podAnnotations") or {}).items():
        assert pod[key] == str(value)


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_placement_and_labels_are_copied(rendered: dict[str, Rendered], path: Path) -> None:
    render = rendered[file_id(path)]
    agent = render.values.get("agent") or {}
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert render.pod["spec"].get(key) == (agent.get(key) or None), key
    for key, value in (agent.get("labels") or {}).items():
        assert render.pod["metadata"]["labels"][key] == str(value)


@pytest.mark.parametrize("path", WANDB_FILES, ids=file_id)
def test_empty_ca_bundle_mounts_nothing(rendered: dict[str, Rendered], path: Path) -> None:
    # W&B's default `customCABundle: {configMap: {name: null, key: null}}` means "none".
    render = rendered[file_id(path)]
    assert "initContainers" not in render.pod["spec"]
    assert "SSL_CERT_FILE" not in agent_env(render.manifests)


LATEST = FIXTURES / "wandb-helm-charts" / "values" / "values-0.13.11.yaml"
BUNDLE = "/etc/launch-agent/ca-bundle/ca-certificates.crt"


def render_latest_with(helm: Helm, tmp_path: Path, overrides: dict[str, Any]) -> list[Manifest]:
    extra = tmp_path / "overrides.yaml"
    extra.write_text(yaml.safe_dump(overrides))
    return helm.template([*filled(LATEST, tmp_path), extra])


def test_ca_bundle_is_trusted_by_every_client(helm: Helm, tmp_path: Path) -> None:
    manifests = render_latest_with(
        helm, tmp_path, {"customCABundle": {"configMap": {"name": "corp-ca", "key": "ca.pem"}}}
    )
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    env = agent_env(manifests)
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "GIT_SSL_CAINFO"):
        assert env[name] == BUNDLE, name
    # The bundle is the system CAs followed by the custom ones, built before the agent starts.
    (init,) = spec["initContainers"]
    assert init["image"] == CHART_IMAGE
    assert init["command"][-1] == (
        f"cat /etc/ssl/certs/ca-certificates.crt /etc/launch-agent/ca/custom-ca.crt > {BUNDLE}"
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["custom-ca"]["configMap"] == {
        "name": "corp-ca",
        "items": [{"key": "ca.pem", "path": "custom-ca.crt"}],
    }
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert mounts == {
        "custom-ca": "/etc/launch-agent/ca",
        "ca-bundle": "/etc/launch-agent/ca-bundle",
    }
    agent = next(c for c in spec["containers"] if c["name"] == "launch-agent")
    assert {"name": "ca-bundle", "mountPath": "/etc/launch-agent/ca-bundle", "readOnly": True} in (
        agent["volumeMounts"]
    )
    assert restricted_violations(spec) == []
    problems = [p for m in manifests if (p := validate_manifest(m, KUBERNETES_VERSIONS[-1]))]
    assert not problems, "\n".join(problems)


def test_kaniko_pvc_ssh_and_external_secret(helm: Helm, tmp_path: Path) -> None:
    manifests = render_latest_with(
        helm,
        tmp_path,
        {
            "kanikoPvcName": "kaniko-contexts",
            "sshAuthSecrets": [{"name": "deploy-key", "host": "github.com"}],
            "agent": {"useExternalWandbSecret": True, "apiKey": ""},
            "additionalEnvVars": [{"name": "FEATURE", "value": "on"}],
            "azureStorageAccessKey": "azure-key",
        },
    )
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    env = agent_env(manifests)
    assert env["WANDB_LAUNCH_KANIKO_PVC_NAME"] == "kaniko-contexts"
    assert env["LAUNCH_AGENT_GIT_SSH_COMMAND"] == "ssh -F /etc/launch-agent/ssh/config/config"
    assert env["FEATURE"] == "on"
    assert env["WANDB_API_KEY"]["secretKeyRef"] == {
        "name": f"wandb-api-key-{RELEASE}",
        "key": "password",
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kaniko"]["persistentVolumeClaim"] == {"claimName": "kaniko-contexts"}
    assert volumes["ssh-key-0"]["secret"]["secretName"] == "deploy-key"
    # The external Secret is the admin's: the chart renders no API-key Secret.
    names = {s["metadata"]["name"] for s in find(manifests, "Secret")}
    assert f"wandb-api-key-{RELEASE}" not in names
    problems = [p for m in manifests if (p := validate_manifest(m, KUBERNETES_VERSIONS[-1]))]
    assert not problems, "\n".join(problems)


def test_azure_key_reaches_the_agent_and_the_kaniko_namespace(
    rendered: dict[str, Rendered], helm: Helm
) -> None:
    # Every W&B file sets `azureStorageAccessKey: ""`: no Secret, no variable.
    assert "AZURE_STORAGE_ACCESS_KEY" not in agent_env(rendered[file_id(LATEST)].manifests)
    manifests = helm.template(
        (),
        {"agent.apiKey": API_KEY, "azureStorageAccessKey": "k", "kaniko.enabled": True},
    )
    env = agent_env(manifests)
    ref = env["AZURE_STORAGE_ACCESS_KEY"]["secretKeyRef"]
    assert ref == {"name": "rel-azure-storage-access-key", "key": "password"}
    assert env["LAUNCH_AGENT_AZURE_STORAGE_KEY_SECRET"] == ref["name"]
    where = {
        s["metadata"]["namespace"]
        for s in find(manifests, "Secret")
        if s["metadata"]["name"] == ref["name"]
    }
    # The agent's namespace (it uploads) and the Kaniko namespace (build pods read it).
    assert where == {"agents", env["LAUNCH_AGENT_KANIKO_NAMESPACE"]}
    assert len(where) == 2


def test_dotted_api_key_of_wandbs_first_ci_file_is_read(rendered: dict[str, Rendered]) -> None:
    render = rendered["ci/basic-values-0.1.0-813953b.yaml"]
    assert "agent.apiKey" in render.values and "agent" not in render.values
    assert "the top-level key `agent.apiKey` is read as agent.apiKey" in render.notes


def test_own_image_is_kept(helm: Helm, tmp_path: Path) -> None:
    # Only W&B's agent image is replaced: an admin's mirror of this project's image stays.
    for image, expected in [
        ("registry.example.com/mirror/launch-agent:0.1.0", None),
        ("docker.io/wandb/launch-agent:0.17.3", CHART_IMAGE),
        ("wandb/launch-agent-dev:latest", CHART_IMAGE),
        ("wandb/launch-agent@sha256:" + "0" * 64, CHART_IMAGE),
    ]:
        manifests = render_latest_with(helm, tmp_path, {"agent": {"image": image}})
        container = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == (expected or image), image


def test_network_policy_lets_git_reach_ssh_hosts(helm: Helm, tmp_path: Path) -> None:
    # sshAuthSecrets means git over ssh: with the NetworkPolicy on, port 22 must be open too.
    def egress_ports(overrides: dict[str, Any]) -> set[int]:
        manifests = render_latest_with(
            helm, tmp_path, {"networkPolicy": {"enabled": True}, **overrides}
        )
        rules = one(manifests, "NetworkPolicy")["spec"]["egress"]
        return {p["port"] for rule in rules for p in rule["ports"] if p["protocol"] == "TCP"}

    assert 22 not in egress_ports({})
    assert 22 in egress_ports({"sshAuthSecrets": [{"name": "deploy-key", "host": "github.com"}]})
