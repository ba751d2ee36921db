"""Streaming reads: watch streams and pod logs.

A watch registers its `Watcher` with the store and reads the replay in the same event-loop
step, so no event falls between replay and live events; it then sends batches as the store
wakes it, BOOKMARKs when asked (only with nothing pending, so the bookmark's resourceVersion
never runs ahead of what the client has seen; never for Events, which kube-apiserver watches
straight from etcd), and ends at `timeoutSeconds`, when the watcher
is closed (too slow a client, a dropped resource, the server stopping) or as a fault rule says
(`status=410`: an ERROR event; `drop`: the connection is cut; `stall`: silence).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import errors
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.responses import FAULT, ServerSettings, Target, drop, out, truthy
from launch_agent.sandbox.kube.selectors import parse_field_selector, parse_label_selector
from launch_agent.sandbox.kube.store import Obj, Store

# Resources kube-apiserver keeps no watch cache for (kubernetes
# `pkg/kubeapiserver/default_storage_factory_builder.go`, `DefaultWatchCacheSizes`): their
# watches are etcd's own, which send no BOOKMARK (`staging/src/k8s.io/apiserver/pkg/storage/
# etcd3/watcher.go` asks etcd for progress notifications only for the watch cache's own watch),
# so a client's resourceVersion moves only with the events it receives.
UNCACHED = frozenset({"events", "events.k8s.io/events"})


async def serve_watch(
    store: Store,
    settings: ServerSettings,
    stopping: asyncio.Event,
    request: web.Request,
    t: Target,
) -> web.StreamResponse:
    """A watch stream (see the module docstring)."""
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(request.query.get("fieldSelector"), t.rt.plural)
    rv_q = request.query.get("resourceVersion") or "0"
    try:
        since = None if rv_q == "0" else int(rv_q)
    except ValueError:
        raise errors.bad_request(f"invalid resource version {rv_q!r}") from None
    timeout = float(request.query.get("timeoutSeconds") or settings.default_watch_timeout)
    bookmarks = truthy(request.query.get("allowWatchBookmarks")) and t.rt.storage not in UNCACHED
    rule: FaultRule | None = request.get(FAULT)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    if rule is not None and rule.status == 410:
        await response.prepare(request)
        await _send(response, "ERROR", errors.gone(rule.message or "injected 410").status())
        await response.write_eof()
        return response
    try:
        watcher = store.watch(t.rt, t.namespace, labels, fields, since, settings.watch_max_pending)
    except ApiError as exc:
        if exc.code != 410:
            raise
        # A compacted resourceVersion is an ERROR event on a 200 stream, as on a real server.
        await response.prepare(request)
        await _send(response, "ERROR", exc.status())
        await response.write_eof()
        return response
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = loop.time() + settings.bookmark_interval
    sent = 0
    try:
        await response.prepare(request)
        cut = rule is not None and (rule.drop or rule.stall)
        while not stopping.is_set():
            if cut and rule is not None and sent >= rule.after_events:
                if rule.drop:
                    return drop(request)
                await stopping.wait()  # stalled: an open stream that says nothing
                break
            for kind, obj in watcher.take():
                if cut and rule is not None and sent >= rule.after_events:
                    break  # the rest is lost, as on a cut connection
                await _send(response, kind, out(t.rt, obj))
                sent += 1
            if cut and rule is not None and sent >= rule.after_events:
                continue
            if watcher.closed:
                break
            now = loop.time()
            if now >= deadline:
                break
            if bookmarks and now >= next_bookmark:
                meta = {"resourceVersion": str(store.rv)}
                await _send(
                    response,
                    "BOOKMARK",
                    {"kind": t.rt.kind, "apiVersion": t.rt.api_version, "metadata": meta},
                )
                next_bookmark = now + settings.bookmark_interval
            wait = deadline - now
            if bookmarks:
                wait = min(wait, max(next_bookmark - now, 0))
            try:
                async with asyncio.timeout(wait):
                    await watcher.wake.wait()
            except TimeoutError:
                pass
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away; nothing to tell it
    finally:
        store.unwatch(watcher)
    return response


async def _send(response: web.StreamResponse, kind: str, obj: Obj) -> None:
    await response.write(
        json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
    )


def serve_pod_log(store: Store, request: web.Request, t: Target) -> web.Response:
    """`pods/{name}/log`: what the simulated kubelet recorded, as kubelet would serve it."""
    pod = store.get(t.rt, t.namespace or "", str(t.name))
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    init = [c["name"] for c in pod["spec"].get("initContainers") or []]
    container = request.query.get("container")
    if container is None:
        if len(names) != 1:
            raise errors.bad_request(
                f"a container name must be specified for pod {t.name},"
                f" choose one of: [{' '.join(names)}]"
            )
        container = names[0]
    if container not in names + init:
        raise errors.bad_request(f"container {container} is not valid for pod {t.name}")
    lines = store.pod_logs.get((t.namespace or "", str(t.name), container))
    if lines is None:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = next((s.get("state") or {} for s in statuses if s.get("name") == container), {})
        reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
        raise errors.bad_request(
            f'container "{container}" in pod "{t.name}" is waiting to start: {reason}'
        )
    tail = request.query.get("tailLines")
    if tail is not None:
        lines = lines[-int(tail) :] if int(tail) > 0 else []
    stamps = truthy(request.query.get("timestamps"))
    text = "".join(f"{ts} {line}\n" if stamps else f"{line}\n" for ts, line in lines)
    if limit := request.query.get("limitBytes"):
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return web.Response(text=text, content_type="text/plain")
