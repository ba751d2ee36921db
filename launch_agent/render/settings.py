"""What render needs from the agent's configuration, and what it returns.

`RenderSettings` is built once from `AgentConfig` (`RenderSettings.from_config`) and passed to
every render. Its defaults are deliberate:

- `backoff_limit` 0: a failed training step is a failed run. W&B's own requeue handles
  preemption, and retrying in place burns GPU hours on the same bug (W&B's agent uses 0 too).
- `ttl_seconds_after_finished` 3600: W&B uses 60 s, which races the agent reading the final
  status and logs; an hour leaves time to diagnose and still cleans up.
- `active_deadline_seconds` 604800 (7 days): a stuck run must not hold its GPUs forever;
  admins change it per queue spec (`spec.defaults`).
- `api_key_secret` / `api_key_secret_key`: from the configuration, default
  `wandb-api-key-<agent_name>` / `password`, the Secret the Helm chart creates in each target
  namespace (W&B's chart uses the same name and key).
- `max_env_bytes` 1,000,000: `WANDB_CONFIG` and friends travel inside the manifest, and etcd
  refuses objects over 1.5 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.model.queue_spec import Problem


@dataclass(frozen=True, slots=True)
class RenderSettings:
    agent_name: str = "launch-agent"
    base_url: str = "https://api.wandb.ai"
    api_key_secret: str = "wandb-api-key-launch-agent"
    api_key_secret_key: str = "password"
    queue_entity: str | None = None  # the entity that owns the queues; default: the run's
    backoff_limit: int = 0
    ttl_seconds_after_finished: int = 3600
    active_deadline_seconds: int | None = 604800
    max_env_bytes: int = 1_000_000
    # limits.max_item_depth: render refuses a deeper item itself, as the loaders do.
    max_item_depth: int = 100

    @classmethod
    def from_config(cls, config: AgentConfig, **overrides: Any) -> RenderSettings:
        base = cls(
            agent_name=config.agent_name,
            base_url=config.base_url,
            api_key_secret=config.api_key_secret_name,
            api_key_secret_key=config.api_key_secret_key,
            queue_entity=config.entity,
            max_item_depth=config.limits.max_item_depth,
        )
        return base if not overrides else cls(**{**_fields(base), **overrides})


def _fields(s: RenderSettings) -> dict[str, Any]:
    return {name: getattr(s, name) for name in s.__dataclass_fields__}


@dataclass(slots=True)
class RenderResult:
    """The objects to create, in order, and what the submitter or admin should hear about."""

    objects: list[dict[str, Any]]
    warnings: list[Problem] = field(default_factory=list)

    @property
    def workload(self) -> dict[str, Any]:
        return self.objects[0]
