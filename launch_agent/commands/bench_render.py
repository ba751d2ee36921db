"""`launch-agent bench render`: renders per second for a PyTorchJob with 8 workers.

What one render costs on the dispatcher's hot path: parse the item, check the submitter's
layer (W&B's echo of the queue config plus a replica and resource override), merge, macros,
W&B environment (with a 4 KB run config), labels, defaults and security enforcement on both
pod templates. Single-threaded, so the figure is per core. `--env N` gives each container N
more env entries, all changed by the submitter under an env grant: the named-list merge and
the policy must stay linear in N (20,000 entries took 25 s when they were quadratic). Prints
numbers; never passes or fails. Schema validation is not part of a render and is not measured
here.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
import tracemalloc
from pathlib import Path
from typing import Any

from launch_agent.model.run_item import parse_run_item
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import build_queue_spec

TARGET_PER_SECOND = 2000


def bench_spec(env: int = 0) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "${image_uri}",
                            "env": [{"name": "NCCL_DEBUG", "value": "WARN"}]
                            + [{"name": f"BENCH_{i}", "value": "a"} for i in range(env)],
                            "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "256Gi"}},
                            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                        }
                    ],
                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                }
            },
        }

    return {
        "apiVersion": "launch-agent/v1",
        "kind": "QueueSpec",
        "metadata": {"name": "bench-pytorch"},
        "spec": {
            "queues": ["bench"],
            "namespace": "ml-training",
            "template": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
            },
            "overridable": [
                "spec.pytorchReplicaSpecs.Worker.replicas",
                "**.containers[*].resources",
                "**.containers[*].env",
                "overrides.args",
                "overrides.run_config",
            ],
        },
    }


def bench_item(spec: dict[str, Any], workers: int) -> dict[str, Any]:
    # What W&B sends: its own copy of the queue config with the submitter's change merged in.
    echo = copy.deepcopy(spec["spec"]["template"])
    echo["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    for replica in echo["spec"]["pytorchReplicaSpecs"].values():
        for entry in replica["template"]["spec"]["containers"][0]["env"][1:]:
            entry["value"] = "b"  # with --env: every extra entry is a change to check
    return {
        "runQueueItemId": "UnVuUXVldWVJdGVtOjQ2NjU2OTE5",
        "runSpec": {
            "entity": "bench",
            "project": "throughput",
            "run_id": "abcd1234",
            "name": "bench-run",
            "author": "someone",
            "resource": "kubernetes",
            "docker": {"docker_image": "registry.example.com/train:1"},
            "resource_args": {"kubernetes": echo},
            "overrides": {
                "args": ["--epochs", "10", "--lr", "0.001"],
                "run_config": {f"param_{i}": i * 0.5 for i in range(200)},
            },
        },
    }


def measure(seconds: float, workers: int, env: int = 0) -> dict[str, Any]:
    raw = bench_spec(env)
    spec, _ = build_queue_spec(raw)
    item = parse_run_item(bench_item(raw, workers))
    settings = RenderSettings()
    render(spec, item, None, settings)  # warm caches (globs, kind row)
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    batch = 100 if env < 1000 else 1
    while True:
        for _ in range(batch):
            render(spec, item, None, settings)
        count += batch
        now = time.perf_counter()
        if now >= deadline:
            break
    elapsed = now - start
    tracemalloc.start()
    render(spec, item, None, settings)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rate = count / elapsed
    return {
        "benchmark": "render",
        "workload": f"PyTorchJob, 1 master + {workers} workers"
        + (f", {env} changed env entries per container" if env else ""),
        "renders": count,
        "seconds": round(elapsed, 3),
        "renders_per_second": round(rate, 1),
        "microseconds_per_render": round(1e6 / rate, 1),
        "peak_bytes_per_render": peak,
        "target_per_second": TARGET_PER_SECOND,
        "python": platform.python_version(),
    }


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "render",
        help="renders per second for a PyTorchJob with 8 workers (one core)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run (default 3)")
    parser.add_argument("--workers", type=int, default=8, help="PyTorchJob workers (default 8)")
    parser.add_argument(
        "--env", type=int, default=0, help="extra env entries per container, all overridden"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    result = measure(args.seconds, args.workers, args.env)
    print(
        f"render: {result['workload']}: {result['renders_per_second']:,.0f} renders/s"
        f" ({result['microseconds_per_render']} µs each, {result['renders']} renders in"
        f" {result['seconds']} s, peak {result['peak_bytes_per_render'] / 1024:.0f} KiB"
        f" allocated per render; target ≥ {TARGET_PER_SECOND:,}/s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0
