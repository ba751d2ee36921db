"""`launch-agent demo`: run the real agent end to end on the loopback sandbox (`make demo`), or
on the real-cluster tier (`--cluster real`, optionally MultiKueue with `--workers N`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from launch_agent.demo.runner import (
    Demo,
    DemoError,
    DemoResult,
    StageFactory,
    messages,
    quiet_agent_logs,
    table,
)
from launch_agent.demo.scenario import (
    MULTI_NAMESPACE,
    MULTI_QUEUE,
    MULTI_SPEC,
    REAL_KUEUE_QUEUES,
    WORKER_QUOTA,
    WORKER_RUNS,
    DemoRun,
    KueueQueue,
    LeftOut,
    real_runs,
)
from launch_agent.demo.world import WorldError
from launch_agent.realcluster.bins import Binaries, MissingBinaries
from launch_agent.realcluster.processes import StartError
from launch_agent.realcluster.setup import MAX_WORKERS, built_addons
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

--cluster real plays the same scenarios on the real-cluster tier instead (what `launch-agent
cluster up` starts: the upstream kube-apiserver, etcd, controllers, scheduler, Kueue and the
built workload controllers, with simulated nodes; `make cluster-bins` first). The scheduler's
and Kueue's own words are what the runs are judged by; kinds whose controller was not built, or
that the tier cannot play, are left out with a line saying why. --workers N adds a MultiKueue
manager and N worker clusters, pushes Jobs through MultiKueue and shows the worker each ran on.

Exit status: 0 if every run ended as expected (and, with --workers, runs landed on every
worker), 1 if any did not (the table says which and why), the demo did not finish in time or
the cluster did not start, 2 for bad arguments.
"""
# Seconds the runs may take by default: the sandbox's simulated cluster is fast; the real
# controllers and, with MultiKueue, three API servers on a small machine are not.
TIMEOUTS = {"sandbox": 50.0, "real": 150.0}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="run the agent end to end against the loopback sandbox (no cluster needed)"
        " or, with --cluster real, the real-cluster tier",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--cluster",
        choices=("sandbox", "real"),
        default="sandbox",
        help="where the runs run: the in-process sandbox, or the real control plane and"
        " controllers `make cluster-bins` built (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="with --cluster real: a MultiKueue manager and N worker clusters; the runs go"
        " through MultiKueue and must land on every worker (default: one cluster)",
    )
    parser.add_argument(
        "--dir",
        metavar="DIR",
        type=Path,
        help="with --cluster real: the cluster's files and logs, kept afterwards (default: a"
        " temporary folder, removed unless the demo fails)",
    )
    parser.add_argument(
        "--specs",
        metavar="DIR",
        type=Path,
        help="queue specs directory (default: the repository's queue-specs/; with --workers"
        " the demo writes its own MultiKueue spec)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds the runs may take before the demo gives up, counted once the cluster is"
        f" up (default: {TIMEOUTS['sandbox']:.0f}, {TIMEOUTS['real']:.0f} with --cluster real)",
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


def _usage(args: argparse.Namespace) -> str | None:
    if args.specs is not None and not args.specs.is_dir():
        return f"--specs {args.specs}: not a directory"
    if args.crds not in ("auto", "packaged") and not Path(args.crds).is_dir():
        return f"--crds {args.crds}: not a directory (or auto, packaged)"
    if args.timeout is not None and args.timeout <= 0:
        return f"--timeout must be positive, got {args.timeout}"
    if args.cluster != "real" and (args.workers or args.dir is not None):
        return "--workers and --dir need --cluster real"
    if args.cluster == "real" and args.crds != "auto":
        return "--crds applies to the sandbox: the real cluster installs each controller's own CRDs"
    if not 0 <= args.workers <= MAX_WORKERS:
        return f"--workers must be between 0 and {MAX_WORKERS}, got {args.workers}"
    if args.workers == 1:
        return "--workers 1 cannot show runs spread over workers: use 2 or more"
    if args.workers and args.specs is not None:
        return "--specs does not apply with --workers: the demo writes its MultiKueue spec"
    return None


def _demo(args: argparse.Namespace) -> int:
    problem = _usage(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    timeout = args.timeout or TIMEOUTS[args.cluster]
    handler = quiet_agent_logs(getattr(logging, args.agent_logs.upper()))
    try:
        if args.cluster == "real":
            return _real(args, timeout)
        demo = Demo(args.specs or DEFAULT_SPECS, sys.stdout, timeout=timeout, crds=args.crds)
        return _report(_play(demo), timeout)
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)


def _play(demo: Demo) -> DemoResult | None:
    try:
        return asyncio.run(demo.run())
    except (DemoError, WorldError, StartupError, StartError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _real(args: argparse.Namespace, timeout: float) -> int:
    try:
        bins = Binaries.find()
    except MissingBinaries as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    built = built_addons(bins)
    if args.workers and "kueue" not in built:
        print("error: --workers needs Kueue (MultiKueue runs in it): not built", file=sys.stderr)
        return 1
    keep = args.dir is not None
    directory = args.dir or Path(tempfile.mkdtemp(prefix="launch-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    runs: list[DemoRun]
    left: list[LeftOut]
    addons: tuple[str, ...]
    kueue: tuple[KueueQueue, ...]
    if args.workers:
        specs = directory / "specs"
        specs.mkdir(exist_ok=True)
        (specs / "multikueue-job.yaml").write_text(MULTI_SPEC, encoding="utf-8")
        # Jobs only: the other controllers would cost their start on every cluster.
        runs, left, addons = list(WORKER_RUNS), [], ("kueue",)
        kueue = (KueueQueue(MULTI_NAMESPACE, MULTI_QUEUE, WORKER_QUOTA),)
    else:
        specs = args.specs or DEFAULT_SPECS
        runs, left = real_runs(built)
        addons, kueue = tuple(built), REAL_KUEUE_QUEUES
    stage = _real_stage(directory, bins, addons, args.workers, kueue)
    demo = Demo(specs, sys.stdout, runs=runs, timeout=timeout, stage=stage, left_out=left)
    result = _play(demo)
    status = _report(result, timeout)
    if keep or status != 0:
        print(f"demo: the cluster's files and logs are in {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return status


def _real_stage(
    directory: Path,
    bins: Binaries,
    addons: tuple[str, ...],
    workers: int,
    kueue: tuple[KueueQueue, ...],
) -> StageFactory:
    from launch_agent.demo.realworld import RealSettings, RealWorld

    def make(queues: tuple[str, ...], namespaces: tuple[str, ...]) -> RealWorld:
        settings = RealSettings(
            entity="ent",
            queues=queues,
            namespaces=namespaces,
            addons=addons,
            workers=workers,
            kueue_queues=tuple(q for q in kueue if q.namespace in namespaces),
        )
        return RealWorld(directory, settings, bins)

    return make


def _report(result: DemoResult | None, timeout: float) -> int:
    if result is None:
        return 1
    print()
    for line in table(result):
        print(line)
    print()
    for line in messages(result):
        print(line)
    print()
    for left in result.left_out:
        print(f"demo: left out {left.name} ({left.kind}): {left.reason}")
    if result.timed_out:
        print(f"demo: not every run ended within {timeout:.0f} s", file=sys.stderr)
    failed = sum(1 for _, _, problem in result.rows if problem is not None)
    verdict = "every run ended as expected" if result.ok else f"{failed} run(s) did not"
    if result.spread_problem is not None:
        verdict += f"; {result.spread_problem}"
    elif result.workers:
        used = sorted({w for _, seen, _ in result.rows for w in seen.workers})
        verdict += f"; runs landed on {', '.join(used)}"
    print(f"demo: {len(result.rows)} runs in {result.seconds:.1f} s; {verdict}")
    return 0 if result.ok else 1
