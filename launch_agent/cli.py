"""The `launch-agent` command."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from launch_agent import __version__
from launch_agent.commands import registrars
from launch_agent.commands.parsing import SuggestingParser

DESCRIPTION = """\
A Kubernetes dispatcher for W&B Launch. It polls W&B Launch run queues, renders each run from
an admin-owned queue spec with enforced security defaults, submits it as a Kubernetes Job or
custom resource, tracks it with watches and reports every outcome back to W&B.

Configuration comes from a W&B-compatible launch-config.yaml (--config), the environment
(WANDB_API_KEY, WANDB_BASE_URL, WANDB_ENTITY, WANDB_LAUNCH_MAX_JOBS, LAUNCH_AGENT_*) and flags,
in that order of precedence; `launch-agent config show` prints the result and its sources.
"""

EPILOG = "Run `launch-agent COMMAND --help` for the options of one command; user docs are in docs/."


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = SuggestingParser(
        prog="launch-agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"launch-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in registrars(argv):
        register(sub)
    # `launch-agent completion` walks the whole tree from here.
    parser.set_defaults(root_parser=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The command's imports make hundreds of thousands of objects that live as long as the
    # process: collecting while they are made finds nothing and costs a fifth of the import
    # CPU, and scanning them again in every later full collection costs the agent per run.
    # They are moved out of the collector's generations (`gc.freeze`) once imported.
    enabled = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(argv)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `launch-agent ... | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
