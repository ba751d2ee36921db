"""`/healthz`, `/readyz`, `/metrics` and the status page (`/`, `/api/status`) on one port.

Health means "made progress recently", not "the process is up" (Prefect's worker does the
same): `/readyz` answers 200 only while W&B was polled successfully within the last N poll
intervals, every informer's watch is connected, and the agent is not shutting down. `/healthz`
answers from the event loop itself, so a wedged loop fails the liveness probe.

The status page and its JSON need `Authorization: Bearer <status.token>` when a token is set;
the probes and `/metrics` stay open (kubelet and Prometheus carry no token).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.status import page

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StatusView(Protocol):
    """What the status page reads (`runtime/status/source.py`)."""

    def snapshot(self) -> dict[str, Any]: ...

    def export(self) -> None: ...


@dataclass
class Readiness:
    """What `/readyz` checks; updated by the poller, the informers and the supervisor."""

    poll_interval_seconds: float
    intervals_allowed: int = 6
    started: float = field(default_factory=monotonic)
    last_poll_ok: float | None = None
    shutting_down: bool = False
    watches: dict[str, bool] = field(default_factory=dict)
    clock: Clock = field(default=monotonic, repr=False)  # the agent's one clock
    # "single" (no leader election), "leader" or "standby" (runtime/leader.py). A standby
    # does not poll W&B, so the poll check is the leader's alone; a standby is ready.
    role: str = "single"
    # The Lease holder last seen ("" without leader election: this replica leads alone).
    leader: str = ""

    def polled(self) -> None:
        self.last_poll_ok = self.clock()

    def watch(self, key: str, healthy: bool) -> None:
        self.watches[key] = healthy

    def problems(self, now: float | None = None) -> list[str]:
        now = self.clock() if now is None else now
        budget = self.poll_interval_seconds * self.intervals_allowed
        problems = []
        if self.shutting_down:
            problems.append("shutting down")
        if self.role == "standby":
            pass
        elif self.last_poll_ok is None:
            problems.append("W&B not polled successfully yet")
        elif now - self.last_poll_ok > budget:
            problems.append(f"W&B not polled successfully for {now - self.last_poll_ok:.0f}s")
        problems.extend(f"watch {key} disconnected" for key, ok in self.watches.items() if not ok)
        return problems


# The token through the Kubernetes API server's service proxy: kube-apiserver deletes the
# `Authorization` header once it has authenticated the caller (k8s.io/apiserver,
# pkg/endpoints/filters/authentication.go, `WithAuthentication`), so it never reaches the pod.
TOKEN_HEADER = "X-Launch-Agent-Status-Token"


def authorized(request: web.Request, token: str | None) -> bool:
    """The request carries `Authorization: Bearer <token>` or the token in `TOKEN_HEADER`
    (anything goes when no token is set)."""
    if not token:
        return True
    scheme, _, bearer = request.headers.get("Authorization", "").partition(" ")
    given = bearer.strip() if scheme.lower() == "bearer" else ""
    given = given or request.headers.get(TOKEN_HEADER, "").strip()
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def _guarded(token: str | None, handler: Handler) -> Handler:
    async def guarded(request: web.Request) -> web.StreamResponse:
        if not authorized(request, token):
            return web.Response(
                status=401,
                text="a bearer token is required (status.token)\n",
                headers={"WWW-Authenticate": 'Bearer realm="launch-agent status"'},
            )
        return await handler(request)

    return guarded


# The page embeds no script and loads nothing: a policy that forbids both costs nothing and
# limits what an escaping bug could do.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


def health_app(
    readiness: Readiness,
    metrics: Metrics,
    status: StatusView | None = None,
    token: str | None = None,
) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problems = readiness.problems()
        if problems:
            text = "".join(f"{p}\n" for p in problems) + f"role: {readiness.role}\n"
            return web.Response(status=503, text=text)
        return web.Response(text=f"ready\nrole: {readiness.role}\n")

    async def metrics_handler(_: web.Request) -> web.Response:
        if status is not None:
            status.export()
        return web.Response(
            body=metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    if status is not None:
        view = status

        async def status_page(_: web.Request) -> web.Response:
            return web.Response(
                text=page.render(view.snapshot()),
                content_type="text/html",
                charset="utf-8",
                headers=PAGE_HEADERS,
            )

        async def status_api(_: web.Request) -> web.Response:
            return web.Response(
                text=json.dumps(view.snapshot(), indent=1),
                content_type="application/json",
                headers={"Cache-Control": "no-store"},
            )

        app.router.add_get("/", _guarded(token, status_page))
        app.router.add_get("/api/status", _guarded(token, status_api))
    return app


class HealthServer:
    """The probe and metrics endpoint, started and stopped as an async context manager."""

    def __init__(
        self,
        readiness: Readiness,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        status: StatusView | None = None,
        token: str | None = None,
    ) -> None:
        self._runner = web.AppRunner(health_app(readiness, metrics, status, token), access_log=None)
        self._host = host
        self._port = port
        self.port = port

    async def __aenter__(self) -> HealthServer:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._runner.cleanup()
