"""The aiohttp application: Kubernetes REST paths onto the store, plus faults and accounting.

One catch-all route parses `/api/v1/...` and `/apis/{group}/{version}/...` into (resource,
namespace, name, subresource) and dispatches on the HTTP verb, the way kube-apiserver's
generic registry does. Every request gets a route key such as `POST jobs`, `LIST pods`,
`WATCH pytorchjobs`, `PATCH jobs/status` or `GET pods/log`; the fault script is consulted with
that key before the handler runs, and the request log counts it afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from launch_agent.sandbox.faults import FaultRule, Faults, RequestLog
from launch_agent.sandbox.kube import discovery, errors
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from launch_agent.sandbox.kube.resources import ResourceType
from launch_agent.sandbox.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from launch_agent.sandbox.kube.store import Obj, Store
from launch_agent.sandbox.kube.validation import StrictValidators

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
}
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
FAULT = web.RequestKey("fault", FaultRule)
# Objects kube-apiserver returns from an immediate DELETE (others answer a Success Status).
RETURNS_DELETED = frozenset({"pods", "namespaces"})


@dataclass
class Target:
    """A parsed resource path."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None

    def key(self, method: str, watch: bool) -> str:
        verb = method
        if method == "GET" and self.name is None:
            verb = "WATCH" if watch else "LIST"
        elif method == "DELETE" and self.name is None:
            verb = "DELETECOLLECTION"
        return f"{verb} {self.rt.plural}" + (f"/{self.sub}" if self.sub else "")


@dataclass
class ServerSettings:
    bookmark_interval: float = 5.0
    default_watch_timeout: float = 1800.0
    watch_max_pending: int = 10_000


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def _error(exc: ApiError) -> web.Response:
    response = _json(exc.status(), exc.code)
    if exc.code == 429:
        response.headers["Retry-After"] = "1"
    return response


def _out(rt: ResourceType, obj: Obj) -> Obj:
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return {**obj, "apiVersion": rt.api_version}


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _dry_run(request: web.Request, body: Obj | None = None) -> bool:
    values = request.query.getall("dryRun", []) + list((body or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'unsupported dry run value "{value}": only "All" is valid')
    return bool(values)


class KubeApp:
    """The request handlers; `KubeApiServer` owns the listening socket around it."""

    def __init__(
        self, store: Store, faults: Faults, log: RequestLog, settings: ServerSettings
    ) -> None:
        self.store, self.faults, self.log, self.settings = store, faults, log, settings
        self.validators = StrictValidators()
        self.stopping = asyncio.Event()
        # Handlers still running (a fault delay, a watch) when the server stops; a client
        # that went away does not end them, so `KubeApiServer.close` cancels what is left.
        self.inflight: set[asyncio.Task[Any]] = set()
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    # --- plumbing -----------------------------------------------------------------------------

    def _target(self, path: str) -> Target | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        rt = self.store.registry.get(group, version, rest[0])
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespace is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return Target(rt, namespace, rest[1] if len(rest) >= 2 else None, sub)

    def route_key(self, request: web.Request) -> tuple[str, Target | None]:
        try:
            target = self._target(request.path)
        except ApiError:
            return f"{request.method} {request.path}", None
        if target is None:
            return f"{request.method} {request.path}", None
        return target.key(request.method, _truthy(request.query.get("watch"))), target

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        start = time.monotonic()
        key, _ = self.route_key(request)
        status = 500
        task = asyncio.current_task()
        if task is not None:
            self.inflight.add(task)
        try:
            if self.faults.refuse:
                return _drop(request)
            rule = self.faults.pick(key)
            if rule is not None:
                request[FAULT] = rule
            await self.faults.delay_for(rule)
            if rule is not None and rule.drop and not key.startswith("WATCH"):
                status = 0
                return _drop(request)
            if (
                rule is not None
                and rule.status
                and not (key.startswith("WATCH") and rule.status == 410)
            ):
                code = rule.status
                raise ApiError(code, REASONS.get(code, "InternalError"), rule.message)
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.code
            return _error(exc)
        except (SelectorError, PatchError) as exc:
            status = 400
            return _error(errors.bad_request(str(exc)))
        except json.JSONDecodeError as exc:
            status = 400
            return _error(errors.bad_request(f"json parse error: {exc}"))
        except ValueError as exc:  # a malformed number in the query (limit, tailLines, ...)
            status = 400
            return _error(errors.bad_request(f"invalid query parameter: {exc}"))
        finally:
            if task is not None:
                self.inflight.discard(task)
            self.log.record(request.method, request.path_qs, key, status, time.monotonic() - start)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        return json.loads(raw)

    async def _obj_body(self, request: web.Request) -> Obj:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        return body

    async def _strict(self, request: web.Request, rt: ResourceType, obj: Obj) -> None:
        if request.query.get("fieldValidation") == "Strict":
            await self.validators.prepare(rt)
            self.validators.check(rt, obj)

    # --- dispatch -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if request.method == "GET":
            static = self._discovery(path)
            if static is not None:
                return static
        target = self._target(path)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        m, t = request.method, target
        if t.namespace is None and t.rt.namespaced and m in ("POST", "PUT", "PATCH"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if t.namespace is None and t.rt.namespaced and t.name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if m == "GET" and t.name is None:
            if _truthy(request.query.get("watch")):
                return await self._watch(request, t)
            return self._list(request, t)
        if m == "GET" and t.sub == "log":
            return self._pod_log(request, t)
        if m == "GET":
            return _json(_out(t.rt, self.store.get(t.rt, t.namespace or "", str(t.name))))
        if m == "POST" and t.name is None:
            return await self._create(request, t)
        if m == "PUT" and t.name is not None:
            return await self._replace(request, t)
        if m == "PATCH" and t.name is not None:
            return await self._patch(request, t)
        if m == "DELETE":
            return await self._delete(request, t)
        raise ApiError(405, "MethodNotAllowed", f"{m} is not supported on {request.path}")

    def _discovery(self, path: str) -> web.Response | None:
        registry = self.store.registry
        if path == "/version":
            return _json(discovery.VERSION)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/api":
            return _json(discovery.core_versions())
        if path == "/api/v1":
            return _json(discovery.resource_list(registry, "", "v1"))
        if path == "/apis":
            return _json(discovery.group_list(registry))
        if path == "/openapi/v3":
            return _json(discovery.openapi_root(registry))
        parts = path.split("/")[1:]
        if parts[:2] == ["openapi", "v3"] and len(parts) in (4, 5):
            group, version = (parts[3], parts[4]) if len(parts) == 5 else ("", parts[3])
            body = discovery.openapi_group_version(registry, group, version)
        elif len(parts) == 2 and parts[0] == "apis":
            body = discovery.group(registry, parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            body = discovery.resource_list(registry, parts[1], parts[2])
        else:
            return None
        if body is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _json(body)

    # --- verbs --------------------------------------------------------------------------------

    def _list(self, request: web.Request, t: Target) -> web.Response:
        labels_q, fields_q = request.query.get("labelSelector"), request.query.get("fieldSelector")
        labels = parse_label_selector(labels_q)
        fields = parse_field_selector(fields_q, t.rt.plural)
        items = self.store.list(t.rt, t.namespace, labels, fields)
        rv = str(self.store.rv)
        start = 0
        if token := request.query.get("continue"):
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
                rv, after = str(state["rv"]), tuple(state["after"])
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: malformed token") from None
            if int(rv) < self.store.log(t.rt.storage).floor:
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list"
                    " result. You can start a new list without the continue parameter."
                )
            keys = [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items]
            start = next((i for i, k in enumerate(keys) if k > after), len(keys))
        limit = int(request.query.get("limit") or 0)
        page = items[start : start + limit] if limit > 0 else items[start:]
        metadata: dict[str, Any] = {"resourceVersion": rv}
        remaining = len(items) - start - len(page)
        if remaining > 0:
            last = page[-1]["metadata"]
            state = {"rv": int(rv), "after": [last.get("namespace", ""), last["name"]]}
            metadata["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
            if not labels_q and not fields_q:
                metadata["remainingItemCount"] = remaining
        return _json(
            {
                "kind": f"{t.rt.kind}List",
                "apiVersion": t.rt.api_version,
                "metadata": metadata,
                "items": [_out(t.rt, o) for o in page],
            }
        )

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), t.rt.plural)
        rv_q = request.query.get("resourceVersion") or "0"
        try:
            since = None if rv_q == "0" else int(rv_q)
        except ValueError:
            raise errors.bad_request(f"invalid resource version {rv_q!r}") from None
        timeout = float(request.query.get("timeoutSeconds") or self.settings.default_watch_timeout)
        bookmarks = _truthy(request.query.get("allowWatchBookmarks"))
        rule: FaultRule | None = request.get(FAULT)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        if rule is not None and rule.status == 410:
            await response.prepare(request)
            await self._send(
                response, "ERROR", errors.gone(rule.message or "injected 410").status()
            )
            await response.write_eof()
            return response
        try:
            watcher = self.store.watch(
                t.rt, t.namespace, labels, fields, since, self.settings.watch_max_pending
            )
        except ApiError as exc:
            if exc.code != 410:
                raise
            # A compacted resourceVersion is an ERROR event on a 200 stream, as on a real server.
            await response.prepare(request)
            await self._send(response, "ERROR", exc.status())
            await response.write_eof()
            return response
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + self.settings.bookmark_interval
        sent = 0
        try:
            await response.prepare(request)
            cut = rule is not None and (rule.drop or rule.stall)
            while not self.stopping.is_set():
                if cut and rule is not None and sent >= rule.after_events:
                    if rule.drop:
                        return _drop(request)
                    await self.stopping.wait()  # stalled: an open stream that says nothing
                    break
                for kind, obj in watcher.take():
                    if cut and rule is not None and sent >= rule.after_events:
                        break  # the rest is lost, as on a cut connection
                    await self._send(response, kind, _out(t.rt, obj))
                    sent += 1
                if cut and rule is not None and sent >= rule.after_events:
                    continue
                if watcher.closed:
                    break
                now = loop.time()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    meta = {"resourceVersion": str(self.store.rv)}
                    await self._send(
                        response,
                        "BOOKMARK",
                        {"kind": t.rt.kind, "apiVersion": t.rt.api_version, "metadata": meta},
                    )
                    next_bookmark = now + self.settings.bookmark_interval
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
            self.store.unwatch(watcher)
        return response

    async def _send(self, response: web.StreamResponse, kind: str, obj: Obj) -> None:
        await response.write(
            json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        )

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        body = await self._obj_body(request)
        dry = _dry_run(request)
        await self._strict(request, t.rt, body)
        body.pop("status", None) if t.rt.has_status else None
        # The body was parsed for this request alone: the store may keep it as it is.
        created = self.store.create(t.rt, t.namespace or "", body, dry_run=dry, owned=True)
        return _json(_out(t.rt, created), 201)

    async def _replace(self, request: web.Request, t: Target) -> web.Response:
        body = await self._obj_body(request)
        dry = _dry_run(request)
        await self._strict(request, t.rt, body)
        updated = self.store.update(
            t.rt,
            t.namespace or "",
            str(t.name),
            body,
            subresource=t.sub,
            dry_run=dry,
            require_rv=not t.rt.is_custom,
        )
        return _json(_out(t.rt, updated))

    async def _patch(self, request: web.Request, t: Target) -> web.Response:
        content_type = request.content_type
        kind = PATCH_TYPES.get(content_type)
        if kind is None or (kind == "strategic" and t.rt.is_custom):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include:"
                " application/json-patch+json, application/merge-patch+json"
                + ("" if t.rt.is_custom else ", application/strategic-merge-patch+json"),
            )
        patch = await self._body(request)
        dry = _dry_run(request)
        current = self.store.get(t.rt, t.namespace or "", str(t.name))
        if kind == "json" and not isinstance(patch, list):
            # kube-apiserver cannot even decode it: 400, where a failing operation is a 422.
            raise errors.bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        try:
            if kind == "json":
                new = json_patch(current, patch)
            elif kind == "merge":
                new = merge_patch(current, patch)
            else:
                new = strategic_merge_patch(current, patch)
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        if not isinstance(new, dict):
            raise errors.bad_request("the patch result is not an object")
        await self._strict(request, t.rt, new)
        updated = self.store.update(
            t.rt, t.namespace or "", str(t.name), new, subresource=t.sub, dry_run=dry
        )
        return _json(_out(t.rt, updated))

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        options = (await self._body(request)) or {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        dry = _dry_run(request, options)
        ns = t.namespace or ""
        if t.name is None:
            labels = parse_label_selector(request.query.get("labelSelector"))
            fields = parse_field_selector(request.query.get("fieldSelector"), t.rt.plural)
            deleted = []
            for obj in self.store.list(t.rt, t.namespace, labels, fields):
                meta = obj["metadata"]
                if self.store.find(t.rt, meta.get("namespace", ""), meta["name"]) is None:
                    continue  # already collected as a dependent of an earlier item
                gone, _ = self.store.delete(
                    t.rt, meta.get("namespace", ""), meta["name"], propagation=policy, dry_run=dry
                )
                deleted.append(_out(t.rt, gone))
            return _json(
                {
                    "kind": f"{t.rt.kind}List",
                    "apiVersion": t.rt.api_version,
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": deleted,
                }
            )
        obj, code = self.store.delete(
            t.rt,
            ns,
            t.name,
            propagation=policy,
            preconditions=options.get("preconditions"),
            dry_run=dry,
        )
        if code == 202 or t.rt.is_custom or t.rt.plural in RETURNS_DELETED:
            return _json(_out(t.rt, obj), code)
        details = {"name": t.name, "kind": t.rt.plural, "uid": obj["metadata"]["uid"]}
        if t.rt.group:
            details["group"] = t.rt.group
        return _json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )

    def _pod_log(self, request: web.Request, t: Target) -> web.Response:
        pod = self.store.get(t.rt, t.namespace or "", str(t.name))
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
        lines = self.store.pod_logs.get((t.namespace or "", str(t.name), container))
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
        stamps = _truthy(request.query.get("timestamps"))
        text = "".join(f"{ts} {line}\n" if stamps else f"{line}\n" for ts, line in lines)
        if limit := request.query.get("limitBytes"):
            text = text.encode()[: int(limit)].decode(errors="ignore")
        return web.Response(text=text, content_type="text/plain")


def _drop(request: web.Request) -> web.Response:
    """Abort the connection without an answer (the client sees a reset or a cut stream)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)
