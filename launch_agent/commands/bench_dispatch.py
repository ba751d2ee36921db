"""`launch-agent bench dispatch`: our agent against the reference `wandb launch-agent`.

Method and results: docs/benchmarks.md. Each agent gets a fresh sandbox in this process and
runs as a subprocess (so `/proc` measures the agent alone); see `launch_agent.demo.dispatch`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from launch_agent.demo import bench_real, profiling
from launch_agent.demo.apimetrics import MetricsError
from launch_agent.demo.bench_runs import measure_dispatch, measure_tracking
from launch_agent.demo.dispatch import AgentLauncher, BenchError
from launch_agent.demo.launchers import (
    OURS,
    REFERENCE,
    our_spec,
    ours,
    profiled,
    reference_spec,
    reference_wandb,
)
from launch_agent.realcluster.bins import Binaries, MissingBinaries
from launch_agent.realcluster.kubehttp import ApiError
from launch_agent.realcluster.processes import StartError

DESCRIPTION = """\
Measure dispatch: N runs (single-pod Jobs) queued before the agent starts, each agent in a
fresh loopback sandbox (W&B server and Kubernetes API server in this process), the agent as a
subprocess. Prints and writes (--json) for each agent: runs/s from enqueue (agent start) to
workload created, p50/p99 pop-to-create latency, W&B and Kubernetes requests per run, CPU
seconds and peak RSS of the agent's process tree, time to notice completion and idle W&B
requests per hour. Then, for our agent only: a tracking run with --track-runs running runs
(watch connections, requests per minute, RSS) and a restart (time to adopt them all).

The reference is `wandb launch-agent` 0.31.0 from .venv-reference (`make test-reference`
creates it; $LAUNCH_AGENT_REFERENCE_WANDB names another wandb executable), with max_jobs -1
and builder noop. Without it the reference is skipped with a note and ours still runs.
Benchmarks print numbers; they never fail on a threshold. Expect several minutes with the defaults.

--cluster real: the same dispatch against the upstream kube-apiserver (`make cluster-bins`
builds it; a missing binary is an error). One control plane of etcd and kube-apiserver only
(no controllers, scheduler or nodes: Jobs stay as created) for the whole invocation; each agent
in a fresh namespace with a fresh W&B server, timed by a watch on its Jobs and counted by
kube-apiserver's /metrics; then a third row, a plain client POSTing the same N Jobs with
--client-in-flight requests in flight (the best of those tried): the create rate this
machine's API server takes. The completion, idle, tracking and restart phases are sandbox
only (--track-runs, --idle-seconds and --window-seconds are ignored).

--profile DIR runs our agent under cProfile (CPU time; start-up included) and writes, for
each of its processes, DIR/dispatch, DIR/tracking and DIR/restart as .pstats (for `python -m
pstats` or snakeviz) and .md: own CPU ms per run by stage (render, Kubernetes client, JSON,
logging, ...) and the top functions. The profiler slows the agent: its figures in that
invocation are not the benchmark's.
"""


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "dispatch",
        help="our agent vs the reference wandb launch-agent: throughput, requests, CPU, RSS",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs", type=int, default=1000, help="runs per agent (default: %(default)s)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    parser.add_argument("--skip-reference", action="store_true", help="measure only our agent")
    parser.add_argument(
        "--cluster",
        choices=("sandbox", "real"),
        default="sandbox",
        help="the loopback sandbox, or the upstream kube-apiserver (default: %(default)s)",
    )
    parser.add_argument(
        "--client-in-flight",
        default="8,16,32,64",
        metavar="N[,N...]",
        help="--cluster real: requests in flight of the plain client, each tried (default:"
        " %(default)s)",
    )
    parser.add_argument(
        "--track-runs",
        type=int,
        default=10_000,
        help="running runs for the tracking and restart runs; 0 skips them; sandbox only"
        " (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=60.0,
        help="idle window after the runs finished; sandbox only (default: %(default)s)",
    )
    parser.add_argument(
        "--window-seconds",
        type=float,
        default=60.0,
        help="measurement window of the tracking run; sandbox only (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="profile our agent's processes with cProfile into DIR (slows them: see above)",
    )
    parser.set_defaults(handler=_bench)


def _say(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def _in_flight(text: str) -> list[int] | None:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        return None
    return values if values and all(v >= 1 for v in values) else None


def _bench(args: argparse.Namespace) -> int:
    in_flight = _in_flight(args.client_in_flight)
    if in_flight is None:
        print(
            "error: --client-in-flight must be positive integers separated by commas, got"
            f" {args.client_in_flight!r}",
            file=sys.stderr,
        )
        return 2
    if args.cluster == "real":
        return _bench_real(args, in_flight)
    for flag, value in (("--runs", args.runs), ("--track-runs", args.track_runs + 1)):
        if value < 1:
            print(f"error: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 2
    for flag, value in (
        ("--idle-seconds", args.idle_seconds),
        ("--window-seconds", args.window_seconds),
    ):
        if value <= 0:
            print(f"error: {flag} must be positive, got {value}", file=sys.stderr)
            return 2
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        results = asyncio.run(_run(args))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(results)
    if args.profile is not None:
        _write_profiles(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    return 0


def _bench_real(args: argparse.Namespace, in_flight: list[int]) -> int:
    if args.runs < 1:
        print(f"error: --runs must be at least 1, got {args.runs}", file=sys.stderr)
        return 2
    try:
        bins = Binaries.find()
    except MissingBinaries as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows, skipped = _real_rows(args.skip_reference)
    try:
        found = asyncio.run(bench_real.run(bins, rows, args.runs, in_flight, _say))
    except (BenchError, StartError, ApiError, MetricsError, aiohttp.ClientError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    results: dict[str, Any] = {"benchmark": "dispatch", "cluster": "real", "runs": args.runs}
    results |= found
    if skipped:
        results["reference"] = {"skipped": skipped}
    ours, ref = results["ours"], results["reference"]
    if "runs_per_second" in ref:
        results["throughput_ratio"] = round(ours["runs_per_second"] / ref["runs_per_second"], 1)
    results["of_client_rate"] = {
        key: round(results[key]["runs_per_second"] / results["client"]["runs_per_second"], 3)
        for key in ("ours", "reference")
        if "runs_per_second" in results[key]
    }
    _print_real(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    return 0


def _real_rows(skip_reference: bool) -> tuple[list[bench_real.AgentRow], str]:
    rows = [bench_real.AgentRow("ours", ours, lambda namespace: our_spec())]
    if skip_reference:
        return rows, "--skip-reference"
    wandb_cli = reference_wandb()
    if not wandb_cli.exists():
        why = (
            f"{wandb_cli} is missing: `make test-reference` creates .venv-reference"
            " (wandb 0.31.0 with its launch extras)"
        )
        _say(f"reference agent skipped: {why}")
        return rows, why
    rows.append(bench_real.AgentRow("reference", lambda namespace: REFERENCE, reference_spec))
    return rows, ""


def _ours(args: argparse.Namespace, *names: str) -> AgentLauncher:
    if args.profile is None:
        return OURS
    return profiled(OURS, args.profile, iter(names))


def _write_profiles(args: argparse.Namespace) -> None:
    runs = {"dispatch": args.runs, "tracking": args.track_runs, "restart": args.track_runs}
    for name, count in runs.items():
        stats = args.profile / f"{name}.pstats"
        if stats.exists():
            stats.with_suffix(".md").write_text(profiling.report(stats, count), encoding="utf-8")
            _say(f"profile: {stats} and {stats.with_suffix('.md')}")


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"benchmark": "dispatch", "runs": args.runs}
    results["ours"] = await measure_dispatch(
        _ours(args, "dispatch"), our_spec(), args.runs, idle_seconds=args.idle_seconds, say=_say
    )
    if args.skip_reference:
        results["reference"] = {"skipped": "--skip-reference"}
    elif not (wandb_cli := reference_wandb()).exists():
        why = (
            f"{wandb_cli} is missing: `make test-reference` creates .venv-reference"
            " (wandb 0.31.0 with its launch extras)"
        )
        _say(f"reference agent skipped: {why}")
        results["reference"] = {"skipped": why}
    else:
        results["reference"] = await measure_dispatch(
            REFERENCE, reference_spec(), args.runs, idle_seconds=args.idle_seconds, say=_say
        )
    ours, ref = results["ours"], results["reference"]
    if "runs_per_second" in ref:
        results["throughput_ratio"] = round(ours["runs_per_second"] / ref["runs_per_second"], 1)
        if ref["cpu_seconds_dispatch"] > 0:
            share = 100 * ours["cpu_seconds_dispatch"] / ref["cpu_seconds_dispatch"]
            results["cpu_percent_of_reference"] = round(share, 2)
    if args.track_runs > 0:
        results["tracking"] = await measure_tracking(
            _ours(args, "tracking", "restart"),
            our_spec(),
            args.track_runs,
            window_seconds=args.window_seconds,
            say=_say,
        )
    results["targets"] = targets(results)
    return results


# Issue 28's targets, each against one figure of the same invocation.
TRACKED_FOR_TARGETS = 10_000


def _target(name: str, measured: float | None, met: bool | None, unit: str) -> dict[str, Any]:
    shown = "not measured" if measured is None else f"{measured}{unit}"
    return {"target": name, "measured": measured, "shown": shown, "met": met}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 28's targets: met (True), not met (False) or not measured (None, e.g. without
    the reference or with fewer than 10,000 tracked runs)."""
    ours = results["ours"]
    share = results.get("cpu_percent_of_reference")
    ratio = results.get("throughput_ratio")
    tracking = results.get("tracking") or {}
    at_scale = tracking.get("runs", 0) >= TRACKED_FOR_TARGETS
    adopt = tracking["restart"]["seconds_to_adopt"] if at_scale else None
    rss = tracking["peak_rss_mb"] if at_scale else None
    p99 = ours["pop_to_create_ms"]["p99"]
    first = ours["seconds_to_first_pop"]

    def check(value: float | None, ok: bool) -> bool | None:
        return None if value is None else ok

    return [
        _target(
            "agent CPU, start -> last workload <= 2% of the reference's",
            share,
            check(share, share is not None and share <= 2.0),
            "%",
        ),
        _target(
            "throughput >= 40x the reference's",
            ratio,
            check(ratio, ratio is not None and ratio >= 40),
            "x",
        ),
        _target("p99 pop -> create < 50 ms", p99, p99 < 50, " ms"),
        _target("agent start -> first pop < 0.4 s", first, first < 0.4, " s"),
        _target(
            "adoption of 10,000 runs < 4 s",
            adopt,
            check(adopt, adopt is not None and adopt < 4),
            " s",
        ),
        _target(
            "peak RSS at 10,000 tracked runs < 250 MB",
            rss,
            check(rss, rss is not None and rss < 250),
            " MB",
        ),
    ]


ROWS = (
    ("runs/s, enqueue -> workload created", "runs_per_second"),
    ("runs/s, first -> last workload", "runs_per_second_first_to_last"),
    ("agent start -> first pop (s)", "seconds_to_first_pop"),
    ("agent start -> last workload (s)", "seconds_to_last_create"),
    ("pop -> create p50 (ms)", ("pop_to_create_ms", "p50")),
    ("pop -> create p99 (ms)", ("pop_to_create_ms", "p99")),
    ("W&B requests per run", "wandb_requests_per_run"),
    ("Kubernetes requests per run", "kube_requests_per_run"),
    ("CPU seconds, start -> last workload", "cpu_seconds_dispatch"),
    ("CPU ms per run, start -> last workload", "cpu_ms_per_run"),
    ("CPU seconds, whole run", "cpu_seconds_total"),
    ("peak RSS, agent process (MB)", "peak_rss_mb"),
    ("peak RSS, process tree (MB)", "peak_tree_rss_mb"),
    ("all Jobs succeeded -> agent done (s)", "completion_seconds"),
    ("idle W&B requests per hour", "idle_wandb_requests_per_hour"),
    ("idle Kubernetes requests per hour", "idle_kube_requests_per_hour"),
)


def _cell(result: dict[str, Any], key: str | tuple[str, str]) -> str:
    if "skipped" in result:
        return "skipped"
    value = result[key[0]][key[1]] if isinstance(key, tuple) else result[key]
    return str(value)


def _print(results: dict[str, Any]) -> None:
    ours, ref = results["ours"], results["reference"]
    print(f"dispatch, {results['runs']} single-pod Jobs queued before the agent starts")
    width = max(len(label) for label, _ in ROWS)
    print(f"{'':<{width}}  {'launch-agent':>14}  {'wandb 0.31.0':>14}")
    for label, key in ROWS:
        print(f"{label:<{width}}  {_cell(ours, key):>14}  {_cell(ref, key):>14}")
    if "throughput_ratio" in results:
        print(f"throughput, ours / reference: {results['throughput_ratio']}x")
    if "cpu_percent_of_reference" in results:
        print(
            "CPU, start -> last workload, ours as a share of the reference's:"
            f" {results['cpu_percent_of_reference']}%"
        )
    if "skipped" in ref:
        print(f"reference: skipped ({ref['skipped']})")
    tracking = results.get("tracking")
    if tracking:
        restart = tracking["restart"]
        print(f"\ntracking, {tracking['runs']} running runs (our agent)")
        print(f"  dispatch of all runs: {tracking['dispatch_runs_per_second']} runs/s")
        print(f"  watch connections: {tracking['watch_connections']}")
        print(f"  W&B requests/min: {tracking['wandb_requests_per_minute']}", end=" ")
        print(tracking["wandb_operations"])
        print(
            "  W&B requests/min, every run started < 1 h ago:"
            f" {tracking['wandb_requests_per_minute']}"
            f" (stop checks {tracking['stop_checks_per_minute']}); old policy, every run every"
            f" 10 s: {tracking['old_policy_wandb_requests_per_minute']}"
        )
        print(f"  Kubernetes requests/min: {tracking['kube_requests_per_minute']}", end=" ")
        print(tracking["kube_routes"])
        print(f"  peak RSS: {tracking['peak_rss_mb']} MB")
        print(
            f"restart: adopted {restart['adopted']} runs in {restart['seconds_to_adopt']} s"
            f" (Jobs created again: {restart['jobs_created_again']}, items popped again:"
            f" {restart['items_popped_again']}, peak RSS {restart['peak_rss_mb']} MB)"
        )
        print(
            f"  W&B requests/min, every run started 2 h ago: "
            f"{restart['aged_wandb_requests_per_minute']} {restart['aged_wandb_operations']}"
        )
    _print_targets(results["targets"])


def _print_targets(rows: list[dict[str, Any]]) -> None:
    print("\nagainst the targets of issue 28")
    width = max(len(row["target"]) for row in rows)
    for row in rows:
        verdict = {True: "met", False: "NOT met", None: "not measured"}[row["met"]]
        print(f"  {row['target']:<{width}}  {row['shown']:>14}  {verdict}")


# (label, key in an agent's result, key in the plain client's) on the real API server.
REAL_ROWS: tuple[tuple[str, str | tuple[str, str], str | tuple[str, str] | None], ...] = (
    ("runs/s, enqueue -> Job created", "runs_per_second", "runs_per_second"),
    ("runs/s, first -> last Job", "runs_per_second_first_to_last", None),
    ("agent start -> first pop (s)", "seconds_to_first_pop", None),
    ("start -> last Job (s)", "seconds_to_last_create", "seconds_to_last_create"),
    ("pop -> create p50 (ms)", ("pop_to_create_ms", "p50"), None),
    ("pop -> create p99 (ms)", ("pop_to_create_ms", "p99"), None),
    ("POST Job request p50 (ms)", "", ("request_ms", "p50")),
    ("POST Job request p99 (ms)", "", ("request_ms", "p99")),
    ("W&B requests per run", "wandb_requests_per_run", None),
    ("Kubernetes requests per run", "kube_requests_per_run", "kube_requests_per_run"),
    ("CPU seconds, start -> last Job", "cpu_seconds_dispatch", "cpu_seconds_dispatch"),
    ("CPU ms per run", "cpu_ms_per_run", "cpu_ms_per_run"),
    (
        "kube-apiserver + etcd CPU seconds",
        "server_cpu_seconds_dispatch",
        "server_cpu_seconds_dispatch",
    ),
    ("W&B server + watch CPU seconds", "harness_cpu_seconds_dispatch", None),
    ("peak RSS, agent process (MB)", "peak_rss_mb", None),
    ("peak RSS, process tree (MB)", "peak_tree_rss_mb", None),
)


def _real_cell(result: dict[str, Any], key: str | tuple[str, str] | None) -> str:
    if "skipped" in result:
        return "skipped"
    if not key:
        return "-"
    return _cell(result, key)


def _print_real(results: dict[str, Any]) -> None:
    ours, ref, client = results["ours"], results["reference"], results["client"]
    cluster = results["cluster"]
    print(
        f"dispatch on the real API server ({', '.join(cluster['versions'])}; running:"
        f" {', '.join(cluster['processes'])}), {results['runs']} single-pod Jobs"
    )
    width = max(len(label) for label, _, _ in REAL_ROWS)
    print(f"{'':<{width}}  {'launch-agent':>14}  {'wandb 0.31.0':>14}  {'plain client':>14}")
    for label, key, client_key in REAL_ROWS:
        cells = (_real_cell(ours, key), _real_cell(ref, key), _real_cell(client, client_key))
        print(f"{label:<{width}}  " + "  ".join(f"{c:>14}" for c in cells))
    tries = ", ".join(f"{t['in_flight']}: {t['runs_per_second']}" for t in client["tries"])
    print(f"plain client: {client['in_flight']} requests in flight (runs/s by in flight: {tries})")
    if "throughput_ratio" in results:
        print(f"throughput, ours / reference: {results['throughput_ratio']}x")
    for key, share in results["of_client_rate"].items():
        print(f"{key}: {share:.1%} of the plain client's create rate")
    if "skipped" in ref:
        print(f"reference: skipped ({ref['skipped']})")
