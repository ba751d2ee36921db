"""The agent: every part wired on one `AsyncExitStack`, run by the supervisor.

Start-up, in five phases, each a method of `Agent` that only builds and wires, and each done
before the next (docs/agent.md, "Start-up"), as aiohttp's `AppRunner.setup()` and kopf's
`running.py` only wire:

1. `_clients`: the health server (so `/healthz` answers while the agent starts; `/readyz` says
   why not ready), then the W&B and Kubernetes clients (one session each for the process);
2. `_specs`: queue specs loaded (off the loop), every configured queue served, and the
   admission mode of `quota.mode` built once (`runtime/admission/modes.py`; an invalid quota
   tree stops the start before anything is registered);
3. `_adopt`: `resolve_queues` (key, entity, queues: read-only); with
   `leader_election.enabled`, the Lease elector (runtime/leader.py); informers for every kind
   the specs run and for pods, and a wait for their first list: this is adoption, every run
   the agent owns is in the table before anything is popped; a standby waits here (`_lead`),
   informers synced, until it leads;
4. `_register`: `createLaunchAgent` and the API-key Secret in every target namespace; then the
   mode's admission stage (`AdmissionMode.open`: with `quota.mode: kueue` Kueue's Workload
   informers, and a cluster without Kueue stops the start here; with `agent` the quota engine
   rebuilt from the adopted runs);
5. `_loops`: the dispatcher and the root tasks: the mode's (the quota driver), poller,
   finisher, warnings, stop checks, spec reload, housekeeping.

Shutdown (SIGTERM/SIGINT, `stop()`, the `stop_event`, or W&B's `stopPolling`): the poller stops
popping, W&B hears `KILLED`, in-flight creates and acks finish within
`shutdown_grace_seconds`, then everything is closed in reverse order. Workloads keep running;
the next start adopts them.

Wiring: every collaborator and callback is given to an object's constructor, here; nothing is
assigned to another object afterwards (tests/unit/test_constructor_wiring.py checks it). The
wake-up events that connect the parts (the poller's here, the quota driver's in its mode) are
made first, so the objects that set them and the loops that wait on them can be built in any
order. One monotonic
clock (`clock`, runtime/clock.py) is given to every part that measures time.

`Agent` is also the in-process entry point for the demo and the benchmarks:

    agent = Agent(config, kube_configuration=cfg)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(agent.run(stop_event), name="agent")
        await agent.ready.wait()
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import platform
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any, NamedTuple

from launch_agent import __version__
from launch_agent.adapters.kube import (
    InformerSettings,
    KubeClient,
    load_configuration,
)
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.tls import CABundleError, client_ssl_context
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.model.config import AgentConfig
from launch_agent.model.lease import LeaseTiming
from launch_agent.render.kinds import suspend_paths
from launch_agent.render.settings import RenderSettings
from launch_agent.runtime.admission.modes import AdmissionMode, StageParts, admission_mode
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.admission.schedulers import SchedulerCap
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.builds import check_builder, open_builds
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.dispatcher import Dispatcher
from launch_agent.runtime.finisher import Finisher
from launch_agent.runtime.health import HealthServer, Readiness
from launch_agent.runtime.kueue_watch import KueueWatch
from launch_agent.runtime.leader import LeaderElector
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.pace import ProjectPace
from launch_agent.runtime.poller import Poller
from launch_agent.runtime.reporter import Reporter
from launch_agent.runtime.run_checks import RunChecks
from launch_agent.runtime.runs import RunTable
from launch_agent.runtime.settlement import Settlement
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.startup import (
    Queues,
    Registration,
    StartupError,
    Stopped,
    ensure_api_key_secrets,
    register,
    resolve_queues,
    unserved_message,
)
from launch_agent.runtime.status.activity import Activity
from launch_agent.runtime.status_source import StatusSource
from launch_agent.runtime.stopper import Stopper, stop_check_policy
from launch_agent.runtime.supervisor import Supervisor
from launch_agent.runtime.tracker import Tracker
from launch_agent.runtime.workers import Workers
from launch_agent.tracking import TrackingPolicy

log = logging.getLogger(__name__)

ADOPTION_TIMEOUT = 120.0


class _Adopted(NamedTuple):
    """What the adoption phase built: the queues W&B serves and the tracking side."""

    queues: Queues
    wandb: WandbClient
    reporter: Reporter
    settlement: Settlement
    finisher: Finisher
    tracker: Tracker


class _Registered(NamedTuple):
    registration: Registration
    settings: RenderSettings


class Agent:
    """One agent process's worth of state; `run()` once."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        kube_configuration: Any = None,
        kubeconfig: str | None = None,
        kube_context: str | None = None,
        now: Callable[[], datetime] | None = None,
        hostname: str | None = None,
        wandb_retry: RetryPolicy | None = None,
        kube_retry: RetryPolicy | None = None,
        informer_settings: InformerSettings | None = None,
        agent_check_seconds: float = 30.0,
        clock: Clock = monotonic,
    ) -> None:
        self.config = config
        self.kube_configuration = kube_configuration
        self.kubeconfig = kubeconfig
        self.kube_context = kube_context
        self.now = now or (lambda: datetime.now(UTC))
        self.hostname = hostname or platform.node() or "launch-agent"
        self.clock = clock
        self.wandb_retry = wandb_retry
        self.kube_retry = kube_retry
        self.informer_settings = informer_settings
        self.agent_check_seconds = agent_check_seconds
        self.metrics = Metrics(activity=Activity(self.now))
        self.readiness = Readiness(
            poll_interval_seconds=config.poll.idle_interval_seconds, clock=clock
        )
        self.supervisor = Supervisor(grace_seconds=config.shutdown_grace_seconds)
        # The poller waits on it when it may not pop; runs ending and quota room set it.
        self.poll_wake = asyncio.Event()
        self.runs = RunTable(on_change=self.poll_wake.set)
        self.status = StatusSource(
            config,
            self.runs,
            self.metrics,
            self.readiness,
            version=__version__,
            hostname=self.hostname,
            now=self.now,
            clock=clock,
            quota=self._quota_admission,
            entity=self._entity,
        )
        self.ready = asyncio.Event()
        self.agent_id: str | None = None
        self.entity: str | None = None
        self.health_port: int | None = None
        # Set once run() built them; for the demo, benchmarks and tests to inspect.
        self.wandb: WandbClient | None = None
        self.kube: KubeClient | None = None
        self.specs: SpecStore | None = None
        self.tracker: Tracker | None = None
        self.reporter: Reporter | None = None
        self.finisher: Finisher | None = None
        self.poller: Poller | None = None
        self.quota: QuotaAdmission | None = None  # quota.mode agent
        self.kueue: KueueWatch | None = None  # quota.mode kueue
        self.elector: LeaderElector | None = None  # leader_election.enabled
        self.workers = Workers(
            config.multikueue.workers,
            policy=kube_retry,
            observer=self._observe_kube,
            limits=self._kube_limits(),
        )
        self._stage: AdmissionStage | None = None  # `quota.mode`'s, built once at registration

    @property
    def admission(self) -> AdmissionStage:
        """The admission stage `quota.mode` names (runtime/admission/modes.py), once started."""
        if self._stage is None:
            raise RuntimeError("the agent has not registered yet: no admission stage")
        return self._stage

    def _quota_admission(self) -> QuotaAdmission | None:
        return self.quota

    def _entity(self) -> str | None:
        return self.entity

    def stop(self, reason: str = "requested") -> None:
        self.supervisor.stop(reason)

    def _kube_limits(self) -> dict[str, Any]:
        """Each Kubernetes client's own token bucket and its 429 counter (`kubernetes.*`)."""
        limits = self.config.kubernetes
        return {
            "qps": limits.qps,
            "burst": limits.burst,
            "stop": self.supervisor.stopping,
            "throttled": self.metrics.kube_throttle,
        }

    def _observe(self, operation: str, status: int | None, seconds: float) -> None:
        self.metrics.api_call("wandb", operation, status, seconds)

    def _observe_kube(self, operation: str, status: int | None, seconds: float) -> None:
        self.metrics.api_call("kubernetes", operation, status, seconds)

    async def run(
        self, stop_event: asyncio.Event | None = None, *, install_signals: bool = False
    ) -> None:
        """Start, adopt, serve until stopped. Raises `StartupError` if it cannot start."""
        remove_signals = self.supervisor.install_signal_handlers() if install_signals else None
        watcher = None
        if stop_event is not None:
            watcher = asyncio.create_task(self._forward_stop(stop_event), name="agent-stop-event")
        try:
            async with AsyncExitStack() as stack:
                await self._start(stack)
                if self.supervisor.stopping.is_set():
                    return
                self.ready.set()
                await self.supervisor.run()
        except Stopped:
            log.info("stopped while starting")
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            if remove_signals is not None:
                remove_signals()

    async def _forward_stop(self, stop_event: asyncio.Event) -> None:
        await stop_event.wait()
        self.supervisor.stop("stop event")

    async def _start(self, stack: AsyncExitStack) -> None:
        """The start-up phases, in order (the module docstring's steps): each only builds and
        wires; the root tasks run once the supervisor does."""
        check_builder(self.config)  # before anything is registered with W&B
        wandb, kube = await self._clients(stack)
        specs, mode = await self._specs()
        adopted = await self._adopt(stack, wandb, kube, specs, mode)
        if adopted is None:
            return  # stopped while standing by
        registered = await self._register(stack, wandb, kube, adopted)
        parts = StageParts(
            self.config,
            kube,
            self.runs,
            specs,
            adopted.reporter,
            adopted.tracker.evaluate,
            self.informer_settings,
            self.clock,
        )
        self._stage = await mode.open(parts, stack, self.supervisor.stopping)
        self.kueue = mode.kueue
        await self._loops(stack, mode, parts, adopted, registered)

    # --- 1. clients ----------------------------------------------------------------------------

    async def _clients(self, stack: AsyncExitStack) -> tuple[WandbClient, KubeClient]:
        """The health server (so `/healthz` answers while the agent starts), then one W&B and
        one Kubernetes client for the process."""
        config = self.config
        health = await stack.enter_async_context(
            HealthServer(
                self.readiness,
                self.metrics,
                config.health.host,
                config.health.port,
                status=self.status,
                token=config.status.token.get_secret_value() if config.status.token else None,
            )
        )
        self.health_port = health.port
        options: dict[str, Any] = {"observer": self._observe}
        if self.wandb_retry is not None:
            options["retry"] = self.wandb_retry
        try:
            # Loading the system roots takes 50 ms of CPU: off the loop, like any file read.
            options["ssl_context"] = await asyncio.to_thread(
                client_ssl_context, configured=config.ca_bundle
            )
            client = WandbClient.from_config(config, **options)
        except CABundleError as exc:  # a customCABundle that is not mounted, or not PEM
            raise StartupError(str(exc)) from None
        self.wandb = await stack.enter_async_context(client)
        kube_options: dict[str, Any] = {
            "policy": self.kube_retry,
            "observer": self._observe_kube,
            **self._kube_limits(),
        }
        if self.kube_configuration is not None:
            kube_cfg = self.kube_configuration
        else:
            kube_cfg = await self._kube_configuration()
            # Expiring credentials: the pod's rotated token, a kubeconfig's exec plugin.
            kube_options.update(KubeClient.renewal(self.kubeconfig, self.kube_context))
        self.kube = await stack.enter_async_context(KubeClient(kube_cfg, **kube_options))
        # MultiKueue workers, read-only (`runtime/workers.py`): where its runs' pods are.
        await self.workers.open(stack)
        return self.wandb, self.kube

    # --- 2. specs ------------------------------------------------------------------------------

    async def _specs(self) -> tuple[SpecStore, AdmissionMode]:
        """The queue specs (off the loop), every configured queue served, and `quota.mode`'s
        admission (an invalid quota tree fails here, before the agent registers with W&B)."""
        config = self.config
        specs = SpecStore(config.queue_specs_dir, self.metrics)
        await specs.reload()
        self.specs = specs
        if not specs.specs:
            log.warning("no valid queue spec in %s: every item will fail", config.queue_specs_dir)
        unserved = [q for q in config.all_queues if specs.for_queue(q) is None]
        if unserved:
            # Refused now rather than failing every item of the queue later.
            raise StartupError(unserved_message(unserved, config.queue_specs_dir))
        mode = admission_mode(config, specs, self.runs, now=self.now, poll_wake=self.poll_wake)
        self.quota = mode.quota
        return specs, mode

    # --- 3. adoption ---------------------------------------------------------------------------

    async def _adopt(
        self,
        stack: AsyncExitStack,
        wandb: WandbClient,
        kube: KubeClient,
        specs: SpecStore,
        mode: AdmissionMode,
    ) -> _Adopted | None:
        """Read-only checks with W&B, the Lease elector, then informers for every kind the
        specs run and for pods, and a wait for their first list: every run the agent owns is
        in the table before anything is popped. A standby waits here, informers synced, until
        it leads (None: stopped meanwhile)."""
        config, stopping = self.config, self.supervisor.stopping
        queues = await resolve_queues(config, wandb, stopping)
        if config.leader_election.enabled:
            self.elector = await stack.enter_async_context(self._elector(kube))
        self.reporter = reporter = Reporter(wandb, self.metrics, stopping)
        settlement = Settlement(wandb, reporter, self.metrics, queue_entity=queues.entity)
        self.finisher = finisher = Finisher(
            kube,
            self.runs,
            reporter,
            self.metrics,
            config.tracking,
            checks=RunChecks(wandb, reporter, config.sweeps, entity=queues.entity),
            settlement=settlement,
            queue_entity=queues.entity,
            clock=self.clock,
            worker_clusters=self.workers,
        )
        self.tracker = tracker = Tracker(
            kube,
            self.runs,
            reporter,
            self.metrics,
            self.readiness,
            agent_name=config.agent_name,
            policy=TrackingPolicy.from_config(config.tracking),
            now=self.now,
            finish=finisher.submit,
            observe=mode.observe,
            kueue_workload=mode.kueue_workload,
            # The slim cache keeps these flags: a held run still reads as held after a restart.
            informer_settings=dataclasses.replace(
                self.informer_settings or InformerSettings(),
                suspend_paths=suspend_paths(specs.specs),
            ),
            clock=self.clock,
            worker_clusters=self.workers,
            adopting=True,  # every run assessed once, by the recheck below
        )
        await stack.enter_async_context(tracker.informers)
        await stack.enter_async_context(tracker.event_informers)
        for informers in tracker.worker_informers.values():
            # Not waited for below: a worker that is down is Kueue's to handle, not a reason
            # to hold the agent's start.
            await stack.enter_async_context(informers)
        await tracker.watch_specs(specs.specs, config.namespaces)
        if not await tracker.wait_synced(ADOPTION_TIMEOUT):
            log.warning("not every watch listed within %.0fs; popping anyway", ADOPTION_TIMEOUT)
        await tracker.recheck(everything=True)
        log.info("adopted %d run(s) from the cluster", len(self.runs))
        if not await self._lead(stopping):
            return None
        return _Adopted(queues, wandb, reporter, settlement, finisher, tracker)

    async def _lead(self, stopping: asyncio.Event) -> bool:
        """Whether this replica leads (or runs alone); a standby waits for the Lease with its
        informers synced and the run table kept, nothing popped, dispatched or reported (the
        finisher's queue waits). False: stopped while standing by."""
        if self.elector is None:
            return True
        await self.elector.wait_tried(stopping)
        if self.elector.leading.is_set():
            return True
        log.info("standby: %s leads; waiting for the Lease", self.elector.leader or "nobody")
        if not await self.elector.wait_leading(stopping):
            return False
        log.info("took over with %d run(s) in the table", len(self.runs))
        return True

    # --- 4. registration -----------------------------------------------------------------------

    async def _register(
        self, stack: AsyncExitStack, wandb: WandbClient, kube: KubeClient, adopted: _Adopted
    ) -> _Registered:
        """`createLaunchAgent`, and the API-key Secret in every target namespace."""
        config, stopping = self.config, self.supervisor.stopping
        registration = await register(
            config,
            wandb,
            stopping,
            hostname=self.hostname,
            version=__version__,
            queues=adopted.queues,
        )
        self.agent_id, self.entity = registration.agent_id, registration.entity
        settings = RenderSettings.from_config(config, queue_entity=registration.entity)
        assert config.api_key is not None  # WandbClient.from_config checked it
        await ensure_api_key_secrets(
            kube,
            config.namespaces,
            name=settings.api_key_secret,
            key=settings.api_key_secret_key,
            api_key=config.api_key.get_secret_value(),
            agent_name=config.agent_name,
            stopping=stopping,
        )
        specs = self.specs.specs if self.specs is not None else ()
        await self.workers.check_api_key_secrets(
            sorted({s.namespace for s in specs if s.multi_kueue}),
            name=settings.api_key_secret,
            key=settings.api_key_secret_key,
        )
        return _Registered(registration, settings)

    # --- 5. loops ------------------------------------------------------------------------------

    async def _loops(
        self,
        stack: AsyncExitStack,
        mode: AdmissionMode,
        parts: StageParts,
        adopted: _Adopted,
        registered: _Registered,
    ) -> None:
        """The dispatcher and the root tasks: the mode's own (the quota driver), poller,
        finisher, warnings, stop checks, spec reload, housekeeping."""
        config, stopping = self.config, self.supervisor.stopping
        wandb, kube, specs = adopted.wandb, parts.kube, parts.specs
        registration = registered.registration
        # Kaniko builds (None unless builder.type is kaniko): one ImageBuilder per process,
        # closed (builds in flight cancelled and cleaned up) before the Kubernetes client.
        builds = await open_builds(
            stack, config, kube, adopted.reporter, stopping, metrics=self.metrics
        )
        dispatcher = Dispatcher(
            config,
            wandb=wandb,
            kube=kube,
            specs=specs,
            runs=self.runs,
            reporter=adopted.reporter,
            tracker=adopted.tracker,
            metrics=self.metrics,
            settings=registered.settings,
            admission=self.admission,
            schedulers=SchedulerCap(config.max_schedulers, self.runs),
            settlement=adopted.settlement,
            builds=builds,
            clock=self.clock,
            pace=ProjectPace(
                config.dispatch.max_runs_per_second_per_project,
                stop=self.supervisor.stopping,
                metrics=self.metrics,
            ),
        )
        self.poller = Poller(
            wandb,
            self.runs,
            dispatcher,
            self.metrics,
            self.readiness,
            entity=registration.entity,
            queues=registration.queues,
            agent_id=registration.agent_id,
            poll=config.poll,
            admission=self.admission,
            on_stop_polling=self.supervisor.stop,
            wake=self.poll_wake,
            agent_check_seconds=self.agent_check_seconds,
            clock=self.clock,
        )
        stopper = Stopper(
            wandb,
            kube,
            self.runs,
            policy=stop_check_policy(config),
            timeout=float(config.stopped_run_timeout),
            clock=self.clock,
            now=self.now,
        )
        sup = self.supervisor
        for name, loop in mode.loops(parts):
            sup.add(name, loop)
        sup.add("poller", self.poller.run)
        sup.add("finisher", adopted.finisher.run)
        sup.add("warnings", adopted.reporter.run_warnings)
        sup.add("stop-checks", stopper.run)
        sup.add("spec-reload", lambda s: specs.watch(config.specs_reload_seconds, s))
        sup.add("housekeeping", adopted.tracker.run_periodic)
        sup.on_stop(self._on_stop)

    def _elector(self, kube: KubeClient) -> LeaderElector:
        election = self.config.leader_election
        return LeaderElector(
            kube,
            namespace=election.namespace or self.config.namespaces[0],
            name=election.lease_name or self.config.agent_name,
            identity=election.identity or self.hostname,
            timing=LeaseTiming(
                election.lease_duration_seconds,
                election.renew_deadline_seconds,
                election.retry_period_seconds,
            ),
            clock=self.clock,
            now=self.now,
            on_change=self._role,
            on_holder=self._holder,
            on_lost=self._lost,
        )

    def _role(self, role: str) -> None:
        self.readiness.role = role

    def _holder(self, identity: str) -> None:
        self.readiness.leader = identity

    def _lost(self, reason: str) -> None:
        # Stop popping now; in-flight creates are idempotent by name and reports are by item
        # id, so what finishes during the grace period is safe. Restarted, this replica is a
        # standby (docs/operations.md, "High availability").
        self.supervisor.stop(f"lost the leader Lease: {reason}")

    async def _kube_configuration(self) -> Any:
        where = f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "the environment"
        if self.kubeconfig and not await asyncio.to_thread(os.path.isfile, self.kubeconfig):
            raise StartupError(f"kubeconfig {self.kubeconfig} does not exist")
        try:
            return await load_configuration(self.kubeconfig, self.kube_context)
        except Exception as exc:
            # The client library's own errors (a file without current-context, no cluster
            # credentials at all) become one line that says where the agent looked.
            raise StartupError(
                f"cannot load the Kubernetes configuration from {where} (--kubeconfig,"
                f" $KUBECONFIG, ~/.kube/config, or the pod's service account): {exc}"
            ) from None

    async def _on_stop(self) -> None:
        self.readiness.shutting_down = True
        self.poll_wake.set()
        if self.wandb is None or self.agent_id is None:
            return
        try:
            await self.wandb.update_launch_agent(self.agent_id, "KILLED")
            log.info("reported KILLED to W&B; running workloads are left for the next start")
        except Exception as exc:
            log.warning("could not report KILLED to W&B: %s", exc)


async def run_agent(
    config: AgentConfig, *, stop_event: asyncio.Event | None = None, **options: Any
) -> Agent:
    """Run an agent until it stops; returns it (for its metrics and tables)."""
    agent = Agent(config, **options)
    await agent.run(stop_event)
    return agent
