"""Warning Events an operator repeats on every failed reconcile, written once.

A real controller re-emits its Event on each retry (client-go's recorder folds repeats into
one Event with a growing `count`); the sandbox's reconcile loop runs until a pass writes
nothing, so an Event per pass would never settle. One Event per (object, reason, message) is
what `kubectl describe` and an Events watch show first.
"""

from __future__ import annotations

from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.kube.store import Obj


def warn_once(ctx: Ctx, involved: Obj, reason: str, message: str, source: str) -> None:
    meta = involved["metadata"]
    events = ctx.store.list(ctx.store.rt("events"), meta.get("namespace") or "default")
    for event in events:
        if (
            event.get("involvedObject", {}).get("uid") == meta["uid"]
            and event.get("reason") == reason
            and event.get("message") == message
        ):
            return
    ctx.event(involved, "Warning", reason, message, source)
