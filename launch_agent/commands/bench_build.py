"""`launch-agent bench build`: context packing throughput, and N concurrent runs → one build.

1. **Packing**: a generated source tree of `--mb` megabytes (half compressible text, half
   random bytes, in files of 64 KB to 1 MB across nested directories) is packed twice with the
   deterministic packer; prints MB/s (input bytes per second, one core: gzip level 6) and checks
   both archives are byte-identical.
2. **Single flight**: `--runs` concurrent `ImageBuilder.build` calls for the same git commit on
   the loopback sandbox (API server + simulated cluster in real time, S3 on moto's server, the
   sandbox registry with token auth); prints how many Kaniko Jobs were created (expected 1) and
   the wall time, then the same job once more (expected: skipped, no Job).

moto is in the `dev` extra; without it the second part is reported as not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import random
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from launch_agent.adapters.build_context import pack_context
from launch_agent.sandbox.git_http import GitHttpServer


def make_tree(root: Path, megabytes: int, seed: int = 7) -> int:
    """A tree of about `megabytes` MB; returns the exact byte count."""
    rng = random.Random(seed)
    words = [f"token{i}" for i in range(500)]
    total = 0
    target = megabytes * 1024 * 1024
    i = 0
    while total < target:
        size = min(rng.randint(64 * 1024, 1024 * 1024), target - total)
        folder = root / f"pkg{i % 7}" / f"mod{i % 13}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 2:
            data = rng.randbytes(size)
        else:
            text = " ".join(rng.choice(words) for _ in range(size // 6 + 1))
            data = text.encode()[:size]
        (folder / f"file{i}.dat").write_bytes(data)
        total += len(data)
        i += 1
    return total


def measure_packing(megabytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        root = Path(tmp) / "src"
        size = make_tree(root, megabytes)
        times: list[float] = []
        digests: list[str] = []
        packed_size = 0
        for n in range(2):
            start = time.perf_counter()
            packed = pack_context(root, "FROM python:3.11-slim\n", Path(tmp) / f"ctx{n}.tgz")
            times.append(time.perf_counter() - start)
            digests.append(packed.sha256)
            packed_size = packed.size
    best = min(times)
    return {
        "input_mb": round(size / 1e6, 1),
        "archive_mb": round(packed_size / 1e6, 1),
        "seconds": round(best, 3),
        "mb_per_second": round(size / 1e6 / best, 1),
        "identical": digests[0] == digests[1],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


BENCH_FILES = {"train.py": "print('bench')\n", "requirements.txt": "numpy\n"}


@contextlib.asynccontextmanager
async def _served(root: Path) -> AsyncIterator[GitHttpServer]:
    """The sandbox's smart-HTTP git server: the agent takes no local paths as sources."""
    server = GitHttpServer(root)
    await asyncio.to_thread(server.__enter__)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)


async def measure_single_flight(runs: int) -> dict[str, Any]:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        return {"skipped": "moto is not installed (pip install -e '.[dev]')"}
    from launch_agent.adapters.builder import BuildSpec, Credentials, ImageBuilder
    from launch_agent.adapters.digest_record import DigestRecord
    from launch_agent.adapters.kube import KubeClient
    from launch_agent.adapters.object_store import ObjectStore
    from launch_agent.adapters.registry import RegistryClient
    from launch_agent.model.build import SourceKind, parse_destination
    from launch_agent.model.config import BuilderConfig, GitSourceConfig
    from launch_agent.render.kaniko import KanikoSettings
    from launch_agent.sandbox.cluster import RealClock, SimulatedCluster
    from launch_agent.sandbox.kaniko import SimulatedKaniko
    from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
    from launch_agent.sandbox.registry import RegistryServer

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    port = _free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    await asyncio.to_thread(moto.start)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        store = ObjectStore("s3://bench-ctx/ctx", endpoint_url=endpoint, region="us-east-1")
        await store.ensure_bucket()
        with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
            served = Path(tmp) / "served"
            served.mkdir()
            async with (
                _served(served) as git_server,
                KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as kube,
                SimulatedCluster(
                    kube, clock=RealClock(), default_outcome="succeed after=1s start=0.2s"
                ) as cluster,
                RegistryServer(users={"ci": "pw"}) as registry,
            ):
                url, _ = await asyncio.to_thread(git_server.add, "repo", BENCH_FILES)
                kaniko = SimulatedKaniko(kube.store, cluster, registry)  # the push, the digest
                created = kaniko.jobs
                kubeconfig = await asyncio.to_thread(
                    write_kubeconfig, Path(tmp) / "kubeconfig", kube.url, "kaniko"
                )
                builder_config = BuilderConfig.model_validate(
                    {"type": "kaniko", "build-context-store": "s3://bench-ctx/ctx"}
                )
                dest = parse_destination(f"{registry.hostport}/bench/train")
                async with (
                    await KubeClient.from_kubeconfig(str(kubeconfig)) as client,
                    RegistryClient({registry.hostport: ("ci", "pw")}) as reg,
                    ImageBuilder(
                        client, store, reg, KanikoSettings(builder_config, "kaniko"), dest,
                        workdir=Path(tmp),
                        credentials=Credentials(git=GitSourceConfig(allowed_schemes=["http"])),
                        record=DigestRecord(client, "kaniko", "bench-image-digests"),
                    ) as builder,
                ):  # fmt: skip
                    namespace = {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": "kaniko"}}  # fmt: skip
                    await client.create(namespace, "kaniko")

                    def spec(i: int) -> BuildSpec:
                        return BuildSpec(f"run-{i}", SourceKind.GIT, url, "main",
                                         base_image="python:3.11-slim",
                                         entrypoint=("python", "train.py"))  # fmt: skip

                    start = time.perf_counter()
                    images = await asyncio.gather(*(builder.build(spec(i)) for i in range(runs)))
                    concurrent_s = time.perf_counter() - start
                    jobs_after_concurrent = len(created)
                    start = time.perf_counter()
                    await builder.build(spec(runs))
                    again_s = time.perf_counter() - start
                    return {
                        "runs": runs,
                        "distinct_images": len({built.image for built in images}),
                        "build_jobs": jobs_after_concurrent,
                        "concurrent_seconds": round(concurrent_s, 2),
                        "rerun_build_jobs": len(created) - jobs_after_concurrent,
                        "rerun_seconds": round(again_s, 2),
                        "stats": {
                            "requests": builder.stats.requests,
                            "builds": builder.stats.builds,
                            "shared": builder.stats.shared,
                            "skipped": builder.stats.skipped,
                        },
                    }
    finally:
        await asyncio.to_thread(moto.stop)


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "build",
        help="context packing MB/s and N concurrent runs of one job → one Kaniko build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mb", type=int, default=100, help="size of the tree to pack (MB)")
    parser.add_argument("--runs", type=int, default=20, help="concurrent runs of one job")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.mb < 1 or args.runs < 1:
        print("error: --mb and --runs must be at least 1", file=sys.stderr)
        return 2
    # moto's server logs every request at INFO; the numbers are what this command prints.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    packing = measure_packing(args.mb)
    print(
        f"packing: {packing['input_mb']} MB -> {packing['archive_mb']} MB tar.gz in"
        f" {packing['seconds']} s = {packing['mb_per_second']} MB/s"
        f" (byte-identical twice: {packing['identical']}; {platform.machine()}, one core)"
    )
    flight = asyncio.run(measure_single_flight(args.runs))
    if "skipped" in flight:
        print(f"single flight: not run: {flight['skipped']}")
    else:
        print(
            f"single flight: {flight['runs']} concurrent runs of one job -> "
            f"{flight['build_jobs']} Kaniko Job(s), {flight['distinct_images']} image, "
            f"{flight['concurrent_seconds']} s; the job again -> "
            f"{flight['rerun_build_jobs']} Job(s) (registry hit), {flight['rerun_seconds']} s"
        )
    result = {"benchmark": "build", "packing": packing, "single_flight": flight}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0
