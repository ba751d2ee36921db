"""Keeping a finished workload from its TTL while W&B may still offer its item again.

A finished workload whose item was never acked (its creator was killed between the create and
the ack, and the lease lapsed) is the only proof that the item ran: while it exists, a second
pop of the item adopts it (the name is deterministic, a create answers 409), and the finisher
keeps it until W&B offers the item and the dispatcher acks that offer (runtime/settlement.py).
The record of that wait is in memory; the Job is in the cluster, but its
`ttlSecondsAfterFinished` (an hour by default) deletes it whatever the agent waits for. When the
wait outlasts the TTL (in quota mode, a full leaf pops nothing from its queues for as long as it
stays full) and the agent is then killed again, nothing is left to say the item ran, and the
next offer creates it a second time.

So while its item is unsettled the workload's TTL is taken off, and what it was is kept in
the annotation `launch-agent.io/ttl-held`. Once the item is settled, a Job's TTL is put back in
the same patch that marks it reported; a JobSet is deleted by the agent, as every custom
resource is once its end is handled. Only kinds whose TTL is known to be mutable are held:
- batch/v1 Job: the TTL-after-finished controller reads the TTL again from the API server just
  before it deletes ("the Job TTL might be stale",
  `pkg/controller/ttlafterfinished/ttlafterfinished_controller.go`, `processJob`);
- JobSet: `ttl_after_finished.go` reads it at each reconcile, and the webhook holds only
  `replicatedJobs` and `managedBy` immutable (kubernetes-sigs/jobset
  `pkg/webhooks/jobset_webhook.go`, `ValidateUpdate`).
Other kinds are not held (Volcano's admission refuses most spec updates; a RayJob's TTL deletes
its cluster, not the RayJob).

Pure: the patches are data; the finisher sends them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from launch_agent.model import labels as L
from launch_agent.tracking.views import Meta

TTL_HELD = L.PREFIX + "ttl-held"  # the workload's TTL while its item is unsettled

# (API group, kind) of the workloads held, each with `spec.ttlSecondsAfterFinished`.
HELD_KINDS = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet")})

_TTL = "ttlSecondsAfterFinished"


def ttl_of(job: Mapping[str, Any]) -> int | None:
    """The workload's `spec.ttlSecondsAfterFinished`, if it has a valid one."""
    value = (job.get("spec") or {}).get(_TTL)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def ttl_held_on(job: Mapping[str, Any] | None) -> int | None:
    """The TTL a hold took off this workload (its `launch-agent.io/ttl-held`), if any."""
    text = Meta(job).annotation(TTL_HELD)
    # Anyone who may patch the Job may write it: only a plain count of seconds is taken back.
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,9}", text):
        return None
    return int(text)


def hold_patch(ttl: int) -> dict[str, Any]:
    """A merge patch (RFC 7386: null removes) that takes the TTL off and remembers it."""
    return {"metadata": {"annotations": {TTL_HELD: str(ttl)}}, "spec": {_TTL: None}}


def release_patch(ttl: int) -> dict[str, Any]:
    """A merge patch that puts the held TTL back and drops the annotation."""
    return {"metadata": {"annotations": {TTL_HELD: None}}, "spec": {_TTL: ttl}}


def merged(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Two merge patches as one (so a Job is marked and released in one request)."""
    out: dict[str, Any] = dict(first)
    for key, value in second.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
