"""Fixtures for the chart tests: the pinned helm binary and each CI values file rendered once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.chart.helm import CI_VALUES, Helm, Manifest, install_helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binary=install_helm(), home=tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def rendered_text(helm: Helm) -> dict[str, str]:
    """`helm template` output of every ci/*.yaml, by file name, rendered once per session."""
    return {path.name: helm.template_text([path]) for path in CI_VALUES}


@pytest.fixture(scope="session")
def rendered(rendered_text: dict[str, str]) -> dict[str, list[Manifest]]:
    """The same renders parsed into manifests."""
    return {
        name: [doc for doc in yaml.safe_load_all(text) if doc]
        for name, text in rendered_text.items()
    }


def ci_file(name: str) -> Path:
    path = next((p for p in CI_VALUES if p.name == name), None)
    assert path is not None, f"no charts/launch-agent/ci/{name}"
    return path
