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
from typing import Any

from aiohttp import web

from launch_agent.sandbox.faults import Faults, RequestLog
from launch_agent.sandbox.kube import discovery, errors
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.flowcontrol import flow_of, long_running
from launch_agent.sandbox.kube.patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from launch_agent.sandbox.kube.resources import ResourceType
from launch_agent.sandbox.kube.responses import (
    FAULT,
    ServerSettings,
    Target,
    drop,
    dry_run,
    error_response,
    json_response,
    listed,
    out,
    truthy,
)
from launch_agent.sandbox.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from launch_agent.sandbox.kube.store import Obj, Store
from launch_agent.sandbox.kube.streams import serve_pod_log, serve_watch
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
# Objects kube-apiserver returns from an immediate DELETE (others answer a Success Status).
RETURNS_DELETED = frozenset({"pods", "namespaces"})


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
        return target.key(request.method, truthy(request.query.get("watch"))), target

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
                return drop(request)
            refused = self._gate(request, key)
            if refused is not None:
                status = refused.status
                return refused
            rule = self.faults.pick(key, request.path)
            if rule is not None:
                request[FAULT] = rule
            await self.faults.delay_for(rule)
            if rule is not None and rule.drop and not key.startswith("WATCH"):
                status = 0
                return drop(request)
            if (
                rule is not None
                and rule.status
                and not (key.startswith("WATCH") and rule.status == 410)
            ):
                code = rule.status
                raise ApiError(code, REASONS.get(code, "InternalError"), rule.message)
            response = await handler(request)
            status = response.status
            self._classified(response)
            return response
        except ApiError as exc:
            status = exc.code
            return error_response(exc)
        except (SelectorError, PatchError) as exc:
            status = 400
            return error_response(errors.bad_request(str(exc)))
        except json.JSONDecodeError as exc:
            status = 400
            return error_response(errors.bad_request(f"json parse error: {exc}"))
        except ValueError as exc:  # a malformed number in the query (limit, tailLines, ...)
            status = 400
            return error_response(errors.bad_request(f"invalid query parameter: {exc}"))
        finally:
            if task is not None:
                self.inflight.discard(task)
            self.log.record(request.method, request.path_qs, key, status, time.monotonic() - start)

    def _gate(self, request: web.Request, key: str) -> web.Response | None:
        """Authentication, then priority and fairness, in kube-apiserver's filter order: the
        429 of a client over its rate (`flowcontrol.py`), or None to go on."""
        tokens = self.settings.tokens
        if tokens is not None:
            # kube-apiserver's answer to a missing, unknown or expired bearer token.
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or token.strip() not in tokens:
                raise ApiError(401, "Unauthorized", "Unauthorized")
        flow_control = self.settings.flow_control
        if flow_control is None or long_running(key) or flow_control.admit(flow_of(request)):
            return None
        return flow_control.too_many_requests()

    def _classified(self, response: web.StreamResponse) -> None:
        """Served requests carry APF's classification too (a stream's headers are sent)."""
        flow_control = self.settings.flow_control
        if flow_control is not None and not response.prepared:
            flow_control.classify(response)

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
            if truthy(request.query.get("watch")):
                return await serve_watch(self.store, self.settings, self.stopping, request, t)
            return self._list(request, t)
        if m == "GET" and t.sub == "log":
            return serve_pod_log(self.store, request, t)
        if m == "GET":
            return json_response(out(t.rt, self.store.get(t.rt, t.namespace or "", str(t.name))))
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
            return json_response(discovery.VERSION)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/api":
            return json_response(discovery.core_versions())
        if path == "/api/v1":
            return json_response(discovery.resource_list(registry, "", "v1"))
        if path == "/apis":
            return json_response(discovery.group_list(registry))
        if path == "/openapi/v3":
            return json_response(discovery.openapi_root(registry))
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
        return json_response(body)

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
        return json_response(
            {
                "kind": f"{t.rt.kind}List",
                "apiVersion": t.rt.api_version,
                "metadata": metadata,
                "items": [listed(t.rt, out(t.rt, o)) for o in page],
            }
        )

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        body = await self._obj_body(request)
        dry = dry_run(request)
        await self._strict(request, t.rt, body)
        body.pop("status", None) if t.rt.has_status else None
        # The body was parsed for this request alone: the store may keep it as it is.
        created = self.store.create(t.rt, t.namespace or "", body, dry_run=dry, owned=True)
        return json_response(out(t.rt, created), 201)

    async def _replace(self, request: web.Request, t: Target) -> web.Response:
        body = await self._obj_body(request)
        dry = dry_run(request)
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
        return json_response(out(t.rt, updated))

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
        dry = dry_run(request)
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
        return json_response(out(t.rt, updated))

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        options = (await self._body(request)) or {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        dry = dry_run(request, options)
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
                deleted.append(out(t.rt, gone))
            return json_response(
                {
                    "kind": f"{t.rt.kind}List",
                    "apiVersion": t.rt.api_version,
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": [listed(t.rt, o) for o in deleted],
                }
            )
        obj, code = self.store.delete(
            t.rt,
            ns,
            t.name,
            propagation=policy,
            preconditions=options.get("preconditions"),
            dry_run=dry,
            grace_period=_grace(request, options),
        )
        if code == 202 or t.rt.is_custom or t.rt.plural in RETURNS_DELETED:
            return json_response(out(t.rt, obj), code)
        details = {"name": t.name, "kind": t.rt.plural, "uid": obj["metadata"]["uid"]}
        if t.rt.group:
            details["group"] = t.rt.group
        return json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )


def _grace(request: web.Request, options: dict[str, Any]) -> int | None:
    """DeleteOptions' `gracePeriodSeconds` (query or body); 400 if not an integer."""
    raw = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise errors.bad_request(f"invalid gracePeriodSeconds {raw!r}") from None
