"""Which outcome a new pod plays: the scripts, the annotations up its owner chain, the attempts.

Shared by the simulated cluster (whose owners are in its own store) and by the real-cluster
tier's node simulator (whose owners it reads from a real API server), so a scenario scripted
once plays the same on both. The rules, in this order, for the pod and then each controlling
owner up the chain (Job, JobSet, TrainJob, ...): a script whose label selector matches that
object's labels (latest first), then that object's `sandbox.launch-agent.io/outcome`
annotation. The Nth pod a controller creates plays the Nth attempt of the outcome. A malformed
annotation is a problem (reported by the caller as a Warning Event) and the default is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from launch_agent.sandbox.cluster.children import RUN_FOREVER
from launch_agent.sandbox.cluster.outcomes import (
    ANNOTATION,
    Outcome,
    OutcomeError,
    parse_outcome,
    pick,
)
from launch_agent.sandbox.cluster.rayjob import ATTEMPTS_OF
from launch_agent.sandbox.kube.selectors import LabelSelector, parse_label_selector

Obj = dict[str, Any]
# (the object whose annotation is malformed, the problem's text)
OnProblem = Callable[[Obj, str], None]


class OutcomeBook:
    def __init__(self, default_outcome: str = "succeed after=5s") -> None:
        self.default = parse_outcome(default_outcome)
        self.problems: list[str] = []
        self._scripts: list[tuple[LabelSelector, tuple[Outcome, ...]]] = []
        self._attempts: dict[str, int] = {}

    def script(self, selector: str, outcome: str | Outcome | Sequence[Outcome]) -> None:
        """Pods of workloads whose labels match `selector` get `outcome` (grammar in outcomes)."""
        if isinstance(outcome, str):
            attempts = parse_outcome(outcome)
        elif isinstance(outcome, Outcome):
            attempts = (outcome,)
        else:
            attempts = tuple(outcome)
        self._scripts.insert(0, (parse_label_selector(selector), attempts))

    def clear_scripts(self) -> None:
        self._scripts.clear()

    def forget(self, owner_uids: set[str]) -> None:
        """Drop the attempt counts of owners that are gone (a long-running simulator)."""
        for uid in [u for u in self._attempts if u not in owner_uids]:
            del self._attempts[uid]

    def outcome_for(self, chain: Sequence[Obj], on_problem: OnProblem) -> Outcome:
        """`chain`: the pod, then its controlling owners, nearest first."""
        pod = chain[0]
        own = (pod["metadata"].get("annotations") or {}).get(ANNOTATION)
        labels = pod["metadata"].get("labels")
        if own == RUN_FOREVER[ANNOTATION] and not any(s.matches(labels) for s, _ in self._scripts):
            # A controller's infrastructure pod (a Ray head or worker) takes no attempt of its
            # owner's outcome: those belong to the pods that play the workload's result.
            return parse_outcome(own)[0]
        owner = chain[1]["metadata"]["uid"] if len(chain) > 1 else pod["metadata"]["uid"]
        # A controller that recreates its child for each retry (KubeRay's submitter Job) counts
        # the attempts on itself, so the Nth pod over all retries plays the Nth attempt.
        owner = ((chain[1]["metadata"].get("annotations") or {}) if len(chain) > 1 else {}).get(
            ATTEMPTS_OF, owner
        )
        attempt = self._attempts.get(owner, 0)
        self._attempts[owner] = attempt + 1
        for obj in chain:
            meta = obj["metadata"]
            for selector, attempts in self._scripts:
                if selector.matches(meta.get("labels")):
                    return pick(attempts, attempt)
            text = (meta.get("annotations") or {}).get(ANNOTATION)
            if text is not None:
                try:
                    return pick(parse_outcome(text), attempt)
                except OutcomeError as exc:
                    where = f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"
                    problem = f"{where}: annotation {ANNOTATION}: {exc}"
                    self.problems.append(problem)
                    on_problem(obj, problem)
                    break
        return pick(self.default, attempt)
