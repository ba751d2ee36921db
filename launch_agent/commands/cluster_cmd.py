"""`launch-agent cluster up` and `cluster info`: a real Kubernetes control plane on loopback.

`up` starts the upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler that
`make cluster-bins` built, simulated nodes (the sandbox's kubelet driving pods through the real
API server), the workload controllers that were built (Kueue, JobSet, LeaderWorkerSet, KubeRay,
training-operator, Trainer) with their upstream CRDs and webhooks, and the sandbox's W&B Launch
server, until Ctrl-C or SIGTERM. It writes `DIR/cluster.env` in the shape of `sandbox.env`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from pathlib import Path

from launch_agent.realcluster.bins import Binaries, MissingBinaries
from launch_agent.realcluster.cluster import DEFAULT_NODES
from launch_agent.realcluster.control import ControlServer
from launch_agent.realcluster.multicluster import MultiCluster
from launch_agent.realcluster.processes import StartError
from launch_agent.realcluster.setup import (
    ADDON_ORDER,
    MAX_WORKERS,
    build,
    built_addons,
    clusters_of,
    main_cluster,
)
from launch_agent.sandbox.cluster import OutcomeError, parse_outcome
from launch_agent.sandbox.wandb import DEFAULT_API_KEY, LaunchState, WandbServer


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="run a real Kubernetes control plane (upstream binaries) on loopback",
        description="The real-cluster tier: the upstream kube-apiserver, etcd,"
        " kube-controller-manager, kube-scheduler and workload controllers built by"
        " `make cluster-bins`, with simulated nodes. See docs/sandbox.md, 'The real cluster'.",
    )
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        help="start the cluster and a W&B server until interrupted; print their environment",
        description="Start the control plane, simulated nodes, the built workload controllers"
        " and the sandbox's W&B Launch server; write DIR/admin.kubeconfig and DIR/cluster.env"
        " (KUBECONFIG, WANDB_BASE_URL, WANDB_API_KEY, WANDB_ENTITY, LAUNCH_SANDBOX_QUEUES, as in"
        " sandbox.env; etcd's ETCDCTL_ENDPOINTS; LAUNCH_CLUSTER_CONTROL and its token, a"
        " loopback endpoint that stops, starts or restarts an API server) and print the same"
        " lines. Logs of every component are in DIR/logs/."
        " Ctrl-C or SIGTERM stops everything, controllers first.",
    )
    up.add_argument(
        "--dir", metavar="DIR", help="the cluster's files and logs (default: a new temporary one)"
    )
    up.add_argument(
        "--nodes",
        type=int,
        default=len(DEFAULT_NODES),
        help="simulated nodes, each 64 CPU, 256Gi, 8 nvidia.com/gpu (default: %(default)s)",
    )
    up.add_argument(
        "--addon",
        action="append",
        dest="addons",
        metavar="NAME",
        choices=ADDON_ORDER,
        help="a controller to run (repeatable; default: every one that was built)",
    )
    up.add_argument(
        "--no-addons", action="store_true", help="no workload controllers: the control plane only"
    )
    up.add_argument(
        "--workers",
        type=int,
        default=0,
        help="MultiKueue: a manager cluster and N worker clusters (worker-1 ... worker-N), each"
        " its own API server and etcd; Kueue with MultiKueue on the manager (default: one"
        " cluster, no MultiKueue)",
    )
    up.add_argument(
        "--worker-lost-timeout",
        default="15m",
        help="MultiKueue's workerLostTimeout on the manager (default: %(default)s, Kueue's)",
    )
    up.add_argument(
        "--outcome",
        default="succeed after=5s",
        help="what a pod does unless its workload says otherwise (annotation"
        " sandbox.launch-agent.io/outcome; default: %(default)s)",
    )
    up.add_argument("--entity", default="ent", help="W&B entity (default: %(default)s)")
    up.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="run queue to create in ENTITY/model-registry; repeatable (default: q1)",
    )
    up.add_argument("--api-key", default=DEFAULT_API_KEY, help="the key the W&B server accepts")
    up.add_argument("--wandb-port", type=int, default=0, help="W&B server port (default: free)")
    up.set_defaults(handler=_up)
    info = actions.add_parser(
        "info",
        help="list the built binaries with their upstream modules and versions",
        description="Read the build cache (`make cluster-bins`) and print each binary with the"
        " main module and version its Go build information names.",
    )
    info.set_defaults(handler=_info)


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _addons(args: argparse.Namespace, bins: Binaries) -> list[str]:
    if args.no_addons:
        return []
    if args.addons:
        return [name for name in ADDON_ORDER if name in args.addons]
    return built_addons(bins)


def _up(args: argparse.Namespace) -> int:
    try:
        parse_outcome(args.outcome)
    except OutcomeError as exc:
        return _usage(f"--outcome: {exc}")
    if args.nodes < 1:
        return _usage(f"--nodes must be at least 1, got {args.nodes}")
    if not 0 <= args.workers <= MAX_WORKERS:
        return _usage(f"--workers must be between 0 and {MAX_WORKERS}, got {args.workers}")
    try:
        bins = Binaries.find()
    except MissingBinaries as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="launch-cluster-"))
    try:
        asyncio.run(_serve(args, bins, directory))
    except StartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(args: argparse.Namespace, bins: Binaries, directory: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    state = LaunchState(entity=args.entity)
    queues = list(dict.fromkeys(args.queues or ["q1"]))
    for name in queues:
        state.add_queue(name)
    print(f"# starting the cluster in {directory} (logs in */logs/ there)", file=sys.stderr)
    world = build(
        directory,
        bins=bins,
        addons=_addons(args, bins),
        workers=args.workers,
        nodes=args.nodes,
        default_outcome=args.outcome,
        worker_lost_timeout=args.worker_lost_timeout,
    )
    clusters = clusters_of(world)
    async with (
        world,
        WandbServer(state, port=args.wandb_port, api_key=args.api_key) as wb,
        ControlServer({c.name: c for c in clusters}) as control,
    ):
        cluster = main_cluster(world)
        env = {
            "KUBECONFIG": str(cluster.kubeconfig),
            "WANDB_BASE_URL": wb.url,
            "WANDB_API_KEY": args.api_key,
            "WANDB_ENTITY": args.entity,
            "LAUNCH_SANDBOX_QUEUES": ",".join(queues),
            # etcd's own client URL (etcdctl reads this variable): tests compact its history.
            "ETCDCTL_ENDPOINTS": cluster.control_plane.etcd_url,
            # Stop, start or restart an API server from another process (realcluster/control.py).
            "LAUNCH_CLUSTER_CONTROL": control.url,
            "LAUNCH_CLUSTER_CONTROL_TOKEN": control.token,
        }
        if isinstance(world, MultiCluster):
            env["LAUNCH_CLUSTER_WORKERS"] = ",".join(w.name for w in world.workers)
            for worker in world.workers:
                key = worker.name.upper().replace("-", "_")
                env[f"KUBECONFIG_{key}"] = str(worker.kubeconfig)
        text = "".join(f"{key}={value}\n" for key, value in env.items())
        await loop.run_in_executor(None, _write_env, directory, text)
        print(text, end="", flush=True)
        for name in ("kube-apiserver", *cluster.addon_children):
            if bins.has(name) or name in cluster.addon_children:
                print(f"# {bins.describe(_binary(name))}", file=sys.stderr)
        print(
            f"# up; environment also in {directory / 'cluster.env'}; Ctrl-C stops",
            file=sys.stderr,
        )
        await stop.wait()
        print("# stopping", file=sys.stderr)


def _binary(addon: str) -> str:
    from launch_agent.realcluster.addons import ADDONS

    return ADDONS[addon]().binary if addon in ADDONS else addon


def _write_env(directory: Path, text: str) -> None:
    # Written last and atomically: a script that waits for this file finds everything ready.
    partial = directory / "cluster.env.partial"
    partial.write_text(text, encoding="utf-8")
    partial.replace(directory / "cluster.env")


def _info(args: argparse.Namespace) -> int:
    try:
        bins = Binaries.find()
    except MissingBinaries as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name in sorted(bins.versions.get("binaries") or {}):
        print(bins.describe(name))
    return 0
