"""The agent's own registry credentials (existence checks before a build) in the chart."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import Helm, find
from tests.chart.test_chart_values import DEFAULT

CASES = [
    # (values, expected secret name or None, expected `optional`)
    ({}, None, None),
    ({"kanikoDockerConfigSecret": "kaniko-push"}, "kaniko-push", True),
    ({"registryCredentialsSecret": "agent-pull"}, "agent-pull", False),
    (
        {"kanikoDockerConfigSecret": "kaniko-push", "registryCredentialsSecret": "agent-pull"},
        "agent-pull",
        False,
    ),
]


def _agent_pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = find(manifests, "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize(("values", "secret", "optional"), CASES)
def test_registry_credentials_mounted_as_docker_config(
    helm: Helm, values: dict[str, str], secret: str | None, optional: bool | None
) -> None:
    pod = _agent_pod(helm.template([DEFAULT], values))
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = [c for c in pod["containers"] if c["name"] == "launch-agent"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    if secret is None:
        assert "registry-credentials" not in volumes
        assert "DOCKER_CONFIG" not in env
        return
    source = volumes["registry-credentials"]["secret"]
    assert source["secretName"] == secret
    assert source["optional"] is optional
    assert source["items"] == [{"key": ".dockerconfigjson", "path": "config.json"}]
    assert mounts["registry-credentials"]["mountPath"] == env["DOCKER_CONFIG"]
    assert mounts["registry-credentials"]["readOnly"] is True
