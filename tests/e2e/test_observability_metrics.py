"""Every metric the chart's Grafana dashboard and PrometheusRule use is exported by a running
agent: the agent is started on the sandbox (with the quota tree, so the quota families are
populated), `/metrics` is scraped over HTTP, and the PromQL expressions' metric names are
looked up in what it answered."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp

from launch_agent.sandbox.wandb import ItemState
from tests.chart.helm import CHART, Helm, install_helm
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_quota_agent import TREE, setup

METRIC = re.compile(r"\b(launch_agent_[a-zA-Z0-9_]+)\b")
KEY = {"agent.apiKey": "0123456789abcdef0123456789abcdef01234567"}


def exported(text: str) -> set[str]:
    """Sample names a scrape may carry: every family's, with a histogram's three series."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def used_expressions(helm_home: Path) -> dict[str, list[str]]:
    helm = Helm(binary=install_helm(), home=helm_home)
    values = {**KEY, "metrics.prometheusRule.enabled": True}
    (rule,) = [m for m in helm.template(set_values=values) if m["kind"] == "PrometheusRule"]
    dashboard = json.loads((CHART / "dashboards" / "launch-agent.json").read_text())
    return {
        "rules": [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]],
        "dashboard": [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        + [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v],
    }


async def test_dashboard_and_rules_use_only_exported_metrics(env: Env, tmp_path: Path) -> None:
    exprs = await asyncio.to_thread(used_expressions, tmp_path)
    setup(env, {"a": "a.1", "b": "b.1"})
    quota = {"mode": "agent", "tree": TREE, "max_pending_per_leaf": 2}
    item = env.push(run_spec("r1"), queue="qa")
    async with env.running(env.agent(env.config(queues=["qa", "qb"], quota=quota))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{agent.health_port}/metrics") as resp,
        ):
            text = await resp.text()
    names = exported(text)
    for source, expressions in exprs.items():
        used = {m for e in expressions for m in METRIC.findall(e)}
        assert len(used) >= 5, source
        missing = sorted(used - names)
        assert not missing, f"{source} uses metrics the agent does not export: {missing}"
    # The state the alerts read has values, not only declarations.
    for sample in (
        "launch_agent_leader 1.0",
        'launch_agent_quota_max{node="a.1",resource="cpu"} 4.0',
        'launch_agent_quota_pending_runs{leaf="a.1"}',
        "launch_agent_last_successful_poll_timestamp_seconds ",
    ):
        assert sample in text, sample
