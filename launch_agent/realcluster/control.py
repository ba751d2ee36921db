"""A loopback control endpoint of `launch-agent cluster up`: stop, start or restart a cluster's
API server from another process (the fault tests, `bench chaos --cluster real --workers N`).

The clusters are children of the `cluster up` process, so only it can stop and start them; this
small HTTP server lets the process that runs a test or a bench ask it to. It listens on
127.0.0.1 only and takes a random bearer token, both written to `cluster.env`
(`LAUNCH_CLUSTER_CONTROL`, `LAUNCH_CLUSTER_CONTROL_TOKEN`).

    POST /clusters/{name}/apiserver/stop      SIGTERM, wait until it exited
    POST /clusters/{name}/apiserver/start     start it again on the same port and etcd
    POST /clusters/{name}/apiserver/restart   both (`ControlPlane.restart_apiserver`)
    GET  /clusters                            {"clusters": {name: {"apiserver": "running"}}}

`name` is `manager`, `worker-1` ... (or `cluster` for a single cluster). Each answer is JSON;
an unknown cluster or action is a 404, a wrong token a 401.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType

from aiohttp import web

from launch_agent.realcluster.cluster import RealCluster

ACTIONS = ("stop", "start", "restart")


class ControlServer:
    def __init__(self, clusters: Mapping[str, RealCluster], *, token: str | None = None) -> None:
        self.clusters = dict(clusters)
        self.token = token or secrets.token_hex(16)
        self.url = ""
        self._runner: web.AppRunner | None = None
        # One action at a time per cluster: a stop racing a start would leave either.
        self._locks = {name: asyncio.Lock() for name in self.clusters}

    async def __aenter__(self) -> ControlServer:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/clusters", self._list)
        app.router.add_post("/clusters/{name}/apiserver/{action}", self._apiserver)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given, f"Bearer {self.token}"):
            return web.json_response({"error": "a bearer token is required"}, status=401)
        return await handler(request)

    def _state(self, cluster: RealCluster) -> str:
        return apiserver_state(cluster)

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"clusters": {n: {"apiserver": self._state(c)} for n, c in self.clusters.items()}}
        )

    async def _apiserver(self, request: web.Request) -> web.Response:
        name, action = request.match_info["name"], request.match_info["action"]
        cluster = self.clusters.get(name)
        if cluster is None or action not in ACTIONS:
            return web.json_response(
                {"error": f"no cluster {name!r} or action {action!r}"}, status=404
            )
        async with self._locks[name]:
            await act(cluster, action)
        return web.json_response({"cluster": name, "apiserver": self._state(cluster)})


def apiserver_state(cluster: RealCluster) -> str:
    child = cluster.control_plane.children.get("kube-apiserver")
    return "running" if child is not None and child.running else "stopped"


async def act(cluster: RealCluster, action: str) -> None:
    """One of `ACTIONS` on `cluster`'s API server, for a process that runs the clusters itself
    (`cluster up`'s endpoint, `bench chaos --cluster real`); a start of a running one is none."""
    plane = cluster.control_plane
    if action == "stop":
        await plane.children["kube-apiserver"].stop()
    elif action == "start":
        if apiserver_state(cluster) == "stopped":
            await plane.start_apiserver()
    elif action == "restart":
        await plane.restart_apiserver()
    else:
        raise ValueError(f"no API server action {action!r}: one of {', '.join(ACTIONS)}")
