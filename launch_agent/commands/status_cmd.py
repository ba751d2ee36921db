"""`launch-agent status`: the agent's status page in the terminal.

It reads `/api/status` (the JSON of the status page, runtime/status/snapshot.py) either from
`--url` (a port-forward, an Ingress) or through the Kubernetes API server's service proxy with
the kubeconfig's credentials:

    /api/v1/namespaces/NS/services/http:RELEASE-metrics:http/proxy/api/status

(the chart's metrics Service and its `http` port). A status token (`--token` or
$LAUNCH_AGENT_STATUS_TOKEN) goes as `Authorization: Bearer` to a URL, and in
`X-Launch-Agent-Status-Token` through the proxy: kube-apiserver removes `Authorization` once it
has authenticated the caller. Exit status 0 with the view, 1 when the agent could not be
reached, refused the request or answered something that is not the documented status
document (one line on stderr naming the key; never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from launch_agent.adapters.bounded import BodyTooLarge, read_body
from launch_agent.adapters.kube import KubeClient, KubeError, load_configuration
from launch_agent.commands.outputs import json_text
from launch_agent.commands.status_view import BadStatus, check, table
from launch_agent.model.display import one_line
from launch_agent.model.safe_load import InputError, Limits, load_json
from launch_agent.runtime.health import TOKEN_HEADER

TOKEN_ENV = "LAUNCH_AGENT_STATUS_TOKEN"
TIMEOUT = 15.0
# 200 runs and 50 failures of up to 2,000 characters fit in well under this.
STATUS_LIMITS = Limits(max_bytes=16_000_000)
# The answer is read at most that far, with or without a Content-Length (`adapters/bounded`).
_BOUND = "of launch-agent status"


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
            raw = await read_body(resp, STATUS_LIMITS.max_bytes, what="the answer", setting=_BOUND)
            body = raw.decode(errors="replace")
            if resp.status != 200:
                raise StatusError(f"{target}: HTTP {resp.status}: {body.strip()[:200]}")
    except (aiohttp.ClientError, TimeoutError, BodyTooLarge) as exc:
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
            body = await kube.request(
                "GET",
                path,
                raw=True,
                retry=False,
                headers=headers,
                max_bytes=STATUS_LIMITS.max_bytes,
            )
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
    try:
        return check(data)
    except BadStatus as exc:
        raise StatusError(f"{where}: not the agent's status JSON: {exc}") from None


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
        # The reason may quote what the server answered: one line, escaped.
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json_text(status, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(dict(status), sort_keys=False), end="")
    else:
        print(table(status))
    return 0
