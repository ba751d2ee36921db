"""Simulated nodes for a real control plane: the sandbox's kubelet, driving pods through a real
kube-apiserver as a kubelet does.

There is no container runtime here, so no real kubelet can run. What stands in for it:

- **Nodes** are registered as a kubelet registers its own (`pkg/kubelet/kubelet_node_status.go`
  `registerWithAPIServer`, then the status with capacity, allocatable, the Ready condition,
  the InternalIP address and the kubelet's endpoint). The `node.kubernetes.io/not-ready` taint
  that the TaintNodesByCondition admission plugin puts on every new Node is removed, as the
  node lifecycle controller would once the node is Ready (that controller does not run here:
  nothing heartbeats).
- **Pods** that the real kube-scheduler bound to one of these nodes are mirrored into a local
  sandbox store (`Store.mirror`), where the sandbox's kubelet (`sandbox/cluster/kubelet.py`)
  plays each one's scripted outcome on the wall clock. Its writes go back to the API server as a
  kubelet's do: the status as a strategic-merge patch of `pods/status` with the pod's UID as a
  precondition (`pkg/kubelet/status/status_manager.go`, `statusutil.PatchPodStatus`), the final
  delete of a stopped pod with grace period 0 (`canBeDeleted` → `Delete` with a UID
  precondition), and its Events through the core/v1 API (the kubelet's legacy recorder).
- **Logs**: the API server proxies `pods/log` to the node's kubelet endpoint
  (`pkg/registry/core/pod/strategy.go` `LogLocation`), so a loopback HTTPS server answers
  `/containerLogs/{namespace}/{pod}/{container}` with what the container "printed", and only to
  a client certificate of the cluster's CA (the API server's kubelet client certificate).
- **Outcomes** follow the sandbox's rules (`sandbox/cluster/scripts.py`): the
  `sandbox.launch-agent.io/outcome` annotation on the pod or a controlling owner up its chain
  (read as metadata only), or a script in the ConfigMap `kube-system/launch-agent-sim-outcomes`
  (`script_outcome`), so a test in another process can script runs through the API itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.sandbox.cluster.clock import RealClock
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.kubelet import Kubelet, PodSim
from launch_agent.sandbox.cluster.nodes import Node
from launch_agent.sandbox.cluster.outcomes import Outcome, OutcomeError
from launch_agent.sandbox.cluster.scripts import OutcomeBook
from launch_agent.sandbox.kube.errors import ApiError as SandboxError
from launch_agent.sandbox.kube.store import Obj, Store

log = logging.getLogger(__name__)

SCRIPTS_NAMESPACE = "kube-system"
SCRIPTS_CONFIGMAP = "launch-agent-sim-outcomes"
APPLIED = "sim.launch-agent.io/applied-scripts"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
MAX_CHAIN = 10
CONCURRENT_WRITES = 16
# What a stopped or restarted API server does to a request or a watch in flight: a refused
# connection (OSError), a timeout, or a stream cut mid-chunk (`aiohttp.ClientPayloadError`,
# `ServerDisconnectedError`: aiohttp's own, not OSErrors). The simulator outlives all of them.
NETWORK_ERRORS = (OSError, TimeoutError, aiohttp.ClientError)


@dataclass(frozen=True)
class Intent:
    """One write the kubelet made, to be carried to the API server."""

    verb: str  # status | delete | evict | event
    namespace: str
    name: str
    uid: str
    body: Obj


class RemoteCtx(Ctx):
    """The kubelet's context over the mirror: writes land locally and are noted as intents."""

    def __init__(self, store: Store, clock: RealClock, intents: list[Intent], sent: dict[str, Obj]):
        super().__init__(store, clock)
        self.intents = intents
        self.sent = sent

    def set_status(self, obj: Obj, status: dict[str, Any]) -> Obj:
        updated = super().set_status(obj, status)
        meta = updated["metadata"]
        uid = str(meta.get("uid"))
        # Compared with what was sent, not with the mirror: the API server may write a status
        # back in another form (dropped nulls), and that must not start a patch loop.
        if self.sent.get(uid) != updated.get("status"):
            self.sent[uid] = updated.get("status") or {}
            self.intents.append(
                Intent("status", meta["namespace"], meta["name"], uid, self.sent[uid])
            )
        return updated

    def delete(self, obj: Obj, propagation: str = "Background") -> None:
        # A graceful delete (a drain's eviction, the scheduler's preemption): the API server
        # sets the deletionTimestamp and the pod comes back through the watch.
        meta = obj["metadata"]
        self.writes += 1
        self.intents.append(Intent("evict", meta["namespace"], meta["name"], meta["uid"], {}))

    def confirm_deleted(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.writes += 1
        self.intents.append(Intent("delete", meta["namespace"], meta["name"], meta["uid"], {}))
        self.store.mirror(
            self.store.rt("pods"), None, namespace=meta["namespace"], name=meta["name"]
        )

    def update(self, obj: Obj, subresource: str | None = None) -> Obj:
        raise RuntimeError("the real scheduler binds pods; the simulated kubelet only plays them")


class BoundKubelet(Kubelet):
    """The sandbox's kubelet for pods a real scheduler bound: a pod starts when it is seen bound
    to one of these nodes, never bound here."""

    def __init__(self, names: set[str], book: OutcomeBook, chains: dict[str, list[Obj]]):
        super().__init__([], self._outcome)
        self.names = names
        self.book = book
        self.chains = chains
        self.problems: list[tuple[Obj, str]] = []

    def _outcome(self, pod: Obj) -> Outcome:
        chain = self.chains.get(pod["metadata"]["uid"]) or [pod]
        return self.book.outcome_for(
            [pod, *chain[1:]], lambda obj, text: self.problems.append((obj, text))
        )

    def _schedule(self, ctx: Ctx, pod: Obj, sim: PodSim) -> bool:
        node = pod["spec"].get("nodeName")
        if node not in self.names:
            return False
        sim.bound_at, sim.node = ctx.t, node
        return True


def node_body(node: Node, port: int, now: str) -> tuple[Obj, Obj]:
    """The Node a kubelet registers, and the status it then writes."""
    manifest = node.manifest(now)
    status = manifest.pop("status")
    # InternalIP only: the API server reaches a kubelet at its preferred address type, and a
    # Hostname would have to resolve.
    status["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"}]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    status.setdefault("nodeInfo", {}).update(
        kubeletVersion="v1.37.2-sim",
        containerRuntimeVersion="launch-agent-sim://1",
        operatingSystem="linux",
        architecture="amd64",
    )
    return {"apiVersion": "v1", "kind": "Node", **manifest}, status


class NodeSimulator:
    def __init__(
        self,
        http: KubeHTTP,
        nodes: Sequence[Node],
        *,
        server_cert: tuple[Path, Path],
        client_ca: Path,
        default_outcome: str = "succeed after=5s",
    ) -> None:
        self.http = http
        self.nodes = list(nodes)
        self.book = OutcomeBook(default_outcome)
        self.clock = RealClock()
        self.store = Store()
        self.chains: dict[str, list[Obj]] = {}
        self.kubelet = BoundKubelet({n.name for n in self.nodes}, self.book, self.chains)
        self.sent: dict[str, Obj] = {}
        self.pushed_events: set[tuple[str, str]] = set()
        self._server_cert = server_cert
        self._client_ca = client_ca
        self._dirty = asyncio.Event()
        self._wakeups: list[float] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.stats = {
            "status_patches": 0,
            "deletes": 0,
            "events": 0,
            "write_errors": 0,
            "write_retries": 0,
            "pass_errors": 0,
        }
        self._event_storage = self.store.rt("events").storage
        # Writes being retried (pod uid, verb) -> failures so far: a worker stopped for 30 s
        # would otherwise log every retry of every pod on it.
        self._failing: dict[tuple[str, str], int] = {}
        self._pending_events: list[Obj] = []
        # Pod writes that failed for a reason a retry can cure (a timeout, a 429 or 5xx of a
        # loaded API server), sent again before the next pass's: the mirror already holds the
        # status, so the kubelet would never write it again and the pod would stay Running on
        # the server for good. The real kubelet's status manager re-syncs every pod whose
        # status differs from the API server's (`pkg/kubelet/status/status_manager.go`,
        # `syncBatch`).
        self._retry: list[Intent] = []
        self.store.listeners.append(self._on_local_write)

    # --- start-up -----------------------------------------------------------------------------

    async def start_log_server(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self._server_cert)
        context.load_verify_locations(cafile=str(self._client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._serve_log)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def register_nodes(self) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for node in self.nodes:
            body, status = node_body(node, self.port, now)
            try:
                await self.http.create("/api/v1/nodes", body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            path = f"/api/v1/nodes/{node.name}"
            await self.http.patch(f"{path}/status", {"status": status})
            current = await self.http.get(path)
            taints = [
                t for t in current["spec"].get("taints") or [] if t.get("key") != NOT_READY_TAINT
            ]
            await self.http.patch(path, {"spec": {"taints": taints or None}})

    async def run(self) -> None:
        """Until cancelled: the watches and the kubelet's loop."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watch_pods(), name="sim-nodes watch pods")
            for plural in ("secrets", "configmaps"):
                group.create_task(self._watch_refs(plural), name=f"sim-nodes watch {plural}")
            group.create_task(self._loop(), name="sim-nodes kubelet")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- the kubelet's loop -------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            try:
                await self._pass()
            except (
                ApiError,
                SandboxError,
                *NETWORK_ERRORS,
                ValueError,
                KeyError,
                TypeError,
            ) as exc:
                # The simulator stands for every kubelet of the cluster: one bad pass must not
                # stop them all. What failed is logged, and the next pass starts over.
                self.stats["pass_errors"] += 1
                log.exception("node simulator: a pass failed: %s", exc)
                await asyncio.sleep(0.5)

    async def _pass(self) -> None:
        due = min(self._wakeups, default=self.clock.seconds() + 1.0)
        wait = max(min(due - self.clock.seconds(), 1.0), 0.02)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._dirty.wait()
        self._dirty.clear()
        intents: list[Intent] = []
        ctx = RemoteCtx(self.store, self.clock, intents, self.sent)
        self.kubelet.reconcile(ctx)
        self._wakeups = ctx.wakeups
        self._report_problems()
        # A status for a pod the mirror no longer holds (deleted since) has no one to wait for.
        retried = [i for i in self._retry if i.verb != "status" or self._holds(i)]
        kept = {id(i) for i in retried}
        for gone in self._retry:
            if id(gone) not in kept:
                self._failing.pop((gone.uid, gone.verb), None)
        self._retry = []
        self.stats["write_retries"] += len(retried)
        await self._flush(retried + intents)

    def _on_local_write(self, storage: str, kind: str, obj: Obj) -> None:
        if storage == self._event_storage and kind in ("ADDED", "MODIFIED"):
            self._pending_events.append(obj)

    def _report_problems(self) -> None:
        for obj, text in self.kubelet.problems:
            ctx = Ctx(self.store, self.clock)
            ctx.event(obj, "Warning", "InvalidOutcome", text, "sandbox")
        self.kubelet.problems.clear()

    async def _flush(self, intents: list[Intent]) -> None:
        events, self._pending_events = self._pending_events, []
        # One pod's writes in their order, pods side by side.
        by_pod: dict[str, list[Intent]] = {}
        for intent in intents:
            by_pod.setdefault(intent.uid, []).append(intent)
        gate = asyncio.Semaphore(CONCURRENT_WRITES)

        async def send(group: list[Intent]) -> None:
            async with gate:
                pending = _coalesced(group)
                for i, intent in enumerate(pending):
                    if not await self._send(intent):
                        # The rest waits behind it: a newer status must not land first and
                        # then be overwritten by the retried older one.
                        self._retry += pending[i:]
                        break

        async def send_event(event: Obj) -> None:
            async with gate:
                await self._send_event(event)

        async with asyncio.TaskGroup() as tasks:
            for uid, group in by_pod.items():
                tasks.create_task(send(group), name=f"sim-nodes write {uid}")
            for event in events:
                tasks.create_task(send_event(event), name="sim-nodes event")

    async def _send(self, intent: Intent) -> bool:
        """Whether the write is done with (False: a retry may cure its failure)."""
        path = path_of("v1", "pods", intent.namespace, intent.name)
        try:
            if intent.verb == "status":
                patch = {"metadata": {"uid": intent.uid}, "status": intent.body}
                await self.http.patch(f"{path}/status", patch, kind="strategic")
                self.stats["status_patches"] += 1
            else:
                options: Obj = {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {"uid": intent.uid},
                }
                if intent.verb == "delete":
                    options["gracePeriodSeconds"] = 0
                await self.http.delete(path, options)
                self.stats["deletes"] += 1
            self._recovered(intent)
            return True
        except ApiError as exc:
            # 404 / 409: the pod is gone or is another pod of the same name by now. A 429 or
            # 5xx is the server's load, which a retry cures; another refusal would only repeat.
            if exc.status == 429 or exc.status >= 500:
                return self._failed(intent, exc)
            self._failing.pop((intent.uid, intent.verb), None)
            if exc.status not in (404, 409):
                self.stats["write_errors"] += 1
                log.warning(
                    "node simulator: %s of pod %s/%s: %s",
                    intent.verb,
                    intent.namespace,
                    intent.name,
                    exc,
                )
            return True
        except NETWORK_ERRORS as exc:
            return self._failed(intent, exc)

    def _holds(self, intent: Intent) -> bool:
        pod = self.store.find(self.store.rt("pods"), intent.namespace, intent.name)
        return pod is not None and pod["metadata"].get("uid") == intent.uid

    def _failed(self, intent: Intent, exc: Exception) -> bool:
        self.stats["write_errors"] += 1
        key = (intent.uid, intent.verb)
        self._failing[key] = self._failing.get(key, 0) + 1
        if self._failing[key] == 1:
            log.warning(
                "node simulator: %s of pod %s/%s failed, retrying until it is taken: %s",
                intent.verb,
                intent.namespace,
                intent.name,
                exc,
            )
        return False

    def _recovered(self, intent: Intent) -> None:
        failures = self._failing.pop((intent.uid, intent.verb), 0)
        if failures:
            log.warning(
                "node simulator: %s of pod %s/%s taken after %d failure(s)",
                intent.verb,
                intent.namespace,
                intent.name,
                failures,
            )

    async def _send_event(self, event: Obj) -> None:
        meta = event["metadata"]
        key = (meta["namespace"], meta["name"])
        body = {k: v for k, v in event.items() if k not in ("metadata", "apiVersion", "kind")}
        body["source"] = {"component": "kubelet", "host": self._host_of(event)}
        path = path_of("v1", "events", meta["namespace"])
        try:
            if key in self.pushed_events:
                await self.http.patch(f"{path}/{meta['name']}", body)
            else:
                await self.http.create(
                    path,
                    {
                        "apiVersion": "v1",
                        "kind": "Event",
                        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                        **body,
                    },
                )
                self.pushed_events.add(key)
            self.stats["events"] += 1
        except (ApiError, *NETWORK_ERRORS) as exc:
            self.stats["write_errors"] += 1
            log.warning("node simulator: event %s/%s: %s", *key, exc)

    def _host_of(self, event: Obj) -> str:
        involved = event.get("involvedObject") or {}
        pod = self.store.find(
            self.store.rt("pods"), str(involved.get("namespace")), str(involved.get("name"))
        )
        return str(((pod or {}).get("spec") or {}).get("nodeName") or "")

    # --- watches ------------------------------------------------------------------------------

    async def _list_and_watch(self, path: str, handle: Any, resync: Any) -> None:
        """List, then watch from the list's resourceVersion; relist on 410 or a broken stream."""
        delay = 0.2
        while True:
            try:
                listed = await self.http.get(path)
                await resync(listed.get("items") or [])
                version = listed["metadata"]["resourceVersion"]
                while True:
                    async for kind, obj in self.http.watch(path, version):
                        if kind == "BOOKMARK":
                            version = obj["metadata"]["resourceVersion"]
                            continue
                        version = obj["metadata"].get("resourceVersion") or version
                        await handle(kind, obj)
                        delay = 0.2
            except ApiError as exc:
                if exc.status != 410:
                    log.info("node simulator: watch %s: %s", path, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            except (*NETWORK_ERRORS, ValueError) as exc:
                log.info("node simulator: watch %s: %s", path, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _watch_pods(self) -> None:
        rt = self.store.rt("pods")

        async def resync(items: list[Obj]) -> None:
            live = set()
            for pod in items:
                live.add((pod["metadata"]["namespace"], pod["metadata"]["name"]))
                # A list's items carry no apiVersion and kind (kube-apiserver sets them on the
                # list only, for every built-in type), and the mirror's writes need them.
                await handle("MODIFIED", {"apiVersion": "v1", "kind": "Pod", **pod})
            for pod in self.store.list(rt, None):
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                if key not in live:
                    self.store.mirror(rt, None, namespace=key[0], name=key[1])
            self._dirty.set()

        async def handle(kind: str, pod: Obj) -> None:
            meta = pod["metadata"]
            mine = pod.get("spec", {}).get("nodeName") in self.kubelet.names
            if kind == "DELETED" or not mine:
                self.store.mirror(rt, None, namespace=meta["namespace"], name=meta["name"])
                self.chains.pop(meta["uid"], None)
                self.sent.pop(meta["uid"], None)
            else:
                if meta["uid"] not in self.chains:
                    self.chains[meta["uid"]] = await self._chain(pod)
                self._namespace(meta["namespace"])
                self.store.mirror(rt, pod, namespace=meta["namespace"], name=meta["name"])
            self._dirty.set()

        await self._list_and_watch("/api/v1/pods", handle, resync)

    def _namespace(self, name: str) -> None:
        """The mirror's own record of a namespace, which its Event writes need."""
        rt = self.store.rt("namespaces")
        if self.store.find(rt, "", name) is None:
            stub = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "uid": name},
            }
            self.store.mirror(rt, stub, namespace="", name=name)

    async def _watch_refs(self, plural: str) -> None:
        """Secrets and ConfigMaps, keys only: what the kubelet checks a pod's env and volumes
        against (and, for the scripts ConfigMap, the outcome scripts)."""
        rt = self.store.rt(plural)

        def slim(obj: Obj) -> Obj:
            meta = obj["metadata"]
            data = dict.fromkeys(obj.get("data") or {}, "")
            if meta["name"] == SCRIPTS_CONFIGMAP and meta["namespace"] == SCRIPTS_NAMESPACE:
                data = obj.get("data") or {}
            return {
                "apiVersion": "v1",
                "kind": obj.get("kind") or ("Secret" if plural == "secrets" else "ConfigMap"),
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
                "data": data,
            }

        async def handle(kind: str, obj: Obj) -> None:
            meta = obj["metadata"]
            gone = kind == "DELETED"
            self.store.mirror(
                rt, None if gone else slim(obj), namespace=meta["namespace"], name=meta["name"]
            )
            if meta["name"] == SCRIPTS_CONFIGMAP and meta["namespace"] == SCRIPTS_NAMESPACE:
                await self._apply_scripts(None if gone else obj)
            self._dirty.set()

        async def resync(items: list[Obj]) -> None:
            for table_obj in self.store.list(rt, None):
                m = table_obj["metadata"]
                self.store.mirror(rt, None, namespace=m["namespace"], name=m["name"])
            for obj in items:
                await handle("ADDED", obj)

        await self._list_and_watch(f"/api/v1/{plural}", handle, resync)

    async def _apply_scripts(self, configmap: Obj | None) -> None:
        self.book.clear_scripts()
        if configmap is None:
            return
        for key in sorted(configmap.get("data") or {}):
            try:
                entry = json.loads(configmap["data"][key])
                self.book.script(str(entry["selector"]), str(entry["outcome"]))
            except (ValueError, KeyError, TypeError, OutcomeError) as exc:
                log.warning("node simulator: script %s: %s", key, exc)
        # The digest of what was read, for `script_outcome` to wait on; written only when it
        # changed, since the write itself comes back through the watch.
        digest = scripts_digest(configmap.get("data") or {})
        if (configmap["metadata"].get("annotations") or {}).get(APPLIED) != digest:
            path = path_of("v1", "configmaps", SCRIPTS_NAMESPACE, SCRIPTS_CONFIGMAP)
            with contextlib.suppress(ApiError):
                await self.http.patch(path, {"metadata": {"annotations": {APPLIED: digest}}})

    async def _chain(self, pod: Obj) -> list[Obj]:
        """The pod and its controlling owners' metadata, nearest first."""
        chain, current = [pod], pod
        namespace = pod["metadata"]["namespace"]
        while len(chain) < MAX_CHAIN:
            refs = [
                r for r in current["metadata"].get("ownerReferences") or [] if r.get("controller")
            ]
            if not refs:
                break
            ref = refs[0]
            plural = await self.http.plural(str(ref.get("apiVersion")), str(ref.get("kind")))
            if plural is None:
                break
            found = await self.http.metadata(
                path_of(str(ref["apiVersion"]), plural, namespace, str(ref["name"]))
            )
            if found is None:
                break
            found = {
                "apiVersion": ref["apiVersion"],
                "kind": ref["kind"],
                "metadata": found["metadata"],
            }
            chain.append(found)
            current = found
        return chain

    # --- logs ---------------------------------------------------------------------------------

    async def _serve_log(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["pod"]
        container = request.match_info["container"]
        lines = self.store.pod_logs.get((namespace, name, container))
        if lines is None:
            pod = self.store.find(self.store.rt("pods"), namespace, name)
            if pod is None:
                return web.Response(status=404, text=f'pod "{name}" not found')
            # `pkg/kubelet/kubelet_pods.go` validateContainerLogStatus's words.
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            state = next((s.get("state") or {} for s in statuses if s.get("name") == container), {})
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            return web.Response(
                status=400,
                text=f'container "{container}" in pod "{name}" is waiting to start: {reason}',
            )
        tail = request.query.get("tailLines")
        if tail is not None and tail.isdigit():
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        stamps = request.query.get("timestamps") in ("1", "true")
        text = "".join(f"{ts} {line}\n" if stamps else f"{line}\n" for ts, line in lines)
        limit = request.query.get("limitBytes")
        if limit is not None and limit.isdigit():
            text = text.encode()[: int(limit)].decode(errors="ignore")
        return web.Response(text=text, content_type="text/plain")


def _coalesced(group: list[Intent]) -> list[Intent]:
    """A pod's intents with only the last of each run of status writes."""
    out: list[Intent] = []
    for intent in group:
        if out and out[-1].verb == "status" and intent.verb == "status":
            out[-1] = intent
        else:
            out.append(intent)
    return out


def scripts_digest(data: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


async def script_outcome(http: KubeHTTP, key: str, selector: str, outcome: str) -> None:
    """Script the pods of workloads matching `selector` (a later key wins), and wait until the
    node simulator has read it."""
    path = path_of("v1", "configmaps", SCRIPTS_NAMESPACE)
    entry = json.dumps({"selector": selector, "outcome": outcome})
    current = await http.find(f"{path}/{SCRIPTS_CONFIGMAP}")
    if current is None:
        with contextlib.suppress(ApiError):
            await http.create(
                path,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": SCRIPTS_CONFIGMAP, "namespace": SCRIPTS_NAMESPACE},
                },
            )
    written = await http.patch(f"{path}/{SCRIPTS_CONFIGMAP}", {"data": {key: entry}})
    digest = scripts_digest(written.get("data") or {})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = await http.get(f"{path}/{SCRIPTS_CONFIGMAP}")
        if (got["metadata"].get("annotations") or {}).get(APPLIED) == digest:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the node simulator did not read the outcome script within 30 s")
