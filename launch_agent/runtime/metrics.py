"""The agent's Prometheus metrics, on a registry of its own (one per agent, not global).

Label values are bounded sets (queue names from the configuration, kinds, failure reasons from
the `Diagnosis` enum, stages), never run ids: a metric label per run would grow without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from launch_agent.runtime.status.activity import Activity

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
BUILD_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # Recent events for the status page (bounded); recorded next to the counters below.
    activity: Activity = field(default_factory=Activity)

    def __post_init__(self) -> None:
        r = self.registry
        self.pops = Counter(
            "launch_agent_pops_total", "Run queue items popped from W&B", ["queue"], registry=r
        )
        self.empty_polls = Counter(
            "launch_agent_empty_polls_total", "Poll requests that returned no item", registry=r
        )
        self.submits = Counter(
            "launch_agent_submits_total",
            "Workloads created (or adopted after a 409)",
            ["queue", "kind", "outcome"],
            registry=r,
        )
        self.failures = Counter(
            "launch_agent_failures_total",
            "Run queue items failed in W&B, by stage and reason",
            ["stage", "reason"],
            registry=r,
        )
        self.outcomes = Counter(
            "launch_agent_run_outcomes_total", "Terminal run states observed", ["state"], registry=r
        )
        self.queue_latency = Histogram(
            "launch_agent_pop_to_create_seconds",
            "Time from pop to workload created",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.watch_restarts = Counter(
            "launch_agent_watch_restarts_total",
            "Watch reconnects, by kind, namespace and cause",
            ["kind", "namespace", "cause"],
            registry=r,
        )
        self.inflight = Gauge(
            "launch_agent_inflight_runs", "Runs created and not yet terminal", registry=r
        )
        self.api_latency = Histogram(
            "launch_agent_api_request_seconds",
            "Latency of calls to W&B and Kubernetes",
            ["api", "operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.api_errors = Counter(
            "launch_agent_api_errors_total",
            "Failed calls to W&B and Kubernetes, by status",
            ["api", "operation", "status"],
            registry=r,
        )
        self.kube_throttled = Counter(
            "launch_agent_kubernetes_throttled_total",
            "429s from the Kubernetes API server, by the UID of the priority level that"
            " refused them (X-Kubernetes-PF-PriorityLevel-UID; 'none' without one)",
            ["priority_level"],
            registry=r,
        )
        self.paced = Counter(
            "launch_agent_dispatch_paced_total",
            "Runs whose start waited for dispatch.max_runs_per_second_per_project",
            registry=r,
        )
        self.spec_errors = Gauge(
            "launch_agent_queue_spec_invalid",
            "1 while the named queue spec file is invalid (the previous version stays in force)",
            ["file"],
            registry=r,
        )
        self.spec_reloads = Counter(
            "launch_agent_queue_spec_reloads_total",
            "Queue spec files loaded, by result",
            ["result"],
            registry=r,
        )

        # --- state, set from the status snapshot at every scrape (`export`) ---------------
        self.leader = Gauge(
            "launch_agent_leader", "1 while this replica is the leader (dispatches)", registry=r
        )
        self.last_poll = Gauge(
            "launch_agent_last_successful_poll_timestamp_seconds",
            "Unix time of the last successful W&B poll (0: none yet)",
            registry=r,
        )
        # Read when scraped (the handler runs on the agent's loop): a leak of tasks shows as a
        # slope in `launch-agent bench soak`.
        self.asyncio_tasks = Gauge(
            "launch_agent_asyncio_tasks", "asyncio tasks alive in the agent's loop", registry=r
        )
        self.asyncio_tasks.set_function(_tasks_alive)
        self.runs_by_state = Gauge(
            "launch_agent_runs", "Runs the agent tracks, by state", ["state"], registry=r
        )
        self.past_deadline = Gauge(
            "launch_agent_runs_past_start_deadline",
            "Runs not running after tracking.start_timeout_seconds",
            registry=r,
        )
        self.quota_used = Gauge(
            "launch_agent_quota_used",
            "Quota charged to a node, in the resource's base unit (cores, bytes, GPUs, runs)",
            ["node", "resource"],
            registry=r,
        )
        self.quota_borrowed = Gauge(
            "launch_agent_quota_borrowed",
            "Usage of a node above its min (borrowed from siblings), in base units",
            ["node", "resource"],
            registry=r,
        )
        self.quota_min = Gauge(
            "launch_agent_quota_min", "A node's guaranteed quota", ["node", "resource"], registry=r
        )
        self.quota_max = Gauge(
            "launch_agent_quota_max",
            "A node's quota limit (absent: unbounded)",
            ["node", "resource"],
            registry=r,
        )
        self.quota_pending = Gauge(
            "launch_agent_quota_pending_runs",
            "Runs waiting for quota, by leaf",
            ["leaf"],
            registry=r,
        )
        # --- builds ----------------------------------------------------------------------
        self.builds = Counter(
            "launch_agent_builds_total",
            "Image builds by result (built, cached: the registry had the image, failed)",
            ["result"],
            registry=r,
        )
        self.untrusted_tags = Counter(
            "launch_agent_build_untrusted_tags_total",
            "Registry tags whose digest this agent did not build (a poisoned build cache), by"
            " what was done (rebuilt, refused)",
            ["action"],
            registry=r,
        )
        self.build_seconds = Histogram(
            "launch_agent_build_duration_seconds",
            "Time to get a run's image, by result",
            ["result"],
            buckets=BUILD_BUCKETS,
            registry=r,
        )

    # --- recorded events (counter and status page together) --------------------------------

    def popped(self, queue: str, item: str) -> None:
        self.pops.labels(queue=queue).inc()
        self.activity.popped(queue, item)

    def failed(self, item: str, stage: str, reason: str, message: str) -> None:
        self.failures.labels(stage=stage, reason=reason).inc()
        self.activity.failed(item, stage, reason, message)

    def built(self, result: str, seconds: float, image: str) -> None:
        self.builds.labels(result=result).inc()
        self.build_seconds.labels(result=result).observe(seconds)
        self.activity.built(result, seconds, image)

    def untrusted_tag(self, image: str, digest: str, action: str) -> None:
        self.untrusted_tags.labels(action=action).inc()

    def api_call(self, api: str, operation: str, status: int | None, seconds: float) -> None:
        self.api_latency.labels(api=api, operation=operation).observe(seconds)
        if status is None or status >= 400:
            code = "network" if status is None else str(status)
            self.api_errors.labels(api=api, operation=operation, status=code).inc()
        self.activity.api_call(api, status)

    def kube_throttle(self, priority_level: str, flow_schema: str) -> None:
        self.kube_throttled.labels(priority_level=priority_level or "none").inc()

    def export(self, snapshot: Mapping[str, Any]) -> None:
        """Set the state gauges from a status snapshot (`status.snapshot.build`)."""
        agent = snapshot["agent"]
        # "single" (no leader election) dispatches like a leader: the no-leader alert counts it.
        self.leader.set(1 if agent["role"] in ("leader", "single") else 0)
        self.last_poll.set(agent["last_poll_unix"] or 0)
        runs = snapshot["runs"]
        for state, count in runs["by_state"].items():
            self.runs_by_state.labels(state=state).set(count)
        self.past_deadline.set(runs["past_start_deadline"])
        quota = snapshot["quota"]
        if quota is None:
            return
        for node in quota["nodes"]:
            for res in node["resources"]:
                labels = {"node": node["name"], "resource": res["resource"]}
                self.quota_used.labels(**labels).set(res["used"])
                self.quota_borrowed.labels(**labels).set(res["borrowed"])
                self.quota_min.labels(**labels).set(res["min"])
                if res["max"] is not None:
                    self.quota_max.labels(**labels).set(res["max"])
            if node["leaf"]:
                self.quota_pending.labels(leaf=node["name"]).set(node["pending"])

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _tasks_alive() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:
        return 0.0  # scraped outside a running loop (a test's registry read)
