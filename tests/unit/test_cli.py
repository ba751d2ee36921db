"""The `launch-agent` command: --help, --version and `config show` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launch_agent import __version__
from launch_agent.cli import main

KEY = "0123456789abcdef0123456789abcdef01234567"


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launch_agent", *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"launch-agent {__version__}"


def test_help_explains_precedence_and_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "W&B Launch" in out
    assert "config" in out
    assert "precedence" in out


def test_config_show_prints_values_sources_and_redacts_the_key(tmp_path: Path) -> None:
    (tmp_path / "launch-config.yaml").write_text("queues: [q1]\nentity: team\nmax_jobs: 4\n")
    result = _cli(
        "config",
        "show",
        "--config",
        "launch-config.yaml",
        "--max-jobs",
        "7",
        env={"WANDB_API_KEY": KEY, "WANDB_ENTITY": "env-team"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert lines["queues"].endswith("# file launch-config.yaml:1")
    assert '"env-team"' in lines["entity"] and lines["entity"].endswith("# env WANDB_ENTITY")
    assert " 7 " in lines["max_jobs"] and lines["max_jobs"].endswith("# flag --max-jobs")
    assert '"********"' in lines["api_key"] and lines["api_key"].endswith("# env WANDB_API_KEY")
    assert lines["poll.idle_interval_seconds"].endswith("# default")
    assert KEY not in result.stdout + result.stderr


def test_config_show_json_is_the_resolved_tree(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q1]\nbuilder: {type: noop}\n")
    result = _cli(
        "config", "show", "-c", "c.yaml", "-o", "json", env={"WANDB_API_KEY": KEY}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    tree = json.loads(result.stdout)
    assert tree["queues"] == ["q1"]
    assert tree["builder"]["type"] == "noop"
    assert tree["api_key"] == "********"


def test_config_show_reports_every_problem_with_exit_status_2(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q1]\nmax_job: 2\nverbosity: loud\n")
    result = _cli("config", "show", "-c", "c.yaml", env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: c.yaml:2: max_job: unknown key 'max_job'; did you mean 'max_jobs'?",
        "error: c.yaml:3: verbosity: expected an integer, got 'loud' (str)",
    ]
    assert result.stdout == ""


def test_config_show_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    result = _cli("config", "show", "-c", "nope.yaml", env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: nope.yaml: (file): cannot read: No such file")


def test_default_wandb_config_path_is_read_when_present(tmp_path: Path) -> None:
    wandb_dir = tmp_path / ".config" / "wandb"
    wandb_dir.mkdir(parents=True)
    (wandb_dir / "launch-config.yaml").write_text("queues: [from-home]\n")
    result = _cli("config", "show", "-o", "json", env={}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queues"] == ["from-home"]
