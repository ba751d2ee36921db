"""The batch/v1 Job's `podFailurePolicy` rule that makes a disruption outlive its pod.

A preempted, drained or evicted pod carries `DisruptionTarget`, and is then deleted. Without a
rule the Job controller counts it against `backoffLimit` and, at 0, fails the Job with
`BackoffLimitExceeded`: a leader that was down while the pod existed adopts a Job whose own
words blame the run. With `{action: FailJob, onPodConditions: [{type: DisruptionTarget}]}`
the controller writes the disruption onto the Job (kubernetes
`pkg/controller/job/pod_failure_policy.go`, `matchPodFailurePolicy`: reason
`PodFailurePolicy`, "Pod ns/name has condition DisruptionTarget matching FailJob rule at index
N"), which `tracking/assess.py` reads as preempted: requeued within `tracking.max_requeues`.

When the rule is added (kubernetes `pkg/apis/batch/validation/validation.go`,
`validateJobSpec` / `validatePodFailurePolicy` / `validatePodReplacementPolicy`, refuse the Job
otherwise):
- the pod template's `restartPolicy` is `Never` (a policy requires it);
- `podReplacementPolicy` is unset or `Failed` (a policy allows only `Failed`);
- the admin's own policy, if any, has fewer than 20 rules (`maxPodFailurePolicyRules`) and
  none about `DisruptionTarget`: ours is appended. Rules match first to last, so every pod
  the admin's rules match keeps the admin's action (an `Ignore` on DisruptionTarget, retrying
  in place, stays theirs); only a disrupted pod none of them matches, which would be counted
  and fail the Job under a reason that hides the disruption, gets ours.
"""

from __future__ import annotations

from typing import Any

DISRUPTION = "DisruptionTarget"
# validation.go `maxPodFailurePolicyRules`.
MAX_RULES = 20
RULE: dict[str, Any] = {
    "action": "FailJob",
    # The API server defaults `status` to True (pkg/apis/batch/v1/defaults.go,
    # `SetDefaults_Job`); written out so the object reads back as it was sent.
    "onPodConditions": [{"type": DISRUPTION, "status": "True"}],
}


def add_disruption_rule(job_spec: dict[str, Any]) -> bool:
    """Append the rule to a batch/v1 JobSpec where it is valid and the admin left room for it;
    True when it was added."""
    template = job_spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod_spec, dict) or pod_spec.get("restartPolicy") != "Never":
        return False
    if job_spec.get("podReplacementPolicy") not in (None, "Failed"):
        return False
    policy = job_spec.get("podFailurePolicy")
    if policy is None:
        job_spec["podFailurePolicy"] = {"rules": [_rule()]}
        return True
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list) or len(rules) >= MAX_RULES or any(map(_about, rules)):
        return False
    rules.append(_rule())
    return True


def _rule() -> dict[str, Any]:
    return {**RULE, "onPodConditions": [dict(p) for p in RULE["onPodConditions"]]}


def _about(rule: object) -> bool:
    """The admin's rule decides what a disruption does."""
    if not isinstance(rule, dict):
        return False
    patterns = rule.get("onPodConditions")
    return isinstance(patterns, list) and any(
        isinstance(p, dict) and p.get("type") == DISRUPTION for p in patterns
    )
