"""`launch-agent bench soak`: a steady arrival of runs for M minutes; does anything grow?

Method: `launch_agent.demo.soak` (one agent subprocess, the sandbox in this process). Results
and how to read them: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from launch_agent.demo.dispatch import BenchError
from launch_agent.demo.soak import DEFAULT_TTL_SECONDS, METRICS, SoakResult, soak

DESCRIPTION = """\
Soak: runs arrive at --rate a minute for --minutes minutes (single-pod Jobs that succeed after
3 s on the sandbox's simulated cluster), against one `launch-agent run` subprocess. The agent's
RSS, open file descriptors, asyncio tasks, the watch connections the API server holds open and
the agent's run table, and the Jobs and pods the cluster holds, are sampled every minute (every
10 s for runs of 5 minutes or less). Prints every sample and the least-squares slope of each
metric per minute, over the whole soak and over its steady part: finished Jobs stay for --ttl
seconds and the agent's watch caches them, so memory follows the cluster until the first ones
expire; from --ttl + 60 s on the cluster holds a steady number of objects and nothing should
grow. --json FILE writes them. Benchmarks print numbers; they never fail on one.
"""


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "soak",
        help="runs arriving steadily for M minutes: slopes of RSS, fds, tasks, watches, runs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="length of the soak (default: %(default)s)"
    )
    parser.add_argument(
        "--rate", type=float, default=60.0, help="runs arriving a minute (default: %(default)s)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        help="seconds between samples (default: 60, or 10 for soaks of 5 minutes or less)",
    )
    parser.add_argument(
        "--ttl",
        type=int,
        default=DEFAULT_TTL_SECONDS,
        metavar="SECONDS",
        help="the Jobs' ttlSecondsAfterFinished (default: %(default)s; production: 3600)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.minutes <= 0 or args.rate < 0 or args.ttl < 0:
        print("bench soak: --minutes must be > 0, --rate and --ttl >= 0", file=sys.stderr)
        return 2
    interval = args.interval or (10.0 if args.minutes <= 5 else 60.0)
    try:
        result = asyncio.run(soak(args.minutes, args.rate, interval, _say, ttl_seconds=args.ttl))
    except BenchError as exc:
        print(f"bench soak: {exc}", file=sys.stderr)
        return 1
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    return 0


def _say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def render(result: SoakResult) -> str:
    data = result.as_json()
    lines = [
        f"soak: {result.minutes:g} min at {result.rate_per_minute:g} runs/min,"
        f" {len(result.samples)} samples every {result.interval_seconds:g} s;"
        f" {result.pushed} runs pushed, {result.acked} acked; Jobs kept {result.ttl_seconds} s,"
        f" steady from minute {result.steady_from:g}",
        f"{'metric':<20}{'first':>10}{'last':>10}{'slope/min':>12}{'steady':>12}",
    ]
    first, last = result.samples[0], result.samples[-1]
    for name in METRICS:
        slope = data["slopes_per_minute"][name]
        steady = data["steady_slopes_per_minute"][name]
        lines.append(f"{name:<20}{first[name]:>10g}{last[name]:>10g}{slope:>12.4f}{steady:>12.4f}")
    return "\n".join(lines)
