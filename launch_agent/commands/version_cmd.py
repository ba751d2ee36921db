"""`launch-agent version`: the one version of the package, the image and the chart.

The number lives in `launch_agent/__init__.py` only (hatch reads it for the wheel); the chart's
`version` and `appVersion` and CHANGELOG.md must agree with it, which `scripts/check_versions.py`
checks in `make release` and in the tests.
"""

from __future__ import annotations

import argparse
import json
import platform

from launch_agent import __version__
from launch_agent.commands.outputs import render as render_output


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "version",
        help="print the agent's version",
        description="Print the agent's version (the package, image tag and chart appVersion).",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "table"),
        default="text",
        help="output format (default: %(default)s)",
    )
    parser.set_defaults(handler=_version)


def _version(args: argparse.Namespace) -> int:
    info = {"version": __version__, "python": platform.python_version()}
    if args.output == "json":
        print(json.dumps(info, indent=2))
    elif args.output == "yaml":
        print("\n".join(f"{key}: {json.dumps(value)}" for key, value in info.items()))
    elif args.output == "table":
        print(render_output(info, "table", ("version", "python")), end="")
    else:
        print(f"launch-agent {__version__}")
    return 0
