"""`launch-agent demo`: run the real agent end to end on the loopback sandbox (`make demo`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from launch_agent.demo.runner import Demo, DemoError, messages, quiet_agent_logs, table
from launch_agent.demo.world import WorldError
from launch_agent.runtime.startup import StartupError

# The example queue specs beside the package (a source checkout or an editable install).
DEFAULT_SPECS = Path(__file__).resolve().parents[2] / "queue-specs"

DESCRIPTION = """\
Start the sandbox in this process (a Kubernetes API server with the CRDs of every workload
kind, a simulated cluster in real time, a W&B Launch server), push runs for the example queue
specs in queue-specs/ with scripted outcomes (success for Job, PyTorchJob, JobSet, TrainJob,
RayJob and Volcano Job; OOMKilled; ImagePullBackOff; Unschedulable; a LeaderWorkerSet stopped
from the W&B UI while it runs; a Kueue Job stopped while it waits in the queue), run the real
agent in-process against it, print a line whenever a run changes state, and end with a table
of each run's outcome and what W&B received. See docs/demo.md.

Nothing leaves the machine: every server listens on 127.0.0.1 and goes away at the end.

Exit status: 0 if every run ended as expected, 1 if any did not (the table says which and why)
or the demo did not finish in time, 2 for bad arguments.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="run the agent end to end against the loopback sandbox (no cluster needed)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--specs",
        metavar="DIR",
        type=Path,
        default=DEFAULT_SPECS,
        help="queue specs directory (default: the repository's queue-specs/)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=50.0,
        help="seconds the runs may take before the demo gives up (default: %(default)s)",
    )
    parser.add_argument(
        "--crds",
        default="auto",
        metavar="auto|packaged|DIR",
        help="CRDs to register: `auto` uses tests/fixtures/crds of a checkout when it exists,"
        " else `packaged` (built from the schemas launch_agent/render ships); or a directory of"
        " CRD YAML files (default: %(default)s)",
    )
    parser.add_argument(
        "--agent-logs",
        choices=("error", "warning", "info", "debug"),
        default="error",
        help="show the agent's own log lines on stderr from this level (default: %(default)s)",
    )
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    if not args.specs.is_dir():
        print(f"error: --specs {args.specs}: not a directory", file=sys.stderr)
        return 2
    if args.crds not in ("auto", "packaged") and not Path(args.crds).is_dir():
        print(f"error: --crds {args.crds}: not a directory (or auto, packaged)", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print(f"error: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return 2
    handler = quiet_agent_logs(getattr(logging, args.agent_logs.upper()))
    try:
        demo = Demo(args.specs, sys.stdout, timeout=args.timeout, crds=args.crds)
        result = asyncio.run(demo.run())
    except (DemoError, WorldError, StartupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    print()
    for line in table(result):
        print(line)
    print()
    for line in messages(result):
        print(line)
    print()
    if result.timed_out:
        print(f"demo: not every run ended within {args.timeout:.0f} s", file=sys.stderr)
    failed = sum(1 for _, _, problem in result.rows if problem is not None)
    verdict = "every run ended as expected" if result.ok else f"{failed} run(s) did not"
    print(f"demo: {len(result.rows)} runs in {result.seconds:.1f} s; {verdict}")
    return 0 if result.ok else 1
