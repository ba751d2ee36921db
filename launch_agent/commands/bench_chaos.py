"""`launch-agent bench chaos`: agent replicas SIGKILLed at random under faults on both servers;
every item must end exactly once, as its workload's outcome calls for.

Method: `launch_agent.demo.chaos`. Guarantees and figures: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from launch_agent.demo.chaos import ChaosResult, chaos

DESCRIPTION = """\
Chaos: --runs items over four queues: batch/v1 Jobs on two small quota leaves (quota.mode:
agent, so runs wait and borrowed runs are evicted), JobSets and PyTorchJobs; succeeding,
failing (exit code 3), stopped from the W&B UI, Jobs preempted by the cluster once (the
agent must requeue them once, with _resume_count 1), and Jobs that name a job artifact and
no image (git source over HTTP, context in a PVC, a Kaniko Job, the sandbox registry).
--replicas `launch-agent run` processes with leader election; --kills SIGKILLs of the
leader, each aimed at one phase of a run (pop, build, create, ack, tracking, report,
clean-up) and fired when the next request of that phase reaches the W&B or Kubernetes server
(a phase that does not occur within 10 s: a kill at that moment, shown as "random"); each
killed agent is restarted after about a second. Faults the whole time: Kubernetes 5xx, 429,
connection resets, latency, dropped watches and forced 410s; W&B 5xx and one outage of
--outage-seconds. At the end, from the W&B and Kubernetes servers' own records: lost,
duplicated, orphaned (workloads, their children, Secrets, Kaniko Jobs, build contexts) and
double-reported items, and the kills by phase. --seed replays the plan (items, outcomes,
fault and kill draws; process timing is not replayed); --json FILE writes the counts,
kills_by_phase and timings.

--cluster real: the same harness on the real tier (upstream binaries, `make cluster-bins`):
a MultiKueue manager and --workers worker clusters started in this process as `cluster up
--workers N --worker-lost-timeout 20s` starts them, and the sandbox W&B server. Items over two
MultiKueue queues (batch Jobs and JobSets, `spec.kueue.multiKueue: true`, quota.mode kueue),
scripted to succeed or exit with code 3; --replicas agents with leader election on the
manager; --kills SIGKILLs aimed at the phases W&B sees (pop, ack, report; tracking when a
workload runs): the upstream API server has no request observer, so there is no
Kubernetes-side phase timing (create, clean-up) and no Kubernetes faults, only W&B 5xx, and
no UI stops, preemptions, builds or outage (--outage-seconds is ignored). --worker-kills:
a worker's API server stopped for --worker-down-seconds (past the 20 s workerLostTimeout, so
Kueue dispatches its runs again) and started again, at random moments. Counts from the W&B
server's records and the manager's objects (a plain REST client): lost, duplicated (two
workloads for one run on the manager), orphaned (workloads of ended runs, Kueue Workloads of
deleted owners, Secrets without their workload), double-reported; requeued counts the
dispatches again that the agent reported to W&B.
"""


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "chaos",
        help="SIGKILL agent replicas in every phase under faults; count lost/duplicated/orphaned",
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
    parser.add_argument(
        "--cluster",
        choices=("sandbox", "real"),
        default="sandbox",
        help="the sandbox, or MultiKueue on the real tier (default: %(default)s)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="--cluster real: worker clusters (default: 2)"
    )
    parser.add_argument(
        "--worker-kills",
        type=int,
        default=1,
        help="--cluster real: workers lost for a while (default: %(default)s)",
    )
    parser.add_argument(
        "--worker-down-seconds",
        type=float,
        default=30.0,
        help="--cluster real: how long a lost worker stays down (default: %(default)s)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    parser.add_argument(
        "--logs", metavar="DIR", help="keep the agents' logs here (one file per replica)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.replicas < 1 or args.kills < 0:
        print("bench chaos: --runs and --replicas must be >= 1, --kills >= 0", file=sys.stderr)
        return 2
    if args.cluster == "real" and (args.workers < 1 or args.worker_kills < 0):
        print("bench chaos: --workers must be >= 1, --worker-kills >= 0", file=sys.stderr)
        return 2
    # A kill in flight cuts requests mid-body; aiohttp logs each with a traceback, which is
    # the point of the kill, not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    result = _real(args) if args.cluster == "real" else _sandbox(args)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    # A benchmark reports; it does not gate (`make bench` runs them all under `set -e`).
    return 0


def _real(args: argparse.Namespace) -> ChaosResult:
    from launch_agent.demo.chaos_real import chaos_real

    down = args.worker_down_seconds
    deadline = args.deadline or 150 + 3 * args.runs + args.worker_kills * (down + 60)
    return asyncio.run(
        chaos_real(
            seed=args.seed,
            runs=args.runs,
            replicas=args.replicas,
            kills=args.kills,
            workers=args.workers,
            worker_kills=args.worker_kills,
            worker_down_seconds=down,
            deadline=deadline,
            say=_say,
            logs=Path(args.logs) if args.logs else None,
        )
    )


def _sandbox(args: argparse.Namespace) -> ChaosResult:
    deadline = args.deadline or 120 + args.outage_seconds + args.runs
    return asyncio.run(
        chaos(
            seed=args.seed,
            runs=args.runs,
            replicas=args.replicas,
            kills=args.kills,
            outage_seconds=args.outage_seconds,
            deadline=deadline,
            say=_say,
            logs=Path(args.logs) if args.logs else None,
        )
    )


def _say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def render(result: ChaosResult) -> str:
    by_phase = ", ".join(f"{p} {n}" for p, n in result.kills_by_phase.items()) or "none"
    lines = [
        f"chaos: seed {result.seed}, {result.runs} runs {result.outcomes} {result.kinds},"
        f" {result.replicas} replicas, {result.kills} kills"
        + (f", {result.worker_kills} worker kills" if result.worker_kills else ""),
        f"{'kills by phase':<18}{by_phase}",
        f"{'requeued':<18}{result.requeued:>6}",
        f"{'quota evictions':<18}{result.quota_evictions:>6}",
        f"{'Kaniko builds':<18}{result.builds:>6}",
        f"{'lost':<18}{result.lost:>6}",
        f"{'duplicated':<18}{result.duplicated:>6}",
        f"{'orphaned':<18}{result.orphaned:>6}",
        f"{'double_reported':<18}{result.double_reported:>6}",
        f"{'all ended after':<18}{result.seconds_to_all_ended:>6.1f} s",
        f"{'total':<18}{result.seconds_total:>6.1f} s",
    ]
    lines += [f"  {p}" for p in result.problems[:50]]
    return "\n".join(lines)
