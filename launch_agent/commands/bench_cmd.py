"""`launch-agent bench ...`: benchmarks. They print numbers (and write JSON); they never pass or
fail on a threshold, that is for the reader and docs/benchmarks.md.

Each benchmark is a module in `launch_agent/commands/` exposing
`register_bench(subparsers)`; list it in `BENCHMARKS` once it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from launch_agent.commands import (
    bench_build,
    bench_chaos,
    bench_dispatch,
    bench_quota,
    bench_quota_agent,
    bench_render,
    bench_sandbox,
    bench_soak,
    bench_tracking,
)

BenchRegistrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

BENCHMARKS: tuple[BenchRegistrar, ...] = (
    bench_render.register_bench,
    bench_sandbox.register_bench,
    bench_tracking.register_bench,
    bench_dispatch.register_bench,
    bench_quota.register_bench,
    bench_quota_agent.register_bench,
    bench_build.register_bench,
    bench_soak.register_bench,
    bench_chaos.register_bench,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench",
        help="run a benchmark and print its numbers",
        description="Benchmarks print numbers and write JSON (--json FILE); they do not pass or"
        " fail. Results and method are collected in docs/benchmarks.md.",
    )
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    for register_bench in BENCHMARKS:
        register_bench(bench_sub)
