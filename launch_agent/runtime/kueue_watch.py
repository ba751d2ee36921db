"""`quota.mode: kueue`: Kueue decides when runs start; the agent reads its decisions.

The agent creates each workload suspended with the `kueue.x-k8s.io/queue-name` label (render,
from the queue spec's `spec.kueue.queueName`, or `quota.kueue.default_local_queue` for specs
that name none: `with_default_local_queue`). Kueue creates a `Workload` for it, admits it when
its ClusterQueue has quota, and unsuspends it. This module:

- **checks at start-up** that the cluster serves Kueue's Workload API (otherwise a
  `StartupError` that says what to install) and warns about every queue spec whose LocalQueue
  does not exist (its runs would never start);
- **watches Workloads** (`workloads.kueue.x-k8s.io`, newest served version) in the target
  namespaces with one informer each. Kueue does not copy the agent's labels onto Workloads, so
  the watch is not filtered by label; a Workload is matched to a run by its controller
  ownerReference (namespace, kind, name and uid of the run's workload);
- **reports** what Kueue says as W&B warnings on the item, once per distinct message
  (`tracking.kueue.describe`): "waiting for Kueue: LocalQueue ns/lq (ClusterQueue cq): couldn't
  assign flavors ...", "admitted by Kueue ...", "evicted by Kueue (InClusterQueue: ...)", "Kueue
  cannot admit this run: LocalQueue lq doesn't exist ...". After a restart the states of
  adopted runs found by the first list are taken as already reported (the previous process
  sent them); only changes are sent;
- **is the poller's `Admission`**:
  - `room`: `max_jobs` counts every run the agent holds, admitted or waiting in Kueue, exactly
    as without Kueue (so `max_jobs: -1` leaves the whole decision to Kueue);
  - `queue_caps`: at most `quota.max_pending_per_leaf` runs not admitted yet per LocalQueue,
    so work Kueue cannot start soon stays in W&B for other agents. A run counts as waiting
    from its creation until its Workload is admitted, and again after an eviction. Items
    popped but not created yet are not attributable to a queue; they count against every
    LocalQueue (a conservative bound, exact once they are created). W&B queues that share a
    LocalQueue share its room, round-robin.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from launch_agent.adapters.kube import (
    InformerEvent,
    InformerSet,
    InformerSettings,
    KindNotInstalled,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    Resource,
)
from launch_agent.adapters.kube.cache import strip_managed_fields
from launch_agent.model.config import AgentConfig, QuotaConfig
from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render import kinds
from launch_agent.runtime.poll_policy import capacity
from launch_agent.runtime.reporter import Reporter
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.startup import StartupError, until_available
from launch_agent.tracking.kueue import (
    GROUP,
    VERSIONS,
    KueueState,
    KueueStatus,
    describe,
    owner_of,
    workload_status,
)

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 60.0
INSTALL_HINT = (
    "install Kueue (https://kueue.sigs.k8s.io/docs/installation/, e.g. `kubectl apply"
    " --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/"
    "manifests.yaml`) or set quota.mode to off"
)
OwnerKey = tuple[str, str, str]  # namespace, kind, name of the run's workload
LocalQueueKey = tuple[str, str]  # namespace, LocalQueue name


def with_default_local_queue(spec: QueueSpec, quota: QuotaConfig) -> QueueSpec:
    """The spec as render should see it: with `quota.kueue.default_local_queue` when the agent
    delegates to Kueue and the spec names no LocalQueue (and Kueue can queue its kind)."""
    default = quota.kueue.default_local_queue
    if quota.mode != "kueue" or not default or spec.kueue_queue_name:
        return spec
    cached = spec.cache.get("kueue-default-local-queue")
    if isinstance(cached, QueueSpec) and cached.kueue_queue_name == default:
        return cached
    info = kinds.lookup(spec.api_version, spec.kind)
    if spec.custom_kind is not None:
        info = kinds.custom_kind_info(spec.api_version, spec.kind, spec.custom_kind)
    if info is None or info.kueue is None:
        return spec
    # A new spec with its own render cache; remembered on the original (same lifetime).
    defaulted = dataclasses.replace(spec, kueue_queue_name=default, cache={})
    spec.cache["kueue-default-local-queue"] = defaulted
    return defaulted


def local_queue_of(spec: QueueSpec | None, quota: QuotaConfig) -> LocalQueueKey | None:
    if spec is None:
        return None
    name = with_default_local_queue(spec, quota).kueue_queue_name
    return (spec.namespace, name) if name else None


def slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """What the watch reads: metadata, the queue name and status (not the pod templates)."""
    strip_managed_fields(obj)
    spec = obj.get("spec")
    queue = spec.get("queueName") if isinstance(spec, Mapping) else None
    return {**{k: v for k, v in obj.items() if k != "spec"}, "spec": {"queueName": queue}}


class KueueWatch:
    """Workload informers, warnings and the pending cap per LocalQueue (module docstring)."""

    def __init__(
        self,
        kube: KubeClient,
        runs: RunTable,
        reporter: Reporter,
        specs: SpecStore,
        config: AgentConfig,
        *,
        informer_settings: InformerSettings | None = None,
    ) -> None:
        self.kube = kube
        self.runs = runs
        self.reporter = reporter
        self.specs = specs
        self.quota = config.quota
        self.max_jobs = config.max_jobs
        self.max_pending = config.quota.max_pending_per_leaf
        self.namespaces = list(config.namespaces)
        base = informer_settings or InformerSettings()
        settings = dataclasses.replace(base, label_selector=None, transform=slim_workload)
        self.informers = InformerSet(kube, self.on_event, settings)
        self.statuses: dict[OwnerKey, tuple[str, KueueStatus]] = {}  # key -> (owner uid, status)
        self.missing_local_queues: set[LocalQueueKey] = set()
        self._index: dict[OwnerKey, str] = {}
        self._warned: dict[str, str] = {}
        # Until the first list is in, events describe runs adopted after a restart, whose
        # state was reported by the previous process: remembered, not sent again.
        self._adopting = True
        self._turn = 0

    # --- start-up --------------------------------------------------------------------------

    async def _resolve(self, kind: str, stopping: asyncio.Event) -> Resource:
        for version in VERSIONS:
            try:
                return await until_available(
                    f"looking up Kueue's {kind} API",
                    functools.partial(self.kube.resolve, f"{GROUP}/{version}", kind),
                    stopping,
                )
            except KindNotInstalled:
                continue
        raise StartupError(
            f"quota.mode is kueue, but the cluster does not serve Kueue's {kind} API"
            f" ({kind.lower()}s.{GROUP}, versions {', '.join(VERSIONS)}): {INSTALL_HINT}"
        )

    async def start(self, stack: AsyncExitStack, stopping: asyncio.Event) -> None:
        """Check Kueue is installed, start the Workload informers, check the LocalQueues."""
        workloads = await self._resolve("Workload", stopping)
        local_queues = await self._resolve("LocalQueue", stopping)
        for namespace in self.namespaces:
            self.informers.add(workloads, namespace)
        await stack.enter_async_context(self.informers)
        try:
            async with asyncio.timeout(SYNC_TIMEOUT):
                await self.informers.wait_synced()
        except TimeoutError:
            log.warning("Kueue Workloads not listed within %.0fs; going on", SYNC_TIMEOUT)
        self._adopting = False
        await self.check_local_queues(local_queues)
        log.info(
            "delegating admission to Kueue (%s) in %s; at most %d waiting run(s) per LocalQueue",
            workloads.api_version,
            ", ".join(self.namespaces),
            self.max_pending,
        )

    async def check_local_queues(self, resource: Resource) -> None:
        """Warn about queue specs whose LocalQueue does not exist: their runs would wait
        forever ("LocalQueue NAME doesn't exist" on every Workload)."""
        seen: set[LocalQueueKey] = set()
        for spec in self.specs.specs:
            key = local_queue_of(spec, self.quota)
            if key is None or key in seen or spec.namespace not in self.namespaces:
                continue
            seen.add(key)
            namespace, name = key
            try:
                await self.kube.get(resource, namespace, name)
            except KubeNotFound:
                self.missing_local_queues.add(key)
                log.warning(
                    "queue spec %s: Kueue LocalQueue %s/%s does not exist: its runs will wait"
                    " (inadmissible) until an admin creates it or the spec names another",
                    spec.name,
                    namespace,
                    name,
                )
            except KubeForbidden as exc:
                log.warning(
                    "cannot check Kueue LocalQueue %s/%s (%s): grant get on"
                    " localqueues.kueue.x-k8s.io",
                    namespace,
                    name,
                    exc.message,
                )
            except KubeError as exc:
                log.warning("cannot check Kueue LocalQueue %s/%s: %s", namespace, name, exc)

    # --- events ----------------------------------------------------------------------------

    async def on_event(self, event: InformerEvent) -> None:
        owner = owner_of(event.obj)
        if owner is None:
            return
        key = (owner.namespace, owner.kind, owner.name)
        if event.type == "DELETED":
            self.statuses.pop(key, None)
            return
        status = workload_status(event.obj)
        self.statuses[key] = (owner.uid, status)
        record = self._record(key, owner.uid)
        if record is not None:
            self._report(record, status)

    def _record(self, key: OwnerKey, uid: str) -> RunRecord | None:
        rqi = self._index.get(key)
        record = self.runs.get(rqi) if rqi is not None else None
        if record is None:
            # Rebuilt on a miss only: O(runs) per Workload of a run the index has not seen.
            self._index = {(r.namespace, r.kind, r.name): r.rqi_id for r in self.runs}
            rqi = self._index.get(key)
            record = self.runs.get(rqi) if rqi is not None else None
        if record is None:
            return None
        known = (record.last or {}).get("metadata") or {}
        if uid and known.get("uid") and known.get("uid") != uid:
            return None  # a Workload of an earlier object with the same name
        return record

    def _report(self, record: RunRecord, status: KueueStatus) -> None:
        text = describe(status)
        if text is None or self._warned.get(record.rqi_id) == text:
            return
        self._warned[record.rqi_id] = text
        if self._adopting and record.adopted:
            return
        log.info("run %s (%s): %s", record.run_id, record.workload, text)
        self.reporter.warn(record.rqi_id, text, "run")
        if len(self._warned) > 2 * len(self.runs) + 1000:
            live = {r.rqi_id for r in self.runs}
            self._warned = {k: v for k, v in self._warned.items() if k in live}

    # --- Admission -------------------------------------------------------------------------

    def waiting(self) -> dict[LocalQueueKey, int]:
        """Runs not admitted yet, per LocalQueue."""
        counts: dict[LocalQueueKey, int] = defaultdict(int)
        for record in self.runs:
            if record.finishing:
                continue
            seen = self.statuses.get((record.namespace, record.kind, record.name))
            if seen is not None:
                status = seen[1]
                if status.state.waiting:
                    counts[(status.namespace, status.local_queue)] += 1
                continue
            key = local_queue_of(self.specs.for_queue(record.queue), self.quota)
            if key is not None:  # created, Kueue has not made its Workload yet
                counts[key] += 1
        return counts

    def room(self, inflight: int) -> int | None:
        return capacity(self.max_jobs, inflight)

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]:
        by_queue: dict[LocalQueueKey, list[str]] = defaultdict(list)
        for queue in queues:
            key = local_queue_of(self.specs.for_queue(queue), self.quota)
            if key is not None:
                by_queue[key].append(queue)
        if not by_queue:
            return {}
        waiting = self.waiting()
        caps: dict[str, int] = {}
        self._turn += 1
        for key, names in by_queue.items():
            left = max(0, self.max_pending - waiting.get(key, 0) - self.runs.dispatching)
            share, extra = divmod(left, len(names))
            for i, queue in enumerate(names):
                rank = (i - self._turn) % len(names)
                caps[queue] = share + (1 if rank < extra else 0)
        return caps

    @property
    def states(self) -> dict[KueueState, int]:
        """How many of the agent's runs are in each Kueue state (for tests and logs)."""
        out: dict[KueueState, int] = defaultdict(int)
        for record in self.runs:
            seen = self.statuses.get((record.namespace, record.kind, record.name))
            if seen is not None:
                out[seen[1].state] += 1
        return dict(out)
