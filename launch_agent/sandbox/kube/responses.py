"""What the API server's request handlers share: the parsed target, settings and responses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import errors
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.flowcontrol import FlowControl
from launch_agent.sandbox.kube.resources import ResourceType
from launch_agent.sandbox.kube.store import Obj

FAULT = web.RequestKey("fault", FaultRule)


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
    # Bearer tokens the server accepts; None: no authentication (the default).
    tokens: frozenset[str] | None = None
    # Priority and fairness (`flowcontrol.py`); None: every request is served (the default).
    flow_control: FlowControl | None = None


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def error_response(exc: ApiError) -> web.Response:
    response = json_response(exc.status(), exc.code)
    if exc.code == 429:
        response.headers["Retry-After"] = "1"
    return response


def out(rt: ResourceType, obj: Obj) -> Obj:
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return {**obj, "apiVersion": rt.api_version}


def listed(rt: ResourceType, obj: Obj) -> Obj:
    """An item as a list serves it. kube-apiserver encodes a built-in type's list from Go
    structs whose items' TypeMeta is empty (`omitempty`), so they carry no apiVersion or kind;
    a custom resource's items are unstructured and keep theirs. A client that reads `kind` off
    a listed Pod breaks on a real cluster and must not pass here."""
    if rt.is_custom:
        return obj
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def dry_run(request: web.Request, body: Obj | None = None) -> bool:
    values = request.query.getall("dryRun", []) + list((body or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'unsupported dry run value "{value}": only "All" is valid')
    return bool(values)


def drop(request: web.Request) -> web.Response:
    """Abort the connection without an answer (the client sees a reset or a cut stream)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)
