"""W&B sweeps as the Launch agent sees them: which items are sweep schedulers, which sweep
states a sweep run may start in, and W&B's own words for the run checks.

Modelled on wandb 0.31.0: `sdk/launch/agent/agent.py` (`_is_scheduler_job`,
`check_sweep_state`, `finish_thread_id`), `sdk/launch/sweeps/scheduler.py`
(`Scheduler.PLACEHOLDER_URI`) and `cli/cli.py` (`launch_sweep`, which pushes the scheduler item).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# `Scheduler.PLACEHOLDER_URI`: the `uri` of every scheduler item W&B pushes.
PLACEHOLDER_URI = "placeholder-uri-scheduler"
LOCAL_PROCESS = "local-process"
# The workload annotation that marks a sweep scheduler (adoption after a restart keeps it
# counted against `max_schedulers`, not `max_jobs`).
SCHEDULER_MARK = "launch-agent.io/sweep-scheduler"

# `check_sweep_state`: a sweep run starts only while its sweep is one of these.
RUNNABLE_SWEEP_STATES = frozenset({"RUNNING", "PAUSED"})

# `finish_thread_id`, verbatim: what W&B's agent reports when the W&B run never left `pending`.
NO_WANDB_INIT = "The submitted job exited successfully but failed to call wandb.init"
NOT_STARTED = "The submitted run was not successfully started"
# `RUN_INFO_GRACE_PERIOD`: how long W&B's agent waits for the run to leave `pending`.
RUN_INFO_GRACE_SECONDS = 60.0


def is_scheduler_item(run_spec: Mapping[str, Any]) -> bool:
    """`_is_scheduler_job`: the placeholder uri; with `resource: local-process` also a job, or
    an entry point `wandb scheduler <sweep> ...`."""
    if run_spec.get("uri") != PLACEHOLDER_URI:
        return False
    if run_spec.get("resource") == LOCAL_PROCESS:
        if run_spec.get("job"):
            return True
        overrides = run_spec.get("overrides")
        cmd = overrides.get("entry_point") if isinstance(overrides, Mapping) else None
        if not isinstance(cmd, list) or len(cmd) < 3:
            return False
        if cmd[:2] != ["wandb", "scheduler"]:
            return False
    return True


def is_custom_scheduler(run_spec: Mapping[str, Any]) -> bool:
    """A scheduler job (W&B's sweep-scheduler job, Optuna, ...): the submitter's code, unlike
    the standard `wandb scheduler` command of the agent's own image."""
    return is_scheduler_item(run_spec) and bool(run_spec.get("job"))


def scheduler_sweep_id(run_spec: Mapping[str, Any]) -> str | None:
    """The sweep a scheduler item drives. `launch-sweep` pushes `run_id: WANDB_SWEEP_ID` and
    `entry_point: [wandb, scheduler, WANDB_SWEEP_ID]`; W&B replaces the placeholder with the
    sweep's name ("scheduler run_id should == sweep_id", `_check_run_finished`)."""
    run_id = run_spec.get("run_id")
    if isinstance(run_id, str) and run_id:
        return run_id
    overrides = run_spec.get("overrides")
    cmd = overrides.get("entry_point") if isinstance(overrides, Mapping) else None
    if isinstance(cmd, list) and len(cmd) >= 3 and isinstance(cmd[2], str) and cmd[2]:
        return cmd[2]
    return None


def sweep_state_refusal(sweep_id: str, state: str | None) -> str | None:
    """`check_sweep_state`'s message when a sweep run may not start; None when it may."""
    if state in RUNNABLE_SWEEP_STATES:
        return None
    return (
        f"Launch agent picked up sweep job, but sweep ({sweep_id}) was in a terminal state"
        f" ({state})"
    )
