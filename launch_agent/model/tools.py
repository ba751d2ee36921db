"""The programs outside Python that the agent's configuration makes it run.

The container image must ship each of them (a test reads the Dockerfile's final stage against
`TOOLS`, so the two cannot drift), and the agent refuses to start without one it needs
(`launch_agent.runtime.tools`): a missing `git` otherwise surfaces only when the first
git-source run fails its build, long after the rollout looked healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launch_agent.model.config import AgentConfig


@dataclass(frozen=True, slots=True)
class Tool:
    name: str  # the executable looked up on PATH
    package: str  # the Debian package of the image's final stage that provides it


@dataclass(frozen=True, slots=True)
class Need:
    tool: Tool
    why: str  # the configuration that needs it, in the admin's words


GIT = Tool("git", "git")
SSH = Tool("ssh", "openssh-client")
# Every tool any configuration can need: the image installs all of them.
TOOLS = (GIT, SSH)

# Builder types whose builds fetch a run's git source in the agent (build_context.fetch_git).
BUILDING = frozenset({"kaniko", "docker"})


def needed_tools(config: AgentConfig, env: Mapping[str, str]) -> list[Need]:
    """The tools this configuration runs, each with the reason, in `TOOLS` order.

    `env` is the agent's environment; today only the builder's settings decide (git never
    sees the agent's environment: build_context.py), so it is kept for callers and tests.
    """
    del env
    builder = config.builder
    kind = builder.type if builder is not None else None
    needs = []
    if kind in BUILDING:
        needs.append(Need(GIT, f"builder.type {kind} builds git-source runs with git"))
    ssh_command = (builder.git.ssh_command or "").split() if builder is not None else []
    if ssh_command[:1] == ["ssh"]:
        # The chart sets builder.git.ssh_command for sshAuthSecrets
        # (LAUNCH_AGENT_GIT_SSH_COMMAND); git then runs ssh for ssh remotes.
        why = "builder.git.ssh_command (sshAuthSecrets)"
        needs.append(Need(SSH, f"{why} runs ssh for git over ssh"))
        if not any(n.tool == GIT for n in needs):
            needs.insert(0, Need(GIT, f"{why} is used by git"))
    return needs
