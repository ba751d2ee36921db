"""The `launch-agent` subcommands, one module each.

A module here exposes `register(subparsers)`; `launch_agent.cli` calls every function listed in
`REGISTRARS`. Add a module to the list only when its command works end to end.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from launch_agent.commands import (
    bench_cmd,
    config_cmd,
    demo_cmd,
    quota_cmd,
    render_cmd,
    run_cmd,
    sandbox_cmd,
    validate_cmd,
)

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

REGISTRARS: tuple[Registrar, ...] = (
    config_cmd.register,
    run_cmd.register,
    quota_cmd.register,
    render_cmd.register,
    validate_cmd.register,
    sandbox_cmd.register,
    demo_cmd.register,
    bench_cmd.register,
)
