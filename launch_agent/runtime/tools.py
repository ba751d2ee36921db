"""Start-up check: every tool the configuration needs is on PATH, or the agent does not start."""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from launch_agent.model.config import AgentConfig
from launch_agent.model.tools import needed_tools
from launch_agent.runtime.startup import StartupError


def check_tools(config: AgentConfig, env: Mapping[str, str]) -> None:
    """`StartupError` naming every needed tool that `env`'s PATH does not have."""
    path = env.get("PATH", "")
    missing = [
        need
        for need in needed_tools(config, env)
        if shutil.which(need.tool.name, path=path) is None
    ]
    if missing:
        lines = [
            f"`{need.tool.name}` is not installed (not on PATH): {need.why}"
            f" (Debian package {need.tool.package})"
            for need in missing
        ]
        raise StartupError("; ".join(lines))
