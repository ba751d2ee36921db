"""`quota.mode: kueue`: what Kueue decides about the agent's runs, watched and reported.

The admission stage for Kueue (the label, the pending caps) is `runtime/admission/kueue.py`;
it reads the Workload states this module keeps. This module:

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
  sent them); only changes are sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
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
from launch_agent.render.decisions import default_kueue_queue
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
from launch_agent.tracking.views import Meta

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 60.0
INSTALL_HINT = (
    "install Kueue (https://kueue.sigs.k8s.io/docs/installation/, e.g. `kubectl apply"
    " --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/"
    "manifests.yaml`)"
)
NEEDED_BY_MODE = ("quota.mode is kueue", "set quota.mode to off")
OwnerKey = tuple[str, str, str]  # namespace, kind, name of the run's workload
LocalQueueKey = tuple[str, str]  # namespace, LocalQueue name


def kueue_queue_of(spec: QueueSpec, quota: QuotaConfig) -> str | None:
    """The LocalQueue the spec's runs are labelled with: the spec's own, or (in kueue mode)
    `quota.kueue.default_local_queue` when its kind can be queued by Kueue."""
    default = quota.kueue.default_local_queue if quota.mode == "kueue" else None
    return default_kueue_queue(spec, default)


def local_queue_of(spec: QueueSpec | None, quota: QuotaConfig) -> LocalQueueKey | None:
    if spec is None:
        return None
    name = kueue_queue_of(spec, quota)
    return (spec.namespace, name) if name else None


def slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """What the watch and the judgement read: metadata, the queue name, whether the Workload
    is active (Kueue deactivates it for good: `tracking/kueue.py`) and status (not the pod
    templates)."""
    strip_managed_fields(obj)
    spec = obj.get("spec")
    kept: dict[str, Any] = {}
    if isinstance(spec, Mapping):
        kept["queueName"] = spec.get("queueName")
        if "active" in spec:
            kept["active"] = spec["active"]
    else:
        kept["queueName"] = None
    return {**{k: v for k, v in obj.items() if k != "spec"}, "spec": kept}


class KueueWorkloads:
    """Each run's Kueue Workload as last seen, by its owner (the run's workload) and uid.

    Made before the tracker and the watch, which share it: the watch writes it, the tracker
    gives the Workload to the judgement (`tracking.assess(kueue_workload=...)`), which is how a
    deactivated Workload (its Job suspended for good) fails its run.
    """

    def __init__(self) -> None:
        self._by_owner: dict[OwnerKey, tuple[str, Mapping[str, Any]]] = {}

    def put(self, key: OwnerKey, uid: str, obj: Mapping[str, Any]) -> None:
        self._by_owner[key] = (uid, obj)

    def pop(self, key: OwnerKey) -> None:
        self._by_owner.pop(key, None)

    def of(self, record: RunRecord) -> Mapping[str, Any] | None:
        seen = self._by_owner.get((record.namespace, record.kind, record.name))
        if seen is None:
            return None
        uid, obj = seen
        known = Meta(record.last).uid
        if uid and known and known != uid:
            return None  # a Workload of an earlier object with the same name
        return obj


class KueueWatch:
    """Workload informers and warnings (module docstring)."""

    def __init__(
        self,
        kube: KubeClient,
        runs: RunTable,
        reporter: Reporter,
        specs: SpecStore,
        config: AgentConfig,
        *,
        workloads: KueueWorkloads | None = None,
        on_workload: Callable[[RunRecord], None] | None = None,
        informer_settings: InformerSettings | None = None,
        needed_by: tuple[str, str] = NEEDED_BY_MODE,
    ) -> None:
        self.kube = kube
        # What makes Kueue a requirement and what else the admin can do (the start-up error).
        self.needed_by = needed_by
        self.runs = runs
        self.reporter = reporter
        self.specs = specs
        self.workloads = workloads if workloads is not None else KueueWorkloads()
        # A Workload's change can change the run's state while its Job does not (deactivation):
        # the tracker judges the run again.
        self.on_workload = on_workload
        self.quota = config.quota
        self.max_pending = config.quota.max_pending_per_leaf
        self.namespaces = list(config.namespaces)
        base = informer_settings or InformerSettings()
        settings = dataclasses.replace(base, label_selector=None, transform=slim_workload)
        self.informers = InformerSet(kube, self.on_event, settings)
        self.statuses: dict[OwnerKey, tuple[str, KueueStatus]] = {}  # key -> (owner uid, status)
        self.missing_local_queues: set[LocalQueueKey] = set()
        self._index: dict[OwnerKey, str] = {}
        # The last warning sent per item, and the state it described.
        self._warned: dict[str, tuple[KueueState, str]] = {}
        # Until the first list is in, events describe runs adopted after a restart, whose
        # state was reported by the previous process: remembered, not sent again.
        self._adopting = True

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
            f"{self.needed_by[0]}, but the cluster does not serve Kueue's {kind} API"
            f" ({kind.lower()}s.{GROUP}, versions {', '.join(VERSIONS)}): {INSTALL_HINT}"
            f" or {self.needed_by[1]}"
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
            self.workloads.pop(key)
            return
        status = workload_status(event.obj)
        self.statuses[key] = (owner.uid, status)
        self.workloads.put(key, owner.uid, event.obj)
        record = self._record(key, owner.uid)
        if record is not None:
            before = record.worker
            if record.placed(status.cluster_name):
                log.info("run %s (%s): on worker %s", record.run_id, record.workload, record.worker)
            self._report(record, status, before)
            if self.on_workload is not None:
                self.on_workload(record)

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
        known = Meta(record.last).uid
        if uid and known and known != uid:
            return None  # a Workload of an earlier object with the same name
        return record

    def _report(self, record: RunRecord, status: KueueStatus, left: str | None = None) -> None:
        text = describe(status, left)
        if text is None:
            return
        last = self._warned.get(record.rqi_id)
        # A deactivation is final and told once: the agent sees `spec.active: false` first and
        # Kueue's own Evicted condition ("The workload is deactivated") a moment later; that
        # second wording of the same end is not news to the person reading W&B.
        if last is not None and (
            last[1] == text or last[0] is status.state is KueueState.DEACTIVATED
        ):
            return
        self._warned[record.rqi_id] = (status.state, text)
        if self._adopting and record.adopted:
            return
        log.info("run %s (%s): %s", record.run_id, record.workload, text)
        self.reporter.warn(record.rqi_id, text, "run")
        if len(self._warned) > 2 * len(self.runs) + 1000:
            live = {r.rqi_id for r in self.runs}
            self._warned = {k: v for k, v in self._warned.items() if k in live}

    @property
    def states(self) -> dict[KueueState, int]:
        """How many of the agent's runs are in each Kueue state (for tests and logs)."""
        out: dict[KueueState, int] = defaultdict(int)
        for record in self.runs:
            seen = self.statuses.get((record.namespace, record.kind, record.name))
            if seen is not None:
                out[seen[1].state] += 1
        return dict(out)
