"""Informers: one list-then-watch per (kind, namespace), shared by every run.

The reference agent opens a watch per namespace that reconnects every 30 s without backoff,
never relists, and forgets what happened while it was disconnected. An `Informer` here:

1. lists the objects matching its label selector and reconciles its cache with the list
   (`cache.reconcile_list`): the first list delivers ADDED for everything, a relist delivers
   only the differences, including DELETED for objects removed while it was not watching;
2. watches from the list's resourceVersion with bookmarks (`allowWatchBookmarks`), so a
   reconnect resumes from the last resourceVersion seen, bookmark or event, and replays nothing;
3. on 410 Gone (the resourceVersion was compacted) goes back to 1;
4. on any other error (network, 5xx, 429, a dropped stream) waits a jittered exponential
   backoff (reset as soon as a connection delivers again) and resumes from the last
   resourceVersion, relisting if that fails with 410.

Events go to one async handler, in order, one at a time per informer (kopf's lesson: one
object's events must not be reordered). A handler that raises is logged and does not stop the
informer. Nothing here polls per object.

`InformerSet` owns the informers' tasks: named, started by `async with` or `add()`, cancelled
and awaited on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

import aiohttp

from launch_agent.adapters.kube.cache import (
    CacheEvent,
    Key,
    Obj,
    apply_event,
    reconcile_list,
    strip_managed_fields,
    version_of,
)
from launch_agent.adapters.kube.client import KubeClient
from launch_agent.adapters.kube.errors import KubeApiError, KubeError, KubeGone, error_from_response
from launch_agent.adapters.kube.kinds import Resource
from launch_agent.adapters.retry import Backoff

log = logging.getLogger(__name__)

# Events delivered between two voluntary yields to the event loop.
YIELD_EVERY = 50


@dataclass(frozen=True, slots=True)
class InformerEvent:
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    resource: Resource
    namespace: str | None
    # Synthesised from a list (initial sync or relist after 410 / reconnect), not a watch event.
    from_list: bool = False


Handler = Callable[[InformerEvent], Awaitable[None]]


@dataclass
class InformerStats:
    lists: int = 0
    relists_after_gone: int = 0
    watches: int = 0
    errors: int = 0
    events: int = 0
    bookmarks: int = 0
    last_error: str = ""


@dataclass
class InformerSettings:
    label_selector: str | None = None
    # Server-side, e.g. `type=Warning` for the Events informer (`runtime/events.py`).
    field_selector: str | None = None
    # Applied to every object before it is cached and delivered. `cache.tracking_view` keeps
    # only what tracking reads, for agents that watch many runs.
    transform: Callable[[Obj], Obj] = strip_managed_fields
    # The suspend flags (`cache.tracking_view`) of every kind the agent runs beyond the built-in
    # ones: the custom kinds' `suspendPath` of the queue specs loaded at start.
    suspend_paths: tuple[tuple[str, ...], ...] = ()
    # Server-side timeout of one watch request; the informer reconnects from its
    # resourceVersion when it ends, which also proves the connection is alive.
    watch_timeout: int = 300
    # A watch that sends nothing (not even a bookmark) for this long is treated as dead and
    # reopened; None: watch_timeout + 30 s. API servers send a bookmark about every minute.
    silence_timeout: float | None = None
    backoff_base: float = 0.2
    backoff_cap: float = 30.0


class Informer:
    """List-then-watch of one resource in one namespace (`None`: all namespaces)."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None,
        handler: Handler,
        settings: InformerSettings | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.handler = handler
        self.settings = settings or InformerSettings()
        self.cache: dict[Key, Obj] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.healthy = False
        self.stats = InformerStats()
        self._backoff = Backoff(self.settings.backoff_base, self.settings.backoff_cap)
        self._progress = False

    @property
    def name(self) -> str:
        return f"informer {self.resource.kind}.{self.resource.api_version} {self.namespace or '*'}"

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.cache.get((namespace, name))

    async def run(self) -> None:
        """Forever: list, watch, recover. Only cancellation ends it."""
        loop = asyncio.get_running_loop()
        while True:
            self._progress = False
            started = loop.time()
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                if not self._progress and loop.time() - started < 1.0:
                    # A stream the server closes at once, again and again, must not spin.
                    await asyncio.sleep(self._backoff.next_delay())
            except KubeGone:
                # Compacted: the only way back is a fresh list. The first 410 is answered at
                # once; a list that is stale again before anything arrives backs off.
                self.stats.relists_after_gone += 1
                self.resource_version = None
                log.info("%s: resourceVersion expired (410), relisting", self.name)
                if not self._progress:
                    await asyncio.sleep(self._backoff.next_delay())
            except Exception as exc:
                # Expected: KubeError, aiohttp.ClientError, TimeoutError, a malformed line.
                # Anything else is a bug, logged with its traceback; the informer still lives,
                # since every run's tracking depends on it.
                expected = isinstance(
                    exc, KubeError | aiohttp.ClientError | TimeoutError | ValueError
                )
                self.healthy = False
                self.stats.errors += 1
                self.stats.last_error = str(exc)[:300]
                delay = self._backoff.next_delay()
                if isinstance(exc, KubeApiError) and exc.retry_after:
                    # The API server's priority and fairness asked for this much (a 429).
                    delay = max(delay, min(exc.retry_after, self.settings.backoff_cap))
                log.warning(
                    "%s: %s; reconnecting in %.2fs",
                    self.name,
                    exc,
                    delay,
                    exc_info=None if expected else exc,
                )
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        listed = await self.client.list(
            self.resource,
            self.namespace,
            label_selector=self.settings.label_selector,
            transform=self.settings.transform,
            field_selector=self.settings.field_selector,
        )
        self.stats.lists += 1
        self.resource_version = listed.resource_version
        self.healthy = True
        for event in reconcile_list(self.cache, listed.items):
            await self._deliver(event)
        self.synced.set()

    async def _watch(self) -> None:
        assert self.resource_version is not None
        self.stats.watches += 1
        stream = self.client.watch_stream(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.settings.label_selector,
            timeout_seconds=self.settings.watch_timeout,
            silence_timeout=self.settings.silence_timeout,
            field_selector=self.settings.field_selector,
        )
        # aclosing: leaving the loop early (an ERROR event, a cancel) closes the HTTP stream now.
        async with contextlib.aclosing(stream):
            async for raw in stream:
                etype = raw.get("type")
                obj = raw.get("object")
                if not isinstance(obj, dict):
                    continue
                if etype == "ERROR":
                    code = obj.get("code")
                    raise error_from_response(
                        code if isinstance(code, int) else 500,
                        obj,
                        method="WATCH",
                        path=self.resource.path(self.namespace),
                    )
                self.healthy = True
                self._progress = True
                self._backoff.reset()
                version = version_of(obj)
                if version:
                    self.resource_version = version
                if etype == "BOOKMARK":
                    self.stats.bookmarks += 1
                    continue
                event = apply_event(self.cache, str(etype), self.settings.transform(obj))
                if event is not None:
                    await self._deliver(event)

    async def _deliver(self, event: CacheEvent) -> None:
        self.stats.events += 1
        if self.stats.events % YIELD_EVERY == 0:
            # A relist of 10,000 objects, or a burst of buffered watch events, would otherwise
            # run in one step of this task and stall every other task on the loop.
            await asyncio.sleep(0)
        try:
            await self.handler(
                InformerEvent(event.type, event.obj, self.resource, self.namespace, event.from_list)
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            # The watch must go on for every other run; the handler owns its own failures.
            log.exception("%s: handler failed on %s", self.name, event.type)


@dataclass
class InformerSet:
    """The informers of one agent and their tasks; an async context manager.

    `add(resource, namespace)` is idempotent per (resource, namespace): one watch each, however
    many runs need it.
    """

    client: KubeClient
    handler: Handler
    settings: InformerSettings = field(default_factory=InformerSettings)
    informers: dict[tuple[Resource, str | None], Informer] = field(default_factory=dict)
    _tasks: dict[tuple[Resource, str | None], asyncio.Task[None]] = field(default_factory=dict)
    _running: bool = False

    async def __aenter__(self) -> InformerSet:
        self._running = True
        for key, informer in self.informers.items():
            self._start(key, informer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._running = False
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def add(self, resource: Resource, namespace: str | None) -> Informer:
        key = (resource, namespace)
        informer = self.informers.get(key)
        if informer is None:
            informer = Informer(self.client, resource, namespace, self.handler, self.settings)
            self.informers[key] = informer
            if self._running:
                self._start(key, informer)
        return informer

    def _start(self, key: tuple[Resource, str | None], informer: Informer) -> None:
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(informer.run(), name=informer.name)

    @property
    def healthy(self) -> bool:
        return all(i.healthy for i in self.informers.values())

    async def wait_synced(self) -> None:
        """Until every informer finished its first list; bound it with `asyncio.timeout`."""
        for informer in list(self.informers.values()):
            await informer.synced.wait()
