"""How the dispatch benchmark starts each agent against a sandbox.

- ours: `launch-agent run` from this virtualenv, with a queue spec for a single-pod Job (the
  same container, requests and image as the reference's runs) and production defaults for
  everything that is not about the sandbox (poll intervals, stop checks, `max_jobs: -1`);
- the reference: `wandb launch-agent` 0.31.0 from `.venv-reference` (created by
  `make test-reference`; `LAUNCH_AGENT_REFERENCE_WANDB` names another `wandb` executable),
  `--max-jobs -1`, config `builder: {type: noop}` (the Helm chart's default), a fresh HOME
  and W&B directories, the kubeconfig in `~/.kube/config`.

Both run in the `default` namespace, or (`ours(namespace)`, `reference_spec(namespace)`) in
another: `bench dispatch --cluster real` gives each agent a fresh namespace of the same API
server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from launch_agent.demo.dispatch import AgentLauncher, AgentStage
from launch_agent.demo.world import SandboxWorld

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REFERENCE_WANDB = ROOT / ".venv-reference" / "bin" / "wandb"
ENTITY = "ent"
PROJECT = "proj"
QUEUE = "q1"
AGENT_NAME = "bench-agent"
IMAGE = "busybox:1.36"

# A minimal single-pod Job, as in the reference note: one container, 100m CPU, 64Mi.
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    }
                ]
            }
        }
    },
}


def job_queue_spec(
    name: str,
    queue: str,
    overridable: list[str],
    *,
    ttl_seconds: int | None = None,
    namespace: str = "default",
) -> str:
    """A queue spec serving `queue` with small Jobs: what the benchmarks' agents run.

    `ttl_seconds`: the Jobs' `ttlSecondsAfterFinished` (the agent's default, 3600, otherwise)."""
    granted = "".join(f"\n    - {path}" for path in overridable)
    defaults = (
        "" if ttl_seconds is None else f"  defaults: {{ttlSecondsAfterFinished: {ttl_seconds}}}\n"
    )
    return f"""\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: {name}
spec:
  queues: [{queue}]
  namespace: {namespace}
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
          containers:
            - name: main
              image: ${{image_uri}}
              resources:
                requests: {{cpu: 100m, memory: 64Mi}}
  overridable:{granted}
{defaults}"""


QUEUE_GRANTS = ["overrides.args", "overrides.run_config"]
QUEUE_SPEC = job_queue_spec("bench", QUEUE, QUEUE_GRANTS)


def reference_spec(namespace: str | None = None) -> dict[str, Any]:
    """The runSpec of the reference note: docker image, resource_args = the Job (in
    `namespace`, which the reference reads from the Job's metadata; else its default)."""
    job = JOB if namespace is None else {**JOB, "metadata": {"namespace": namespace}}
    return {
        "resource": "kubernetes",
        "resource_args": {"kubernetes": job},
        "docker": {"docker_image": IMAGE},
        "job": None,
        "uri": None,
        "entity": ENTITY,
        "project": PROJECT,
        "overrides": {},
    }


def our_spec() -> dict[str, Any]:
    """The same run for our agent: the Job comes from the queue spec, as admins set it up."""
    return {
        "resource": "kubernetes",
        "docker": {"docker_image": IMAGE},
        "job": None,
        "uri": None,
        "entity": ENTITY,
        "project": PROJECT,
        "overrides": {},
    }


def reference_wandb() -> Path:
    """The reference `wandb` CLI: $LAUNCH_AGENT_REFERENCE_WANDB, else `.venv-reference`'s."""
    return Path(os.environ.get("LAUNCH_AGENT_REFERENCE_WANDB") or DEFAULT_REFERENCE_WANDB)


def _base_env() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    # A checkout run with PYTHONPATH (docs/development.md) measures its own code, not the
    # virtualenv's installed copy.
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _ours_command(
    namespace: str,
) -> Callable[[AgentStage, Path], tuple[list[str], dict[str, str]]]:
    spec = job_queue_spec("bench", QUEUE, QUEUE_GRANTS, namespace=namespace)

    def command(world: AgentStage, scratch: Path) -> tuple[list[str], dict[str, str]]:
        specs = scratch / "queue-specs"
        specs.mkdir(exist_ok=True)
        (specs / "bench.yaml").write_text(spec, encoding="utf-8")
        config = scratch / "launch-config.yaml"
        config.write_text(
            f"queues: [{QUEUE}]\nentity: {ENTITY}\nmax_jobs: -1\nagent_name: {AGENT_NAME}\n"
            f"base_url: {world.wandb.url}\nqueue_specs_dir: {specs}\n"
            f"namespaces: [{namespace}]\nhealth: {{host: 127.0.0.1, port: 0}}\n",
            encoding="utf-8",
        )
        argv = [
            str(Path(sys.executable).parent / "launch-agent"),
            "run",
            "--config",
            str(config),
            "--kubeconfig",
            str(world.kubeconfig),
        ]
        env = _base_env() | {"WANDB_API_KEY": world.wandb.api_key, "HOME": str(scratch)}
        return argv, env

    return command


def profiled(launcher: AgentLauncher, directory: Path, names: Iterator[str]) -> AgentLauncher:
    """Our agent under cProfile (`launch_agent.demo.profiling`): each spawn writes the next
    of `names` + `.pstats` into `directory` when the agent exits."""

    def command(world: AgentStage, scratch: Path) -> tuple[list[str], dict[str, str]]:
        argv, env = launcher.command(world, scratch)
        out = directory / f"{next(names)}.pstats"
        return [sys.executable, "-m", "launch_agent.demo.profiling", str(out), *argv[1:]], env

    return dataclasses.replace(launcher, command=command)


def _ours_finished(world: SandboxWorld, log: str) -> int:
    """A success costs no request at all: the agent's log line is the only trace."""
    return log.count("-> succeeded")


async def _sigterm(world: AgentStage, process: asyncio.subprocess.Process) -> None:
    process.terminate()


def _reference_command(world: AgentStage, scratch: Path) -> tuple[list[str], dict[str, str]]:
    home = scratch / "home"
    (home / ".kube").mkdir(parents=True, exist_ok=True)
    (home / ".kube" / "config").write_bytes(world.kubeconfig.read_bytes())
    config = scratch / "reference-config.yaml"
    config.write_text("builder:\n  type: noop\n", encoding="utf-8")
    argv = [
        str(reference_wandb()),
        "launch-agent",
        "--queue",
        QUEUE,
        "--entity",
        ENTITY,
        "--max-jobs=-1",
        "--config",
        str(config),
    ]
    env = _base_env() | {
        "HOME": str(home),
        "KUBECONFIG": str(home / ".kube" / "config"),
        "WANDB_BASE_URL": world.wandb.url,
        "WANDB_API_KEY": world.wandb.api_key,
        "WANDB_DIR": str(home),
        "WANDB_CONFIG_DIR": str(home / ".config" / "wandb"),
        "WANDB_CACHE_DIR": str(home / ".cache" / "wandb"),
        "WANDB_ERROR_REPORTING": "false",
    }
    return argv, env


def _reference_finished(world: SandboxWorld, log: str) -> int:
    """Done with a run = its `wandb-api-key-<runId>` Secret deleted."""
    secrets = world.kube.objects.list("secrets", namespace=None)
    left = sum(1 for s in secrets if s["metadata"]["name"].startswith("wandb-api-key-"))
    jobs = len(world.kube.objects.list("jobs", namespace=None))
    return jobs - left


async def _stop_polling(world: AgentStage, process: asyncio.subprocess.Process) -> None:
    """W&B's own graceful stop for the reference agent: `stopPolling` on its next tick."""
    for agent in world.state.agents.values():
        world.state.set_stop_polling(agent.id)


def ours(namespace: str = "default") -> AgentLauncher:
    """Our agent, serving `namespace` (its queue spec's and its configuration's)."""
    return AgentLauncher("launch-agent", _ours_command(namespace), _ours_finished, _sigterm)


OURS = ours()
REFERENCE = AgentLauncher(
    "wandb-launch-agent", _reference_command, _reference_finished, _stop_polling
)
