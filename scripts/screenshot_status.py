#!/usr/bin/env python3
"""Take docs/images/status-page.png: the status page of an agent running on the sandbox.

    python scripts/screenshot_status.py [--out docs/images/status-page.png]

Starts the loopback sandbox (launch_agent.demo.world), two queue specs under a small quota
tree, an agent with its status page, and a handful of runs: some running, one waiting for
quota, one failing with a log tail, one not schedulable. Then Debian's Chromium (headless,
driven by Playwright's client; scripts/install_chromium.sh installs it) loads the page and
saves a full-page screenshot. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launch_agent.demo.world import SandboxWorld, WorldSettings  # noqa: E402
from launch_agent.model.config import AgentConfig  # noqa: E402
from launch_agent.runtime.agent import Agent  # noqa: E402
from tests.browser import chromium  # noqa: E402

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: {name}
spec:
  queues: [{queue}]
  namespace: default
  quota:
    leaf: {leaf}
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
                requests: {{cpu: "{cpu}", memory: 8Gi}}
  overridable: [overrides.args]
"""

TREE = {
    "root": {
        "name": "cluster",
        "min": {"cpu": 16, "memory": "128Gi"},
        "max": {"cpu": 16, "memory": "128Gi"},
        "children": [
            {"name": "research", "min": {"cpu": 8, "memory": "64Gi"},
             "max": {"cpu": 16, "memory": "128Gi"}, "queues": ["research"]},
            {"name": "production", "min": {"cpu": 8, "memory": "64Gi"},
             "max": {"cpu": 12, "memory": "96Gi"}, "queues": ["production"]},
        ],
    }
}  # fmt: skip

RUNS = [
    # (queue, run id, scripted outcome)
    ("research", "llm-pretrain-7b", "succeed after=1h"),
    ("research", "sweep-lr-3e-4", "succeed after=1h"),
    ("research", "sweep-lr-1e-3", "succeed after=1h"),
    ("production", "nightly-eval", "succeed after=1h"),
    ("production", "bad-config", "fail after=2s log=\"KeyError: 'optimizer'\""),
    ("research", "sweep-lr-3e-3", "succeed after=1h"),
]


def run_spec(run_id: str) -> dict[str, object]:
    return {
        "entity": "acme",
        "project": "llm",
        "run_id": run_id,
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example/train:1"},
        "overrides": {"args": ["--epochs", "1"]},
    }


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="status-shot-") as tmp:
        specs = Path(tmp)
        (specs / "research.yaml").write_text(
            SPEC.format(name="research", queue="research", leaf="research", cpu=4)
        )
        (specs / "production.yaml").write_text(
            SPEC.format(name="production", queue="production", leaf="production", cpu=4)
        )
        settings = WorldSettings(entity="acme", queues=("research", "production"))
        async with SandboxWorld(settings) as world:
            assert world.cluster is not None
            for queue, run_id, outcome in RUNS:
                world.cluster.script(f"launch-agent.io/run-id={run_id}", outcome)
                world.state.push_by_name("acme", "model-registry", queue, run_spec(run_id))
            config = AgentConfig.model_validate(
                {
                    "queues": ["research", "production"],
                    "entity": "acme",
                    "api_key": world.wandb.api_key,
                    "base_url": world.wandb.url,
                    "queue_specs_dir": str(specs),
                    "namespaces": ["default"],
                    "max_jobs": -1,
                    "agent_name": "gpu-cluster-agent",
                    "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.5},
                    "health": {"host": "127.0.0.1", "port": 0},
                    "quota": {"mode": "agent", "tree": TREE, "max_pending_per_leaf": 4},
                    "status": {"refresh_seconds": 10},
                }
            )
            agent = Agent(config, kubeconfig=str(world.kubeconfig))
            stop = asyncio.Event()
            task = asyncio.create_task(agent.run(stop))
            try:
                await asyncio.wait_for(agent.ready.wait(), 30)
                deadline = time.monotonic() + 30
                # Until the failing run has been reported and every other run is placed.
                while time.monotonic() < deadline:
                    failed = agent.metrics.activity.view().failures
                    if failed and len(agent.runs) == len(RUNS) - 1:
                        break
                    await asyncio.sleep(0.2)
                await asyncio.sleep(1.0)
                async with chromium() as browser:
                    page = await browser.new_page(viewport={"width": 1280, "height": 900})
                    await page.goto(f"http://127.0.0.1:{agent.health_port}/")
                    await page.screenshot(path=str(out), full_page=True)
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "status-page.png")
    args = parser.parse_args()
    asyncio.run(main(args.out))
