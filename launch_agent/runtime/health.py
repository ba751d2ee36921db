"""`/healthz`, `/readyz` and `/metrics` on one port.

Health means "made progress recently", not "the process is up" (Prefect's worker does the
same): `/readyz` answers 200 only while W&B was polled successfully within the last N poll
intervals, every informer's watch is connected, and the agent is not shutting down. `/healthz`
answers from the event loop itself, so a wedged loop fails the liveness probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.metrics import Metrics


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


def health_app(readiness: Readiness, metrics: Metrics) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problems = readiness.problems()
        if problems:
            text = "".join(f"{p}\n" for p in problems) + f"role: {readiness.role}\n"
            return web.Response(status=503, text=text)
        return web.Response(text=f"ready\nrole: {readiness.role}\n")

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(
            body=metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app


class HealthServer:
    """The probe and metrics endpoint, started and stopped as an async context manager."""

    def __init__(self, readiness: Readiness, metrics: Metrics, host: str, port: int) -> None:
        self._runner = web.AppRunner(health_app(readiness, metrics), access_log=None)
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
