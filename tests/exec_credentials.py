"""An exec credential plugin for the Kubernetes tests, as kubectl and the client library run
`aws eks get-token`: a small Python program that prints an ExecCredential with the token
currently in a file, and counts its runs."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

PLUGIN = """\
import json, pathlib, sys
token_file, runs_file = map(pathlib.Path, sys.argv[1:3])
with runs_file.open("a") as runs:
    runs.write("run\\n")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": token_file.read_text().strip()},
}))
"""


class Credentials:
    """The files behind the plugin: the token it hands out, and how often it ran."""

    def __init__(self, root: Path) -> None:
        self.token = root / "token"
        self.runs = root / "runs"
        self.plugin = root / "plugin.py"

    async def hand_out(self, token: str) -> None:
        await asyncio.to_thread(self.token.write_text, token)

    async def plugin_runs(self) -> int:
        if not await asyncio.to_thread(self.runs.exists):
            return 0
        text = await asyncio.to_thread(self.runs.read_text)
        return len(text.splitlines())


def exec_user(credentials: Credentials) -> dict[str, Any]:
    """A kubeconfig `user` that runs the plugin."""
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(credentials.plugin), str(credentials.token), str(credentials.runs)],
            "interactiveMode": "Never",
        }
    }


async def install(root: Path, first_token: str) -> Credentials:
    """Write the plugin under `root` and hand out `first_token`."""
    credentials = Credentials(root)
    await asyncio.to_thread(credentials.plugin.write_text, PLUGIN)
    await credentials.hand_out(first_token)
    return credentials
