"""`launch-agent status`: the agent's status page in the terminal.

It reads `/api/status` (the JSON of the status page, runtime/status/snapshot.py) either from
`--url` (a port-forward, an Ingress) or through the Kubernetes API server's service proxy with
the kubeconfig's credentials:

    /api/v1/namespaces/NS/services/http:RELEASE-metrics:http/proxy/api/status

(the chart's metrics Service and its `http` port). A status token (`--token` or
$LAUNCH_AGENT_STATUS_TOKEN) goes as `Authorization: Bearer` to a URL, and in
`X-Launch-Agent-Status-Token` through the proxy: kube-apiserver removes `Authorization` once it
has authenticated the caller. Exit status 0 with the view, 1 when the agent could not be
reached or refused the request (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from launch_agent.adapters.kube import KubeClient, KubeError, load_configuration
from launch_agent.model.safe_load import InputError, Limits, load_json
from launch_agent.runtime.health import TOKEN_HEADER
from launch_agent.runtime.status.page import quantity

TOKEN_ENV = "LAUNCH_AGENT_STATUS_TOKEN"
TIMEOUT = 15.0
# 200 runs and 50 failures of up to 2,000 characters fit in well under this.
STATUS_LIMITS = Limits(max_bytes=16_000_000)


class StatusError(Exception):
    pass


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "status",
        help="show a running agent's status (queues, runs, quota, builds, failures)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", help="the agent's health port, e.g. http://127.0.0.1:8080 (a port-forward)"
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: its current-context)")
    parser.add_argument("--namespace", "-n", default="default", help="the release's namespace")
    parser.add_argument(
        "--release", default="launch-agent", help="the Helm release (default: %(default)s)"
    )
    parser.add_argument("--token", help=f"the status page's bearer token (default: ${TOKEN_ENV})")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="output format (default: %(default)s)",
    )
    parser.set_defaults(handler=_status)


def proxy_path(namespace: str, release: str) -> str:
    service = f"http:{release}-metrics:http"
    return (
        f"/api/v1/namespaces/{quote(namespace, safe='')}/services/"
        f"{quote(service, safe=':')}/proxy/api/status"
    )


async def fetch_url(url: str, token: str | None) -> Mapping[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    target = url.rstrip("/") + "/api/status"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as http,
            http.get(target, headers=headers) as resp,
        ):
            body = await resp.text()
            if resp.status != 200:
                raise StatusError(f"{target}: HTTP {resp.status}: {body.strip()[:200]}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise StatusError(f"{target}: {str(exc) or type(exc).__name__}") from None
    return _decode(body, target)


async def fetch_proxy(
    kubeconfig: str | None, context: str | None, namespace: str, release: str, token: str | None
) -> Mapping[str, Any]:
    path = proxy_path(namespace, release)
    try:
        configuration = await load_configuration(kubeconfig, context)
    except Exception as exc:
        raise StatusError(f"cannot load the Kubernetes configuration: {exc}") from None
    headers = {TOKEN_HEADER: token} if token else {}
    try:
        async with KubeClient(configuration) as kube:
            body = await kube.request("GET", path, raw=True, retry=False, headers=headers)
    except KubeError as exc:
        raise StatusError(f"{path}: {exc}") from None
    return _decode(str(body), path)


def _decode(body: str, where: str) -> Mapping[str, Any]:
    try:
        data = load_json(body, source=where, limits=STATUS_LIMITS)
    except InputError as exc:
        raise StatusError(f"{where}: not the agent's status JSON: {exc}") from None
    if not isinstance(data, Mapping) or "agent" not in data:
        raise StatusError(f"{where}: not the agent's status JSON (no `agent` key)")
    return data


def _rows(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def _cell(value: object) -> str:
    text = "-" if value is None or value == "" else str(value)
    # One line per row, and no terminal control characters from submitted text.
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text if len(text) <= 80 else text[:77] + "..."


def table(status: Mapping[str, Any]) -> str:
    agent = status["agent"]
    apis = agent.get("apis", {})
    out = [
        f"AGENT {agent['name']} v{agent['version']}  role {agent['role']}"
        f" (leader {agent['leader']})  uptime {agent['uptime_seconds']:.0f}s",
        f"  ready: {'yes' if agent['ready'] else 'no: ' + '; '.join(agent['problems'])}",
        f"  W&B {agent['wandb']['url']}: {_ok(apis.get('wandb', {}).get('ok'))}"
        f"  Kubernetes: {_ok(apis.get('kubernetes', {}).get('ok'))}"
        f"  last poll {agent['last_poll'] or 'never'}",
        "",
        "QUEUES",
    ]
    out += _rows(
        ("NAME", "POPPED(1h)", "RUNNING", "TRACKED", "FAILED(1h)", "LAST POP"),
        [
            (
                q["name"],
                q["popped_last_hour"],
                q["running"],
                q["tracked"],
                q["failed_last_hour"],
                q["last_pop"],
            )
            for q in status["queues"]
        ],
    )
    runs = status["runs"]
    out += ["", f"RUNS ({runs['total']} tracked, {runs['past_start_deadline']} past deadline)"]
    # MultiKueue: a WORKER column, only when a run was placed on one.
    multi = any(r.get("placements") for r in runs["items"])
    out += _rows(
        ("ITEM", "QUEUE", "STATE", "AGE", "WORKLOAD", *(["WORKER"] if multi else []), "REASON"),
        [
            (
                r["item"],
                r["queue"],
                r["state"],
                f"{r['age_seconds']:.0f}s",
                r["workload"],
                *([r.get("worker") or "-"] if multi else []),
                r["reason"],
            )
            for r in runs["items"]
        ],
    )
    quota = status.get("quota")
    if quota is not None:
        out += ["", "QUOTA"]
        out += _rows(
            ("NODE", "RESOURCE", "USED", "MIN", "MAX", "BORROWED", "PENDING"),
            [
                (
                    "  " * node["depth"] + node["name"],
                    res["resource"],
                    quantity(res["resource"], res["used"]),
                    quantity(res["resource"], res["min"]),
                    quantity(res["resource"], res["max"]),
                    quantity(res["resource"], res["borrowed"]),
                    node["pending"] if node["leaf"] else "",
                )
                for node in quota["nodes"]
                for res in node["resources"]
            ],
        )
    builds = status["builds"]
    recent = builds["recent"]
    out += [
        "",
        f"BUILDS ({builds['builder']}): {recent['built']} built, {recent['cached']} cached,"
        f" {recent['failed']} failed recently",
    ]
    failures = status.get("failures", [])
    out += ["", "LAST FAILURES"]
    out += _rows(
        ("AT", "ITEM", "QUEUE", "STAGE", "REASON", "MESSAGE"),
        [
            (f["at"], f["item"], f["queue"], f["stage"], f["reason"], f["message"])
            for f in failures[:20]
        ],
    )
    return "\n".join(out)


def _ok(value: object) -> str:
    return "not yet" if value is None else ("ok" if value else "failing")


def _status(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        if args.url:
            status = asyncio.run(fetch_url(args.url, token))
        else:
            status = asyncio.run(
                fetch_proxy(args.kubeconfig, args.context, args.namespace, args.release, token)
            )
    except StatusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(status, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(dict(status), sort_keys=False), end="")
    else:
        print(table(status))
    return 0
