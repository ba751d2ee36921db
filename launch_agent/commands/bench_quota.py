"""`launch-agent bench quota`: admission decisions per second of the quota engine.

The workload: a balanced tree of `--leaves` leaves (fan-out `--fanout`), cpu, memory, GPU and a
`runs` count; every node guarantees its share (Σ min = capacity) and may borrow up to twice
its min. `--runs` pending runs (random priorities, requests from 1 to 8 CPU with memory and
sometimes GPUs, a quarter of them gangs of 2–8 pods) arrive in two waves:

1. *borrow*: 70% of the runs, on half of the leaves, in one batch: those leaves fill the tree
   far beyond their own min;
2. *reclaim*: the other 30%, on the other half, in one batch: those leaves take their min back
   by preempting borrowers (R7);
3. *churn*: runs finish one at a time in random order (one event each) and freed quota is
   admitted until the queues drain or `--churn` events have passed.

A decision is one iteration of the admission cycle that admits a run (with or without
evicting victims) or reserves quota for a preemptor. Its latency is the wall time of that
iteration, measured around `AdmissionEngine.step()`. The final iteration of each fixpoint,
which concludes that nothing more fits, is a *fixpoint check*: it is not a decision and is
reported separately (count, p99, slowest, and its share of the engine's time), so work the
engine defers to it cannot inflate decisions/s. "Engine time" is decisions plus checks. The
engine is pure Python, run either interpreted or compiled with mypyc (`make compiled`; the
container image ships the compiled build, and `make bench` measures both); the report names
the build it measured. The numbers are for one core of this machine, with the event loop not
involved.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from fractions import Fraction
from typing import Any

from launch_agent.quota import engine_build
from launch_agent.quota.engine import AdmissionEngine
from launch_agent.quota.runs import PodSet, RunSpec, RunState
from launch_agent.quota.tree import parse_tree

GI = 2**30


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "quota",
        help="admission decisions per second of the elastic quota engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--leaves", type=int, default=1000, help="leaves in the tree (1000)")
    bench.add_argument("--fanout", type=int, default=10, help="children per inner node (10)")
    bench.add_argument("--runs", type=int, default=10_000, help="pending runs (10000)")
    bench.add_argument("--churn", type=int, default=2000, help="finish events in phase 3 (2000)")
    bench.add_argument("--seed", type=int, default=1, help="random seed (1)")
    bench.add_argument(
        "--layout",
        choices=["split", "interleaved"],
        default="split",
        help="split: borrowers and reclaimers in different halves of the tree (default);"
        " interleaved: alternate leaves, so every subtree both borrows and reclaims",
    )
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    bench.set_defaults(handler=_run)


def build_tree(leaves: int, fanout: int) -> dict[str, Any]:
    """A balanced tree; leaf min 16 CPU / 64Gi / 2 GPU, max twice that; inner min = Σ."""
    names = [f"l{i}" for i in range(leaves)]
    level: list[dict[str, Any]] = [
        {
            "name": name,
            "min": {"cpu": 16, "memory": f"{64}Gi", "nvidia.com/gpu": 2},
            "max": {"cpu": 32, "memory": f"{128}Gi", "nvidia.com/gpu": 4, "runs": 40},
            "queues": [f"q-{name}"],
        }
        for name in names
    ]
    depth = 0
    while len(level) > fanout:
        depth += 1
        grouped = []
        for start in range(0, len(level), fanout):
            kids = level[start : start + fanout]
            grouped.append(_inner(f"n{depth}.{start // fanout}", kids))
        level = grouped
    root = _inner("root", level)
    root["max"] = dict(root["min"])
    root["max"]["runs"] = leaves * 10
    return {"reclaimPolicy": "Any", "instantTermination": True, "root": root}


def _inner(name: str, kids: list[dict[str, Any]]) -> dict[str, Any]:
    cpu = sum(int(k["min"]["cpu"]) for k in kids)
    gpu = sum(int(k["min"]["nvidia.com/gpu"]) for k in kids)
    mem = sum(int(str(k["min"]["memory"]).removesuffix("Gi")) for k in kids)
    return {
        "name": name,
        "min": {"cpu": cpu, "memory": f"{mem}Gi", "nvidia.com/gpu": gpu},
        "max": {"cpu": 2 * cpu, "memory": f"{2 * mem}Gi", "nvidia.com/gpu": 2 * gpu},
        "children": kids,
    }


def make_runs(count: int, queues: list[str], rng: random.Random, prefix: str) -> list[RunSpec]:
    specs = []
    for i in range(count):
        cpu = rng.randint(1, 8)
        per_pod = {"cpu": cpu * 10**9, "memory": cpu * 4 * GI * 10**9}
        if rng.random() < 0.2:
            per_pod["nvidia.com/gpu"] = 10**9
        pods: tuple[PodSet, ...] = (PodSet(1, per_pod),)
        if rng.random() < 0.25:
            pods = (PodSet(1, per_pod), PodSet(rng.randint(1, 7), per_pod))
        specs.append(
            RunSpec(
                id=f"{prefix}{i:05d}",
                queue=rng.choice(queues),
                pod_sets=pods,
                priority=rng.randint(0, 2),
            )
        )
    return specs


class _Timer:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.idle: list[float] = []
        self.preemptions = 0
        self.evictions = 0

    def fixpoint(self, engine: AdmissionEngine) -> None:
        while True:
            start = time.perf_counter()
            made = engine.step()
            elapsed = time.perf_counter() - start
            if not made:
                self.idle.append(elapsed)
                return
            self.latencies.append(elapsed)
            evicted = sum(1 for d in made if d.action == "evict")
            self.evictions += evicted
            self.preemptions += 1 if evicted else 0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    tree = parse_tree(build_tree(args.leaves, args.fanout))
    engine = AdmissionEngine(tree)
    queues = [q for node in tree.nodes() for q in node.queues]
    if args.layout == "split":
        half = len(queues) // 2
        borrowers, reclaimers = queues[:half], queues[half:]
    else:
        borrowers, reclaimers = queues[::2], queues[1::2]
    first = int(args.runs * 0.7)
    phases: dict[str, dict[str, Any]] = {}
    wall = time.perf_counter()
    for name, specs in (
        ("borrow", make_runs(first, borrowers, rng, "b")),
        ("reclaim", make_runs(args.runs - first, reclaimers, rng, "r")),
    ):
        timer = _Timer()
        for spec in specs:
            engine.submit(spec)
        timer.fixpoint(engine)
        phases[name] = _summary(timer)
    timer = _Timer()
    events = 0
    while events < args.churn:
        running = engine.in_state(RunState.READY)
        if not running:
            break
        engine.finish(rng.choice(running).id)
        events += 1
        timer.fixpoint(engine)
    phases["churn"] = _summary(timer) | {"finish_events": events}
    wall = time.perf_counter() - wall
    everything = [lat for p in phases.values() for lat in p.pop("_latencies")]
    checks = [lat for p in phases.values() for lat in p.pop("_idle")]
    engine_seconds = sum(everything) + sum(checks)
    return {
        "benchmark": "quota",
        "engine_build": engine_build(),
        "leaves": args.leaves,
        "fanout": args.fanout,
        "layout": args.layout,
        "nodes": sum(1 for _ in tree.nodes()),
        "runs": args.runs,
        "decisions": len(everything),
        "decisions_per_second": round(len(everything) / sum(everything), 1) if everything else 0,
        "p50_decision_ms": round(_percentile(everything, 0.50) * 1000, 3),
        "p99_decision_ms": round(_percentile(everything, 0.99) * 1000, 3),
        "max_decision_ms": round(max(everything, default=0.0) * 1000, 3),
        "fixpoint_checks": len(checks),
        "fixpoint_check_p99_ms": round(_percentile(checks, 0.99) * 1000, 3),
        "engine_seconds": round(engine_seconds, 3),
        "decisions_per_engine_second": round(len(everything) / engine_seconds, 1)
        if engine_seconds
        else 0,
        "wall_seconds": round(wall, 2),
        "still_pending": len(engine.in_state(RunState.PENDING)),
        "running_at_end": len(engine.in_state(RunState.READY)),
        "phases": phases,
    }


def _summary(timer: _Timer) -> dict[str, Any]:
    total = sum(timer.latencies)
    return {
        "decisions": len(timer.latencies),
        "decisions_per_second": round(len(timer.latencies) / total, 1) if total else 0,
        "p99_decision_ms": round(_percentile(timer.latencies, 0.99) * 1000, 3),
        "preemptions": timer.preemptions,
        "evictions": timer.evictions,
        "fixpoint_checks": len(timer.idle),
        "fixpoint_check_p99_ms": round(_percentile(timer.idle, 0.99) * 1000, 3),
        "fixpoint_check_ms_max": round(max(timer.idle, default=0.0) * 1000, 3),
        "engine_seconds": round(total + sum(timer.idle), 3),
        "_latencies": timer.latencies,
        "_idle": timer.idle,
    }


def _run(args: argparse.Namespace) -> int:
    result = measure(args)
    print(
        f"quota engine ({result['engine_build']}): {result['leaves']} leaves"
        f" ({result['nodes']} nodes), {result['runs']}"
        f" runs: {result['decisions']} decisions, {result['decisions_per_second']:.0f}"
        f" decisions/s, p50 {result['p50_decision_ms']:.3f} ms, p99"
        f" {result['p99_decision_ms']:.3f} ms, max {result['max_decision_ms']:.1f} ms"
    )
    print(
        f"  {result['fixpoint_checks']} fixpoint checks (nothing more fits; not decisions):"
        f" p99 {result['fixpoint_check_p99_ms']:.3f} ms; engine time {result['engine_seconds']} s"
        f" = {result['decisions_per_engine_second']:.0f} decisions per engine second"
    )
    for name, phase in result["phases"].items():
        print(
            f"  {name:8s} {phase['decisions']:6d} decisions  {phase['decisions_per_second']:9.0f}/s"
            f"  p99 {phase['p99_decision_ms']:.3f} ms  preemptions {phase['preemptions']}"
            f"  evictions {phase['evictions']}  fixpoint checks {phase['fixpoint_checks']}"
            f" (p99 {phase['fixpoint_check_p99_ms']:.3f} ms, slowest"
            f" {phase['fixpoint_check_ms_max']:.1f} ms)  engine {phase['engine_seconds']} s"
        )
    print(
        f"  end: {result['running_at_end']} running, {result['still_pending']} pending;"
        f" wall {result['wall_seconds']} s"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2, default=_jsonable)
            handle.write("\n")
    return 0


def _jsonable(value: object) -> object:
    if isinstance(value, Fraction):
        return float(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")
