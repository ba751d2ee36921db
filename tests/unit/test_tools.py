"""The programs the agent runs: what a configuration needs, the start-up check, and the image.

The Dockerfile's final stage is parsed here and every tool of `launch_agent.model.tools.TOOLS`
must be installed by its apt-get line: adding a tool to the list without the image (or dropping
a package from the image) fails this test instead of the first run that needs it.
"""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launch_agent.model.config import AgentConfig, BuilderConfig, GitSourceConfig
from launch_agent.model.tools import GIT, SSH, TOOLS, needed_tools
from launch_agent.runtime.startup import StartupError
from launch_agent.runtime.tools import check_tools

ROOT = Path(__file__).resolve().parents[2]
KANIKO = AgentConfig(builder=BuilderConfig(type="kaniko"))
SSH_GIT = GitSourceConfig(ssh_command="ssh -F /etc/launch-agent/ssh/config/config")
# sshAuthSecrets without a builder (the chart sets it whenever the value is given).
SSH_ONLY = AgentConfig(builder=BuilderConfig(git=SSH_GIT))
KANIKO_SSH = AgentConfig(builder=BuilderConfig(type="kaniko", git=SSH_GIT))


def final_stage(dockerfile: str) -> list[str]:
    """The instructions after the last FROM, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    lines = [line.strip() for line in joined.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")]
    last = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    return lines[last:]


def apt_packages(stage: list[str]) -> set[str]:
    """Package names (versions stripped) every `apt-get install` of the stage installs."""
    packages: set[str] = set()
    for line in stage:
        if not line.upper().startswith("RUN "):
            continue
        for command in re.split(r"&&|;", line[4:]):
            words = shlex.split(command)
            if words[:2] == ["apt-get", "install"]:
                packages |= {w.split("=")[0] for w in words[2:] if not w.startswith("-")}
    return packages


def test_the_image_installs_every_tool_the_agent_can_need() -> None:
    stage = final_stage((ROOT / "Dockerfile").read_text())
    installed = apt_packages(stage)
    assert {tool.package for tool in TOOLS} <= installed, installed
    # Still non-root and minimal: no recommends, no apt lists left in the layer.
    run = next(line for line in stage if "apt-get install" in line)
    assert "--no-install-recommends" in run and "rm -rf /var/lib/apt/lists/*" in run
    assert stage.index(run) < stage.index("USER 10001:10001")


def test_parsing_sees_a_missing_package() -> None:
    # The reader itself: a final stage without openssh-client is seen as lacking ssh.
    text = "FROM a AS build\nRUN apt-get install -y openssh-client\nFROM b\nRUN apt-get update \\\n && apt-get install -y --no-install-recommends git=1:2.39.*\n"
    assert apt_packages(final_stage(text)) == {"git"}


def test_no_tool_without_builds_or_ssh() -> None:
    assert needed_tools(AgentConfig(), {}) == []
    assert needed_tools(AgentConfig(builder=BuilderConfig(type="noop")), {}) == []


def test_builds_need_git_and_ssh_auth_needs_ssh() -> None:
    assert [n.tool for n in needed_tools(KANIKO, {})] == [GIT]
    assert [n.tool for n in needed_tools(SSH_ONLY, {})] == [GIT, SSH]
    assert [n.tool for n in needed_tools(KANIKO_SSH, {})] == [GIT, SSH]


def executable(folder: Path, name: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_start_up_refuses_without_a_needed_tool_and_names_it(tmp_path: Path) -> None:
    with pytest.raises(StartupError) as caught:
        check_tools(KANIKO_SSH, {"PATH": str(tmp_path)})
    message = str(caught.value)
    assert "`git` is not installed" in message and "builder.type kaniko" in message
    assert "`ssh` is not installed" in message and "openssh-client" in message


def test_start_up_passes_when_the_tools_are_on_path(tmp_path: Path) -> None:
    executable(tmp_path, "git")
    with pytest.raises(StartupError) as caught:
        check_tools(KANIKO_SSH, {"PATH": str(tmp_path)})
    assert "`git`" not in str(caught.value) and "`ssh`" in str(caught.value)
    executable(tmp_path, "ssh")
    check_tools(KANIKO_SSH, {"PATH": str(tmp_path)})


def test_launch_agent_run_exits_with_the_missing_tool(tmp_path: Path) -> None:
    config = tmp_path / "launch-config.yaml"
    config.write_text(
        "queues: [q]\nbuilder:\n  type: kaniko\n  destination: registry.example.com/launch\n"
        "  build-context-store: s3://bucket/contexts\n"
    )
    bin_dir = tmp_path / "bin"  # a PATH with nothing on it: the interpreter is named in full
    bin_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "launch_agent", "run", "--config", str(config)],
        env={
            "PATH": str(bin_dir),
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "`git` is not installed (not on PATH): builder.type kaniko" in result.stderr


def test_the_image_installs_the_schemas_queue_specs_are_checked_against() -> None:
    # render/kind_schema.py checks a core kind's template against kubernetes-validate's
    # schemas at load, and only where that package is installed: the image must have it.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir '.[validate]'" in dockerfile
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'validate = ["kubernetes-validate' in pyproject
