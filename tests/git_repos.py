"""git for tests: repositories with a fixed identity, served over git's smart HTTP protocol.

The agent refuses local paths and `file://` from submitters, so tests reach repositories the
way a real source is reached: the sandbox's `GitHttpServer` (`git http-backend` on 127.0.0.1).
The default scheme allow-list is https and ssh, so tests allow `http` in the builder's git
settings (`LOOPBACK_GIT`), the admin knob for such a server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from launch_agent.model.config import GitSourceConfig
from launch_agent.sandbox.git_http import GitHttpServer, bare_repo

__all__ = ["LOOPBACK_GIT", "GitHttpServer", "bare_repo", "git"]

# What tests put in `builder.git` for the loopback server.
LOOPBACK_GIT = GitSourceConfig(allowed_schemes=["http"])


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` (HOME there, so no ~/.gitconfig applies); its stdout, stripped."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "HOME": str(cwd),
            "PATH": "/usr/bin:/bin",
        },
    )
    return done.stdout.strip()
