"""The chart's status token, Grafana dashboard ConfigMap and PrometheusRule."""

from __future__ import annotations

import json
from typing import Any

from tests.chart.conftest import ci_file
from tests.chart.helm import CHART, Helm, Manifest

KEY = {"agent.apiKey": "0123456789abcdef0123456789abcdef01234567"}
ALERTS = {
    "LaunchAgentNoLeader",
    "LaunchAgentNoSuccessfulPoll",
    "LaunchAgentHighFailureRatio",
    "LaunchAgentRunsStuckStarting",
    "LaunchAgentQuotaPendingTooLong",
    "LaunchAgentApiErrors",
}


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def agent_env(manifests: list[Manifest]) -> dict[str, Any]:
    (deployment,) = of_kind(manifests, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def test_off_by_default(helm: Helm) -> None:
    manifests = helm.template(set_values=KEY)
    assert not of_kind(manifests, "PrometheusRule")
    assert not [
        m for m in of_kind(manifests, "ConfigMap") if "grafana_dashboard" in m["metadata"]["labels"]
    ]
    assert "LAUNCH_AGENT_STATUS_TOKEN" not in agent_env(manifests)


def test_dashboard_configmap_for_the_grafana_sidecar(helm: Helm) -> None:
    manifests = helm.template([ci_file("observability-values.yaml")])
    (cm,) = [m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"] == "rel-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Launch"}
    dashboard = json.loads(cm["data"]["launch-agent.json"])
    source = json.loads((CHART / "dashboards" / "launch-agent.json").read_text())
    assert dashboard == source
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20 and all("launch_agent_" in e for e in exprs)


def test_prometheus_rule_has_every_alert_for_this_release(helm: Helm) -> None:
    manifests = helm.template([ci_file("observability-values.yaml")])
    (rule,) = of_kind(manifests, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert 'namespace="agents", job="rel-metrics"' in r["expr"], r["alert"]
    poll = next(r for r in rules if r["alert"] == "LaunchAgentNoSuccessfulPoll")
    assert "> 300" in poll["expr"]


def test_status_token_from_the_chart_secret(helm: Helm) -> None:
    manifests = helm.template(set_values={**KEY, "status.token": "s3cr3t-token"})
    (secret,) = [
        m for m in of_kind(manifests, "Secret") if m["metadata"]["name"] == "rel-status-token"
    ]
    assert set(secret["data"]) == {"token"}
    ref = agent_env(manifests)["LAUNCH_AGENT_STATUS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rel-status-token", "key": "token"}


def test_status_token_from_an_existing_secret(helm: Helm) -> None:
    manifests = helm.template([ci_file("observability-values.yaml")])
    assert not [
        m for m in of_kind(manifests, "Secret") if m["metadata"]["name"] == "rel-status-token"
    ]
    ref = agent_env(manifests)["LAUNCH_AGENT_STATUS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "launch-agent-status", "key": "token"}
