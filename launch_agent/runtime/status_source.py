"""Reads the runtime objects into the plain data `snapshot.build` takes (the impure half).

Given its collaborators in its constructor (`runtime/agent.py` wires it); the quota admission
is made after the health server starts, so it is reached through a function the agent passes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from launch_agent.model.config import AgentConfig
from launch_agent.model.run_state import RunState
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.health import Readiness
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.status.snapshot import MAX_RUNS, AgentInfo, QuotaRow, RunRow, build

if TYPE_CHECKING:
    from launch_agent.runtime.admission.quota import QuotaAdmission

# W&B's WANDB_LAUNCH_START_TIMEOUT default (the chart's `agent.startTimeout`), for the page and
# `launch_agent_runs_past_start_deadline` while `tracking.start_timeout_seconds` is unset.
DEFAULT_START_DEADLINE = 1800.0
REASONS = {
    None: "creating the workload",
    RunState.QUEUED: "waiting for admission",
    RunState.STARTING: "pods not running yet",
    RunState.RUNNING: "",
}


def _none() -> None:
    return None


class StatusSource:
    def __init__(
        self,
        config: AgentConfig,
        runs: RunTable,
        metrics: Metrics,
        readiness: Readiness,
        *,
        version: str,
        hostname: str,
        now: Callable[[], datetime],
        clock: Clock = monotonic,
        quota: Callable[[], QuotaAdmission | None] = _none,
        entity: Callable[[], str | None] = _none,
    ) -> None:
        self.config = config
        self.runs = runs
        self.metrics = metrics
        self.readiness = readiness
        self.version = version
        self.hostname = hostname
        self.now = now
        self.clock = clock
        self.quota = quota
        self.entity = entity
        self.started_at = now()

    def _wall(self, moment: float | None, now: datetime, mono: float) -> datetime | None:
        return None if moment is None else now - timedelta(seconds=mono - moment)

    def _reason(self, record: RunRecord, quota: QuotaAdmission | None) -> str:
        if record.stop_requested_at is not None:
            return "stop requested in W&B"
        if record.finishing:
            return f"{record.state.value if record.state else 'ended'}: reporting to W&B"
        if quota is not None and record.state in (None, RunState.QUEUED):
            run = quota.engine.runs.get(record.rqi_id)
            if run is not None:
                return quota.engine.explain(run.id)
        reason = REASONS.get(record.state, "")
        if record.warned:
            reason = (
                "; ".join([reason, *sorted(record.warned)])
                if reason
                else ", ".join(sorted(record.warned))
            )
        return reason

    def snapshot(self) -> dict[str, Any]:
        config = self.config
        now = self.now()
        mono = self.clock()
        quota = self.quota()
        role = self.readiness.role
        leader = self.readiness.leader or (self.hostname if role != "standby" else "")
        info = AgentInfo(
            name=config.agent_name,
            version=self.version,
            role=str(role),
            leader=str(leader),
            hostname=self.hostname,
            started_at=self.started_at,
            wandb_base_url=config.base_url,
            entity=self.entity(),
            namespaces=list(config.namespaces),
            quota_mode=config.quota.mode,
            builder=(config.builder.type if config.builder is not None else None) or "noop",
            problems=self.readiness.problems(mono),
            last_poll=self._wall(self.readiness.last_poll_ok, now, mono),
            refresh_seconds=config.status.refresh_seconds,
        )
        # Newest first; only the runs the snapshot shows get a reason (the quota engine's
        # explanation walks the tree: not for 10,000 runs at every refresh).
        records = sorted(self.runs, key=lambda r: r.started, reverse=True)
        rows = [
            RunRow(
                item=r.rqi_id,
                queue=r.queue,
                entity=r.entity,
                project=r.project,
                run_id=r.run_id,
                state=r.state.value if r.state is not None else "creating",
                reason=self._reason(r, quota) if i < MAX_RUNS else "",
                age_seconds=max(0.0, mono - r.started),
                workload=r.workload,
                adopted=r.adopted,
                worker=r.worker,
                placements=r.placements,
            )
            for i, r in enumerate(records)
        ]
        return build(
            info,
            queues=config.all_queues,
            runs=rows,
            activity=self.metrics.activity.view(),
            quota=None if quota is None else quota_rows(quota),
            start_deadline_seconds=float(
                config.tracking.start_timeout_seconds or DEFAULT_START_DEADLINE
            ),
        )

    def export(self) -> None:
        """Bring the state gauges up to date (before a scrape)."""
        self.metrics.export(self.snapshot())


def quota_rows(quota: QuotaAdmission) -> list[QuotaRow]:
    pending = quota.pending_by_leaf()
    rows: list[QuotaRow] = []

    def walk(node: Any, depth: int) -> None:
        rows.append(
            QuotaRow(
                name=node.name,
                depth=depth,
                leaf=node.is_leaf,
                min=dict(node.min),
                max=dict(node.max),
                used=quota.engine.usage(node.name),
                pending=pending.get(node.name, 0),
                queues=tuple(quota.leaves.get(node.name, node.queues)),
            )
        )
        for child in node.children:
            walk(child, depth + 1)

    walk(quota.tree.root, 0)
    return rows
