"""The agent's Prometheus metrics, on a registry of its own (one per agent, not global).

Label values are bounded sets (queue names from the configuration, kinds, failure reasons from
the `Diagnosis` enum, stages), never run ids: a metric label per run would grow without bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
