"""The W&B environment of a run's main container, as the reference agent injects it (§2.4).

Differences from `wandb launch-agent`, on purpose:

- `WANDB_API_KEY` is always a `secretKeyRef` to the per-namespace Secret named in the
  settings; W&B writes the key in plain text into custom resources. `runSpec._wandb_api_key`
  (a per-run key) is not used, so no key ever appears in a manifest.
- Agent values replace a user entry of the same name instead of being appended after it
  (W&B leaves both and relies on "last one wins"): one entry per name, no ambiguity.
- `WANDB_RUN_ID` goes to the primary pod template only (W&B: the first container of a custom
  resource); every other variable goes to the main container of every pod template.
- Every value is escaped for the kubelet's `$(VAR)` expansion (`kubelet.escape`): the run
  name, config, files and artifacts are the submitter's text, and `$(WANDB_API_KEY)` in a run
  name must reach W&B as those characters, not as the key.
- The agent's variables come *after* the template's and the submitter's, and `WANDB_API_KEY`
  is the last of them: the kubelet expands an env value only against the variables listed
  before it, so no other env value (the admin's included) can read the key through `$(...)`.
  `command` and `args` are expanded against every variable; the agent escapes what it copies
  there, and the submitter's own values there are checked by the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from launch_agent.model.run_item import RunItem
from launch_agent.render.kubelet import escape
from launch_agent.render.settings import RenderSettings

# W&B splits long values into NAME_0..NAME_n (`utils.py:91`, MAX_ENV_LENGTHS default).
CHUNK = 32670

Env = list[dict[str, Any]]


def chunked(name: str, value: str) -> Env:
    if len(value) <= CHUNK:
        return [{"name": name, "value": value}]
    return [
        {"name": f"{name}_{i}", "value": value[start : start + CHUNK]}
        for i, start in enumerate(range(0, len(value), CHUNK))
    ]


def payloads(run: RunItem) -> dict[str, str]:
    """The JSON-encoded W&B payload variables (computed once; their size is checked)."""
    out = {}
    if run.run_config:
        out["WANDB_CONFIG"] = json.dumps(run.run_config)
    if run.files:
        out["WANDB_LAUNCH_FILE_OVERRIDES"] = json.dumps(run.files)
    if run.job or run.artifacts:
        artifacts = {"_wandb_job": run.job} if run.job else {}
        artifacts.update(run.artifacts or {})
        out["WANDB_ARTIFACTS"] = json.dumps(artifacts)
    return out


def wandb_env(
    run: RunItem,
    settings: RenderSettings,
    *,
    run_id: str,
    image: str,
    queue_name: str,
    payload: Mapping[str, str],
    primary: bool,
) -> Env:
    env: Env = [
        {"name": "WANDB_BASE_URL", "value": settings.base_url},
        {"name": "WANDB_PROJECT", "value": run.project},
        {"name": "WANDB_ENTITY", "value": run.entity},
        {"name": "WANDB_LAUNCH", "value": "True"},
    ]
    if primary:
        env.append({"name": "WANDB_RUN_ID", "value": run_id})
    env.append({"name": "WANDB_DOCKER", "value": image})
    if run.run_name:
        env.append({"name": "WANDB_NAME", "value": run.run_name})
    if run.author:
        env.append({"name": "WANDB_USERNAME", "value": run.author})
    if run.sweep_id:
        env.append({"name": "WANDB_SWEEP_ID", "value": run.sweep_id})
    if run.resume_count > 0:
        env.append({"name": "WANDB_RESUME", "value": "allow"})
    env.append({"name": "WANDB_LAUNCH_QUEUE_NAME", "value": queue_name})
    env.append({"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": settings.queue_entity or run.entity})
    env.append({"name": "WANDB_LAUNCH_TRACE_ID", "value": run.run_queue_item_id})
    for name, value in payload.items():
        env.extend(chunked(name, value))
    for e in env:
        e["value"] = escape(e["value"])
    env.append(
        {
            "name": "WANDB_API_KEY",
            "valueFrom": {
                "secretKeyRef": {
                    "name": settings.api_key_secret,
                    "key": settings.api_key_secret_key,
                }
            },
        }
    )
    return env


def set_env(container: dict[str, Any], env: Env) -> None:
    """Put `env` into the container's env: same names replaced, the rest appended."""
    current = container.get("env")
    if not isinstance(current, list) or not current:
        container["env"] = env
        return
    ours = {e["name"] for e in env}
    # A chunked payload must not leave a stale unchunked (or chunked) twin behind.
    stems = {n.rsplit("_", 1)[0] for n in ours if n[-1].isdigit()} | {
        n for n in ours if n in ("WANDB_CONFIG", "WANDB_LAUNCH_FILE_OVERRIDES")
    }
    kept = [
        e
        for e in current
        if not (
            isinstance(e, dict) and (e.get("name") in ours or _is_chunk_of(e.get("name"), stems))
        )
    ]
    container["env"] = kept + env


def _is_chunk_of(name: Any, stems: set[str]) -> bool:
    if not isinstance(name, str):
        return False
    stem, _, idx = name.rpartition("_")
    return name in stems or (idx.isdigit() and stem in stems)
