"""The `launch-agent` subcommands, one module each.

A module here exposes `register(subparsers)`; `launch_agent.cli` calls it for every command
listed in `COMMANDS`. Add a module to the table only when its command works end to end.

Modules are imported on demand: `launch-agent run` loads only the agent, not the sandbox, the
demo and the benchmarks (their imports cost a quarter of the agent's start-up), while
`launch-agent --help` still loads every command to list it.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

# Command name -> the module that registers it, in the order `--help` lists them.
COMMANDS: dict[str, str] = {
    "config": "launch_agent.commands.config_cmd",
    "run": "launch_agent.commands.run_cmd",
    "status": "launch_agent.commands.status_cmd",
    "quota": "launch_agent.commands.quota_cmd",
    "render": "launch_agent.commands.render_cmd",
    "validate": "launch_agent.commands.validate_cmd",
    "diagnose": "launch_agent.commands.diagnose_cmd",
    "migrate": "launch_agent.commands.migrate_cmd",
    "sandbox": "launch_agent.commands.sandbox_cmd",
    "cluster": "launch_agent.commands.cluster_cmd",
    "demo": "launch_agent.commands.demo_cmd",
    "bench": "launch_agent.commands.bench_cmd",
    "version": "launch_agent.commands.version_cmd",
    "completion": "launch_agent.commands.completion_cmd",
}
# Commands that read the whole command tree: every command is registered for them.
NEEDS_ALL = frozenset({"completion"})


def registrars(argv: Sequence[str] = ()) -> list[Registrar]:
    """The registrars needed to parse `argv`: its command's alone, or all of them."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    names = [first] if first in COMMANDS and first not in NEEDS_ALL else list(COMMANDS)
    registered: list[Registrar] = [
        importlib.import_module(COMMANDS[name]).register for name in names
    ]
    return registered
