"""`KubeApiServer`: the loopback Kubernetes API server's lifecycle and Python test hooks.

It owns the listening socket (an aiohttp `AppRunner` and `TCPSite`), the `Store`, the fault
script and the request log. `refuse_connections()` closes the listening socket for real, so a
client gets ECONNREFUSED rather than an HTTP error; `accept_connections()` reopens it on the
same port. CRD files are parsed in an executor thread (the upstream CRDs are up to 1.4 MB of
YAML, seconds of CPU) and cached per path and mtime for the life of the process, so a test
suite pays for each file once. libyaml holds the GIL while it composes a document, so even in
a thread a first parse stalls the event loop for a while: tests warm the cache with
`load_crd_documents` before their loop starts.
"""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from launch_agent.sandbox.faults import Faults, RequestLog
from launch_agent.sandbox.kube.flowcontrol import FlowControl
from launch_agent.sandbox.kube.objects import Objects
from launch_agent.sandbox.kube.resources import CrdError, ResourceType
from launch_agent.sandbox.kube.responses import ServerSettings
from launch_agent.sandbox.kube.server import KubeApp
from launch_agent.sandbox.kube.store import Store, cel_rules

_CRD_CACHE: dict[tuple[str, float], list[dict[str, Any]]] = {}
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_crd_documents(path: str | Path) -> list[dict[str, Any]]:
    """The YAML documents of a CRD file, parsed once per process (blocking: call it from a
    thread, or before the event loop runs). Callers must not mutate the result."""
    path = str(path)
    key = (path, os.stat(path).st_mtime)
    if key not in _CRD_CACHE:
        with open(path, encoding="utf-8") as handle:
            try:
                docs = [d for d in yaml.load_all(handle, Loader=_Loader) if d is not None]
            except yaml.YAMLError as exc:
                raise CrdError("(file)", f"not valid YAML: {exc}", path) from None
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict):
                raise CrdError(f"document {i}", "must be a mapping", path)
        _CRD_CACHE[key] = docs
        # The schemas are millions of immutable objects kept for the life of the process;
        # moving them out of the collected generations keeps every later full garbage
        # collection from rescanning them (an 80 ms pause on the event loop otherwise).
        gc.freeze()
    return _CRD_CACHE[key]


class KubeApiServer:
    """A Kubernetes API server on 127.0.0.1; see the package docstring for the interface."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        bookmark_interval: float = 5.0,
        event_log_size: int = 10_000,
        watch_max_pending: int = 10_000,
        seed: int = 0,
        faults: Faults | None = None,
        request_log_size: int = 10_000,
    ) -> None:
        self.host, self.port = host, port
        self.store = Store(event_log_size=event_log_size, seed=seed)
        self.faults = faults or Faults(seed=seed)
        self.log = RequestLog(request_log_size)
        self.settings = ServerSettings(
            bookmark_interval=bookmark_interval, watch_max_pending=watch_max_pending
        )
        self._app = KubeApp(self.store, self.faults, self.log, self.settings)
        self.objects = Objects(self.store)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self._app.app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        await self.accept_connections()

    async def accept_connections(self) -> None:
        assert self._runner is not None, "start() first"
        if self._site is not None:
            return
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await self._site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def refuse_connections(self) -> None:
        """Close the listening socket: new connections get ECONNREFUSED until reopened."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def close(self) -> None:
        self._app.stopping.set()
        for watcher in self.store.watchers():
            watcher.close("server shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner, self._site = None, None
        leftover = [t for t in self._app.inflight if not t.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.gather(*leftover, return_exceptions=True)
        # One more turn lets aiohttp's per-connection tasks see their handler end.
        await asyncio.sleep(0)

    async def __aenter__(self) -> KubeApiServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- CRDs ---------------------------------------------------------------------------------

    def register_crd(self, crd: dict[str, Any], source: str = "") -> list[ResourceType]:
        """Serve a CRD's resources, as if it had been POSTed; raises `CrdError` if invalid."""
        return self.store.register_crd(crd, source)

    async def load_crd_file(self, path: str | Path) -> list[ResourceType]:
        """Register every CRD in a YAML file (parsed off the event loop, cached)."""
        loop = asyncio.get_running_loop()
        docs = await loop.run_in_executor(None, load_crd_documents, str(path))
        # The CEL rules too (pure Python, tens of ms a file), so the store finds them compiled.
        if (cel := cel_rules()) is not None:
            await loop.run_in_executor(None, cel.prepare_documents, docs)
        types: list[ResourceType] = []
        for doc in docs:
            types += self.register_crd(doc, str(path))
        return types

    async def load_crds_from(self, directory: str | Path) -> list[ResourceType]:
        """Register the CRDs of every `*.yaml`/`*.yml` file in a directory (sorted by name)."""
        loop = asyncio.get_running_loop()
        paths = await loop.run_in_executor(
            None,
            lambda: sorted(p for p in Path(directory).iterdir() if p.suffix in (".yaml", ".yml")),
        )
        types: list[ResourceType] = []
        for path in paths:
            types += await self.load_crd_file(path)
        return types

    # --- faults -------------------------------------------------------------------------------

    def compact(self, resource: str | None = None) -> None:
        """Compact the event log (all resources, or one): older resourceVersions answer 410."""
        self.store.compact(self.store.rt(resource).storage if resource else None)

    def accept_tokens(self, *tokens: str) -> None:
        """Authenticate requests: only these bearer tokens are accepted from now on (401
        Unauthorized otherwise, as kube-apiserver answers an expired token); no arguments
        turns authentication off again."""
        self.settings.tokens = frozenset(tokens) if tokens else None

    def throttle(self, qps: float, burst: int) -> FlowControl:
        """Answer 429 as priority and fairness does once a client sends faster than `qps`
        (`burst` at once); `unthrottle()` ends it. The `FlowControl` counts the 429s."""
        self.settings.flow_control = FlowControl(qps=qps, burst=burst)
        return self.settings.flow_control

    def unthrottle(self) -> None:
        self.settings.flow_control = None

    def drop_watches(self, resource: str | None = None) -> int:
        """End open watch streams now (as an apiserver restart would); returns how many."""
        storage = self.store.rt(resource).storage if resource else None
        watchers = self.store.watchers(storage)
        for watcher in watchers:
            watcher.close("dropped by the test")
        return len(watchers)


def write_kubeconfig(
    path: str | Path, url: str, namespace: str = "default", user: dict[str, Any] | None = None
) -> Path:
    """Write a kubeconfig (context `sandbox`) pointing kubectl and clients at `url`; `user` is
    the kubeconfig user's credentials (default: a static token, which the server accepts
    unless `accept_tokens` says otherwise; an `exec` plugin, for instance)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": {"server": url}}],
        "users": [{"name": "sandbox", "user": user or {"token": "sandbox-token"}}],
        "contexts": [
            {
                "name": "sandbox",
                "context": {"cluster": "sandbox", "user": "sandbox", "namespace": namespace},
            }
        ],
        "current-context": "sandbox",
        "preferences": {},
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return target
