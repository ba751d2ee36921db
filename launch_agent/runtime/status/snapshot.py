"""The status snapshot: plain data in, one JSON-able mapping out (pure; no I/O, no clock).

The same mapping is served at `/api/status`, rendered as HTML by `page.py` and as a table by
`launch-agent status`. Top-level keys: `agent`, `queues`, `runs`, `quota`, `builds`, `failures`.
Bounded: at most `max_runs` runs (the most recent first; `runs.total` and `runs.by_state` count
them all) and the failures and builds the `Activity` recorder kept.

Nothing from the configuration is copied in except what is listed here (names, versions,
counts, URLs without credentials): the snapshot never sees the API key or registry credentials.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from launch_agent.model.run_state import RunState
from launch_agent.runtime.status.activity import ActivityView

MAX_RUNS = 200
NANO = 1_000_000_000
# Runs created and not started yet: the ones a start deadline applies to. Runs waiting for
# admission (`queued`) are not: they wait by design, and `launch_agent_quota_pending_runs`
# (with its alert) tells how long.
NOT_STARTED = ("creating", RunState.STARTING.value)
LIVE_STATES = ("creating", *(s.value for s in RunState))


@dataclass(frozen=True, slots=True)
class AgentInfo:
    name: str
    version: str
    role: str  # leader, standby
    leader: str  # the leader's identity (this replica's host name for a single replica)
    hostname: str
    started_at: datetime
    wandb_base_url: str
    entity: str | None
    namespaces: Sequence[str]
    quota_mode: str
    builder: str
    problems: Sequence[str]  # what /readyz says (empty: ready)
    last_poll: datetime | None
    refresh_seconds: int = 10


@dataclass(frozen=True, slots=True)
class RunRow:
    item: str
    queue: str
    entity: str
    project: str
    run_id: str
    state: str  # a RunState value, or `creating` before the first observation
    reason: str
    age_seconds: float
    workload: str
    adopted: bool = False
    # MultiKueue: the worker cluster the run is placed on now, and every one it was placed on.
    worker: str | None = None
    placements: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One quota node; quantities in nanounits as the quota engine keeps them."""

    name: str
    depth: int
    leaf: bool
    min: Mapping[str, int]
    max: Mapping[str, int]
    used: Mapping[str, int]
    pending: int = 0
    queues: Sequence[str] = field(default_factory=tuple)


def app_url(base_url: str) -> str:
    """W&B's UI for an API URL: `https://api.wandb.ai` → `https://wandb.ai` (a leading `api.`
    dropped, as on W&B's hosted service; a dedicated server serves both on one host).
    Any userinfo in the URL is dropped: a URL is shown, a credential never."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if host.startswith("api."):
        host = host[4:]
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def run_url(base_url: str, entity: str, project: str, run_id: str) -> str | None:
    if not (entity and project and run_id):
        return None
    path = "/".join(quote(p, safe="") for p in (entity, project, "runs", run_id))
    return f"{app_url(base_url)}/{path}"


def _units(nanos: int) -> float | int:
    value = nanos / NANO
    return int(value) if value == int(value) else round(value, 3)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _agent(info: AgentInfo, now: datetime) -> dict[str, Any]:
    return {
        "name": info.name,
        "version": info.version,
        "role": info.role,
        "leader": info.leader,
        "hostname": info.hostname,
        "started_at": _iso(info.started_at),
        "uptime_seconds": round(max(0.0, (now - info.started_at).total_seconds()), 1),
        "ready": not info.problems,
        "problems": list(info.problems),
        "wandb": {"url": app_url(info.wandb_base_url), "entity": info.entity},
        "namespaces": list(info.namespaces),
        "quota_mode": info.quota_mode,
        "builder": info.builder,
        "last_poll": _iso(info.last_poll),
        "last_poll_unix": None if info.last_poll is None else info.last_poll.timestamp(),
        "refresh_seconds": info.refresh_seconds,
        "now": _iso(now),
    }


def _apis(activity: ActivityView) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for api in ("wandb", "kubernetes"):
        health = activity.apis.get(api)
        if health is None:
            out[api] = {"ok": None, "last_ok": None, "last_error": None, "last_status": None}
            continue
        ok = health.last_ok is not None and (
            health.last_error is None or health.last_ok >= health.last_error
        )
        out[api] = {
            "ok": ok,
            "last_ok": _iso(health.last_ok),
            "last_error": _iso(health.last_error),
            "last_status": health.last_status,
        }
    return out


def _queues(
    queues: Sequence[str], runs: Sequence[RunRow], activity: ActivityView
) -> list[dict[str, Any]]:
    running = Counter(r.queue for r in runs if r.state == RunState.RUNNING.value)
    live = Counter(r.queue for r in runs)
    return [
        {
            "name": queue,
            "popped_last_hour": activity.popped_hour.get(queue, 0),
            "failed_last_hour": activity.failed_hour.get(queue, 0),
            "running": running[queue],
            "tracked": live[queue],
            "last_pop": _iso(activity.last_pop.get(queue)),
        }
        for queue in queues
    ]


def _runs(
    runs: Sequence[RunRow], base_url: str, start_deadline: float, max_runs: int
) -> dict[str, Any]:
    by_state = Counter(r.state for r in runs)
    newest = sorted(runs, key=lambda r: r.age_seconds)[:max_runs]
    past = [r for r in runs if r.state in NOT_STARTED and r.age_seconds > start_deadline]
    return {
        "total": len(runs),
        "shown": len(newest),
        "by_state": {state: by_state.get(state, 0) for state in LIVE_STATES},
        "past_start_deadline": len(past),
        "start_deadline_seconds": start_deadline,
        "items": [
            {
                "item": r.item,
                "queue": r.queue,
                "state": r.state,
                "reason": r.reason,
                "age_seconds": round(r.age_seconds, 1),
                "workload": r.workload,
                "adopted": r.adopted,
                "worker": r.worker,
                "placements": list(r.placements),
                "run_id": r.run_id,
                "url": run_url(base_url, r.entity, r.project, r.run_id),
                "past_start_deadline": r.state in NOT_STARTED and r.age_seconds > start_deadline,
            }
            for r in newest
        ],
    }


def _quota(rows: Sequence[QuotaRow] | None) -> dict[str, Any] | None:
    if rows is None:
        return None
    nodes = []
    for row in rows:
        names = sorted(set(row.min) | set(row.max) | set(row.used))
        resources = []
        for res in names:
            used, low = row.used.get(res, 0), row.min.get(res, 0)
            high = row.max.get(res)
            resources.append(
                {
                    "resource": res,
                    "used": _units(used),
                    "min": _units(low),
                    "max": None if high is None else _units(high),
                    "borrowed": _units(max(0, used - low)),
                }
            )
        nodes.append(
            {
                "name": row.name,
                "depth": row.depth,
                "leaf": row.leaf,
                "queues": list(row.queues),
                "pending": row.pending,
                "resources": resources,
            }
        )
    return {"nodes": nodes, "pending": sum(r.pending for r in rows if r.leaf)}


def _builds(builder: str, activity: ActivityView) -> dict[str, Any]:
    results = Counter(b.result for b in activity.builds)
    return {
        "builder": builder,
        "recent": {name: results.get(name, 0) for name in ("built", "cached", "failed")},
        "items": [
            {
                "at": _iso(b.at),
                "result": b.result,
                "seconds": round(b.seconds, 1),
                "image": b.image,
            }
            for b in reversed(activity.builds)
        ],
    }


def _failures(activity: ActivityView) -> list[dict[str, Any]]:
    return [
        {
            "at": _iso(f.at),
            "item": f.item,
            "queue": f.queue,
            "stage": f.stage,
            "reason": f.reason,
            "message": f.message,
        }
        for f in reversed(activity.failures)
    ]


def build(
    info: AgentInfo,
    *,
    queues: Sequence[str],
    runs: Sequence[RunRow],
    activity: ActivityView,
    quota: Sequence[QuotaRow] | None,
    start_deadline_seconds: float,
    max_runs: int = MAX_RUNS,
) -> dict[str, Any]:
    """The status snapshot (see the module docstring); `activity.now` is its moment."""
    now = activity.now
    agent = _agent(info, now)
    agent["apis"] = _apis(activity)
    return {
        "agent": agent,
        "queues": _queues(queues, runs, activity),
        "runs": _runs(runs, info.wandb_base_url, start_deadline_seconds, max_runs),
        "quota": _quota(quota),
        "builds": _builds(info.builder, activity),
        "failures": _failures(activity),
    }
