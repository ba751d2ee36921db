"""`launch-agent bench chaos`: agent replicas SIGKILLed at random under faults on both servers;
every item must end exactly once, as its workload's outcome calls for.

Method: `launch_agent.demo.chaos`. Guarantees and figures: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from launch_agent.demo.chaos import ChaosResult, chaos

DESCRIPTION = """\
Chaos: --runs items over two queues (succeeding, failing and stopped-from-the-UI Jobs),
--replicas `launch-agent run` processes with leader election, --kills SIGKILLs of the leader
at random moments (each killed agent restarted after about a second), and faults the whole
time: Kubernetes 5xx, 429, connection resets, latency, dropped watches and forced 410s; W&B
5xx and one outage of --outage-seconds. At the end, from the W&B and Kubernetes servers' own
records: lost, duplicated, orphaned and double-reported items. --seed replays the plan (items,
outcomes, fault and kill draws; process timing is not replayed); --json FILE writes the counts
and timings.
"""


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "chaos",
        help="SIGKILL agent replicas at random under faults; count lost/duplicated/orphaned runs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=200, help="items (default: %(default)s)")
    parser.add_argument(
        "--replicas", type=int, default=2, help="agent processes (default: %(default)s)"
    )
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="replays a run (default: %(default)s)")
    parser.add_argument(
        "--outage-seconds",
        type=float,
        default=60.0,
        help="length of the one W&B outage (default: %(default)s)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds for every item to end (default: 120 + outage + runs)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.replicas < 1 or args.kills < 0:
        print("bench chaos: --runs and --replicas must be >= 1, --kills >= 0", file=sys.stderr)
        return 2
    deadline = args.deadline or 120 + args.outage_seconds + args.runs
    result = asyncio.run(
        chaos(
            seed=args.seed,
            runs=args.runs,
            replicas=args.replicas,
            kills=args.kills,
            outage_seconds=args.outage_seconds,
            deadline=deadline,
            say=_say,
        )
    )
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    # A benchmark reports; it does not gate (`make bench` runs them all under `set -e`).
    return 0


def _say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def render(result: ChaosResult) -> str:
    lines = [
        f"chaos: seed {result.seed}, {result.runs} runs {result.outcomes},"
        f" {result.replicas} replicas, {result.kills} kills",
        f"{'lost':<18}{result.lost:>6}",
        f"{'duplicated':<18}{result.duplicated:>6}",
        f"{'orphaned':<18}{result.orphaned:>6}",
        f"{'double_reported':<18}{result.double_reported:>6}",
        f"{'all ended after':<18}{result.seconds_to_all_ended:>6.1f} s",
        f"{'total':<18}{result.seconds_total:>6.1f} s",
    ]
    lines += [f"  {p}" for p in result.problems[:50]]
    return "\n".join(lines)
