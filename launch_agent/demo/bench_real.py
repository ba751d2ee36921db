"""The dispatch benchmark on the real API server (`bench dispatch --cluster real`).

One upstream control plane for the whole invocation, cut to etcd and kube-apiserver
(`ControlPlane.start(controllers=False)`): no kube-controller-manager, no kube-scheduler, no
nodes, so Jobs stay as created (as on the sandbox) and nothing else loads the machine's cores
while the rate is measured. Then, in turn, each in a namespace of its own:

1. each agent (a subprocess, as on the sandbox: `dispatch.spawn`), with a fresh in-process W&B
   server holding N items queued before it starts. A watch on Jobs in its namespace, opened
   before the spawn, records when each ADDED event arrives (so the time includes the watch's
   latency: `creationTimestamp` has whole seconds only); pops come from the W&B server's item
   history, as on the sandbox. Kubernetes requests are kube-apiserver's own counts
   (`apimetrics`), from the spawn until every item is created and acknowledged, less the API
   server's upkeep; the harness's own LIST and watch are opened before the first snapshot.
2. a plain client: aiohttp with the admin's certificate POSTing N Job bodies (the Job both
   agents create) with C requests in flight, for each C asked: the create rate this machine's
   API server takes, and the request latency.

Every Job is checked to have been created once: N Jobs, N distinct run ids, each the run id an
item was acknowledged with.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from launch_agent.demo.apimetrics import clients_only, request_counts, started_between
from launch_agent.demo.dispatch import (
    WANDB_RUN_ID,
    AgentLauncher,
    BenchError,
    Creates,
    latencies,
    requests,
    spawn,
    summary_ms,
    wait_for,
)
from launch_agent.demo.launchers import ENTITY, JOB, QUEUE
from launch_agent.demo.procstat import read_process
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.controlplane import ControlPlane
from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

Say = Callable[[str], None]
SERVERS = ("kube-apiserver", "etcd")
PROBE = "bench-watch-probe"


@dataclass
class RealStage:
    """What an agent is started against here: its W&B server and the admin's kubeconfig."""

    wandb: WandbServer
    state: LaunchState
    kubeconfig: Path


@dataclass(frozen=True)
class AgentRow:
    """One agent to measure: how to start it and the run spec of its items, given its
    namespace."""

    key: str
    launcher: Callable[[str], AgentLauncher]
    spec: Callable[[str], dict[str, Any]]


class RealBench:
    """`async with RealBench(directory, bins) as bench:` etcd and kube-apiserver are up."""

    def __init__(self, directory: Path, bins: Binaries, say: Say) -> None:
        self.directory = directory
        self.bins = bins
        self.say = say
        self.control_plane = ControlPlane("bench", directory / "cluster", bins)
        self._http: KubeHTTP | None = None
        self.started_seconds = 0.0

    @property
    def http(self) -> KubeHTTP:
        if self._http is None:
            raise RuntimeError("the control plane is not running")
        return self._http

    async def __aenter__(self) -> RealBench:
        started = time.monotonic()
        try:
            await self.control_plane.start(controllers=False)
            self._http = await KubeHTTP(self.control_plane.credentials()).__aenter__()
        except BaseException:
            await self.stop()
            raise
        self.started_seconds = time.monotonic() - started
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.__aexit__(None, None, None)
            self._http = None
        await self.control_plane.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "processes": sorted(self.control_plane.children),
            "versions": [self.bins.describe(name) for name in SERVERS],
            "server": self.control_plane.server,
            "started_seconds": round(self.started_seconds, 1),
        }

    async def server_cpu(self) -> float:
        """CPU seconds kube-apiserver and etcd have used so far (from `/proc`, in a thread)."""
        total = 0.0
        for name in SERVERS:
            process = self.control_plane.children[name].process
            sample = await asyncio.to_thread(read_process, process.pid) if process else None
            total += sample.cpu_seconds if sample is not None else 0.0
        return total

    async def requests(self) -> dict[str, int]:
        text = await self.http.get("/metrics")
        return request_counts(str(text))

    async def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        await self.http.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        return name

    async def measure_agent(self, row: AgentRow, runs: int, scratch: Path) -> dict[str, Any]:
        namespace = await self.namespace(f"bench-{row.key}")
        launcher = row.launcher(namespace)
        state = LaunchState(entity=ENTITY, lease_seconds=3600)
        state.add_queue(QUEUE)
        wandb = WandbServer(state)
        async with wandb:
            stage = RealStage(wandb, state, self.control_plane.admin_kubeconfig)
            spec = row.spec(namespace)
            items = [state.push_by_name(ENTITY, "model-registry", QUEUE, spec) for _ in range(runs)]
            creates = Creates()
            async with watch_jobs(self.http, namespace, creates):
                result = await self._dispatch(launcher, stage, items, creates, scratch)
        result["namespace"] = namespace
        result["once"] = created_once(items, creates)
        return result

    async def _dispatch(
        self,
        launcher: AgentLauncher,
        stage: RealStage,
        items: list[RunQueueItem],
        creates: Creates,
        scratch: Path,
    ) -> dict[str, Any]:
        runs = len(items)
        before = await self.requests()
        server_cpu, own_cpu = await self.server_cpu(), time.process_time()
        self.say(f"{launcher.name}: {runs} items queued; starting the agent")
        spawned_wall = time.time()
        agent = await spawn(launcher, stage, scratch)
        try:
            await wait_for(
                f"{runs} Jobs", lambda: len(creates.times) >= runs, 120 + runs / 2, agent
            )
            t_last = max(creates.times.values()) - spawned_wall
            server_cpu = await self.server_cpu() - server_cpu
            own_cpu = time.process_time() - own_cpu
            usage = await agent.sample()
            await wait_for(
                "every item acknowledged",
                lambda: all(i.state is ItemState.CLAIMED for i in items),
                60,
                agent,
            )
            kube, upkeep = clients_only(started_between(await self.requests(), before))
            wandb_counts = dict(stage.wandb.log.counts)
        finally:
            await agent.stop(launcher.graceful_stop(stage, agent.process))
        pops = [t for i in items for t, s in i.history if s is ItemState.LEASED]
        t_first = min(creates.times.values()) - spawned_wall
        self.say(f"{launcher.name}: {runs} Jobs in {t_last:.2f} s")
        return {
            "agent": launcher.name,
            "runs": runs,
            "seconds_to_first_pop": round(min(pops) - spawned_wall, 3),
            "seconds_to_first_create": round(t_first, 3),
            "seconds_to_last_create": round(t_last, 3),
            "runs_per_second": round(runs / t_last, 1),
            "runs_per_second_first_to_last": round((runs - 1) / max(t_last - t_first, 1e-9), 1),
            "pop_to_create_ms": summary_ms(latencies(items, creates)),
            "wandb_requests": requests(wandb_counts),
            "wandb_requests_per_run": round(requests(wandb_counts) / runs, 2),
            "kube_requests": sum(kube.values()),
            "kube_requests_per_run": round(sum(kube.values()) / runs, 2),
            "kube_routes": kube,
            "apiserver_upkeep": upkeep,
            "cpu_seconds_dispatch": usage["cpu_seconds"],
            "cpu_ms_per_run": round(usage["cpu_seconds"] * 1000 / runs, 2),
            "server_cpu_seconds_dispatch": round(server_cpu, 2),
            # This process: the W&B server answering the agent, and the watch timing its Jobs.
            "harness_cpu_seconds_dispatch": round(own_cpu, 2),
            "peak_rss_mb": usage["peak_rss_mb"],
            "peak_tree_rss_mb": usage["peak_tree_rss_mb"],
            "processes": usage["processes"],
        }

    async def measure_client(self, runs: int, in_flight: int) -> dict[str, Any]:
        namespace = await self.namespace(f"bench-client-{in_flight}")
        before = await self.requests()
        server_cpu, own_cpu = await self.server_cpu(), time.process_time()
        took, lat = await post_jobs(self.control_plane, namespace, runs, in_flight)
        server_cpu = await self.server_cpu() - server_cpu
        own_cpu = time.process_time() - own_cpu
        kube, upkeep = clients_only(started_between(await self.requests(), before))
        listed = await self.http.get(path_of("batch/v1", "jobs", namespace))
        created = len(listed.get("items") or [])
        if created != runs or kube.get("POST jobs") != runs:
            raise BenchError(
                f"plain client: {created} Jobs in {namespace} and {kube.get('POST jobs')} POSTs"
                f" counted by kube-apiserver, expected {runs} of each"
            )
        self.say(f"plain client, {in_flight} in flight: {runs} Jobs in {took:.2f} s")
        return {
            "agent": "plain client",
            "namespace": namespace,
            "runs": runs,
            "in_flight": in_flight,
            "seconds_to_last_create": round(took, 3),
            "runs_per_second": round(runs / took, 1),
            "request_ms": summary_ms(lat),
            "kube_requests": sum(kube.values()),
            "kube_requests_per_run": round(sum(kube.values()) / runs, 2),
            "kube_routes": kube,
            "apiserver_upkeep": upkeep,
            # The benchmark's own process: the client, nothing else runs in it meanwhile.
            "cpu_seconds_dispatch": round(own_cpu, 2),
            "cpu_ms_per_run": round(own_cpu * 1000 / runs, 2),
            "server_cpu_seconds_dispatch": round(server_cpu, 2),
        }


def job_body(namespace: str, index: int) -> dict[str, Any]:
    """The Job both agents create (`launchers.JOB`, with the `restartPolicy: Never` both add),
    named and labelled as a run's."""
    name = f"client-{index:06d}"
    job: dict[str, Any] = JOB
    template = job["spec"]["template"]
    return {
        **job,
        "metadata": {"name": name, "namespace": namespace, "labels": {WANDB_RUN_ID: name}},
        "spec": {"template": {"spec": template["spec"] | {"restartPolicy": "Never"}}},
    }


async def post_jobs(
    control_plane: ControlPlane, namespace: str, runs: int, in_flight: int
) -> tuple[float, list[float]]:
    """POST `runs` Jobs with `in_flight` requests at a time: (seconds, latency per request)."""
    context = await asyncio.to_thread(control_plane.credentials().ssl_context)
    path = path_of("batch/v1", "jobs", namespace)
    bodies = [job_body(namespace, i) for i in range(runs)]
    latency: list[float] = []
    failures: list[str] = []
    next_body = iter(bodies)
    connector = aiohttp.TCPConnector(ssl=context, limit=in_flight)
    async with aiohttp.ClientSession(base_url=control_plane.server, connector=connector) as session:

        async def worker() -> None:
            for body in next_body:
                started = time.monotonic()
                async with session.post(path, json=body) as resp:
                    await resp.read()
                    if resp.status != 201:
                        failures.append(f"{body['metadata']['name']}: HTTP {resp.status}")
                latency.append(time.monotonic() - started)

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        took = time.monotonic() - started
    if failures:
        raise BenchError(f"plain client: {len(failures)} POSTs failed, first {failures[0]}")
    return took, latency


@contextlib.asynccontextmanager
async def watch_jobs(http: KubeHTTP, namespace: str, creates: Creates) -> AsyncIterator[None]:
    """A watch on Jobs in `namespace` feeding `creates` while the block runs, live before it
    starts: a probe Job is created and deleted once the watch has seen it."""
    path = path_of("batch/v1", "jobs", namespace)
    listed = await http.get(path)
    seen = asyncio.Event()
    task = asyncio.create_task(
        _watch(http, path, listed["metadata"]["resourceVersion"], creates, seen),
        name=f"watch jobs {namespace}",
    )
    try:
        probe = job_body(namespace, 0) | {"metadata": {"name": PROBE, "namespace": namespace}}
        await http.create(path, probe)
        waiter = asyncio.create_task(seen.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=30, return_when="FIRST_COMPLETED")
        if task in done:
            task.result()
        if waiter not in done:
            waiter.cancel()
            raise BenchError(f"the watch on Jobs in {namespace} saw no Job within 30 s")
        await http.delete(f"{path}/{PROBE}", {"propagationPolicy": "Background"})
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _watch(
    http: KubeHTTP, path: str, version: str, creates: Creates, seen: asyncio.Event
) -> None:
    while True:
        try:
            async for kind, obj in http.watch(path, version):
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion") or version
                if meta.get("name") == PROBE:
                    seen.set()
                elif kind == "ADDED":
                    creates.listener("batch/jobs", kind, obj)
        except ApiError as exc:
            raise BenchError(f"the watch {path} failed: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.1)


def created_once(items: list[RunQueueItem], creates: Creates) -> dict[str, int]:
    """Jobs seen, distinct run ids among them, and those that are an item's acked run."""
    acked = {i.associated_run_id for i in items if i.associated_run_id}
    run_ids = set(creates.run_ids.values())
    return {
        "jobs": len(creates.times),
        "distinct_run_ids": len(run_ids),
        "items_acked": len(acked),
        "jobs_of_acked_runs": len(run_ids & acked),
    }


def check_once(result: dict[str, Any]) -> None:
    """Every item's Job created once: no duplicate, none lost, none foreign."""
    once, runs = result["once"], result["runs"]
    if set(once.values()) != {runs}:
        raise BenchError(
            f"{result['agent']} in {result['namespace']}: expected {runs} Jobs, one per item,"
            f" found {once}"
        )


def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rows, key=lambda row: row["runs_per_second"])


async def run(
    bins: Binaries,
    rows: list[AgentRow],
    runs: int,
    in_flight: list[int],
    say: Say,
) -> dict[str, Any]:
    """Every agent of `rows`, then the plain client at each `in_flight`, on one control plane."""
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-bench-real-")
    results: dict[str, Any] = {}
    try:
        async with RealBench(Path(scratch.name), bins, say) as bench:
            results["cluster"] = bench.describe()
            say(f"real API server: etcd and kube-apiserver up in {bench.started_seconds:.1f} s")
            for row in rows:
                folder = Path(scratch.name) / row.key
                folder.mkdir()
                result = await bench.measure_agent(row, runs, folder)
                check_once(result)
                results[row.key] = result
            tries = [await bench.measure_client(runs, n) for n in in_flight]
            results["client"] = best(tries) | {"tries": tries}
    finally:
        await asyncio.to_thread(scratch.cleanup)
    return results
