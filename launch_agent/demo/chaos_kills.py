"""Kills aimed at the phases of a run: which request marks each phase, and the kill schedule.

Each kill is armed at a moment drawn from the seed and aimed at one phase; it fires when the
next request of that phase reaches a sandbox server (seen through `Faults.observers`, so the
process that sent it is killed while the request is in flight; some after a short delay, so
the server has answered and the agent has not acted on the answer yet). "tracking" has no
request of its own: it fires at the first moment a workload is running. A phase that does not
occur within `FALLBACK_SECONDS` of arming (quota full so nothing is popped, nothing left to
clean up) gives way to a kill at that moment, recorded as `random`; during the W&B outage the
wait does not count for the phases that need W&B (all but tracking).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from launch_agent.demo.chaos_builds import KANIKO_NS

PHASES = ("pop", "build", "create", "ack", "tracking", "report", "clean-up")
RANDOM = "random"
FALLBACK_SECONDS = 10.0

# (server, route key) -> phase. Kubernetes keys are "VERB plural" (`sandbox/kube`), W&B keys
# the GraphQL operation (`sandbox/wandb`).
_WANDB = {
    "popFromRunQueue": "pop",
    "ackRunQueueItem": "ack",
    "failRunQueueItem": "report",
    "pushToRunQueue": "report",  # a preempted run's requeue
}
_KUBE = {
    "POST jobs": "create",
    "POST jobsets": "create",
    "POST pytorchjobs": "create",
    "POST secrets": "create",
    "PATCH jobs": "clean-up",  # the `reported` annotation (also a quota resume)
    "DELETE jobs": "clean-up",
    "DELETE jobsets": "clean-up",
    "DELETE pytorchjobs": "clean-up",
    "DELETE secrets": "clean-up",
}


def phase_of(server: str, key: str, path: str) -> str | None:
    """The phase a request belongs to, if it marks one."""
    if server == "wandb":
        return _WANDB.get(key)
    if key == "POST jobs" and f"/namespaces/{KANIKO_NS}/" in path:
        return "build"  # a Kaniko Job
    return _KUBE.get(key)


@dataclass
class Kill:
    """One planned kill: armed `at` seconds after the start, aimed at `phase`."""

    at: float
    phase: str
    delay: float
    fired: str = ""  # the phase it hit, or RANDOM; empty until it fired
    fired_at: float = 0.0
    victim: str = ""


def schedule(
    kills: int, rng: random.Random, window: float, phases: tuple[str, ...] = PHASES
) -> list[Kill]:
    """`kills` kills over `window` seconds after a 3 s start, spread over `phases`: they are
    dealt in a shuffled round so K >= len(phases) kills cover each at least once."""
    order: list[str] = []
    while len(order) < kills:
        deal = list(phases)
        rng.shuffle(deal)
        order += deal
    times = sorted(rng.uniform(3, 3 + window) for _ in range(kills))
    # Most kills land at arrival (the request in flight); a third a few ms later.
    delays = [rng.uniform(0.0, 0.05) if rng.random() < 1 / 3 else 0.0 for _ in range(kills)]
    return [Kill(t, p, d) for t, p, d in zip(times, order[:kills], delays, strict=True)]
