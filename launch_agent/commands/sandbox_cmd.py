"""`launch-agent sandbox up` and `launch-agent sandbox submit`: the loopback world by hand.

`up` runs the sandbox's Kubernetes API server, its simulated cluster and its W&B Launch server
in one process until interrupted, and prints the environment that points kubectl, the
reference `wandb launch-agent` or ours at them. `submit` pushes run queue items to a running
sandbox the way `wandb launch` does: one `pushToRunQueueByName` over HTTP per item, with the
same document and a JSON-string `runSpec`. It talks only HTTP, so it works against any W&B
server that accepts the key, not just the sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from launch_agent.adapters.bounded import MIB, BodyTooLarge, read_body
from launch_agent.commands.inputs import display_name, read_text
from launch_agent.model.safe_load import ITEM_LIMITS, InputError, load_yaml
from launch_agent.sandbox.cluster import OutcomeError, RealClock, SimulatedCluster, parse_outcome
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import DEFAULT_API_KEY, LAUNCH_PROJECT, LaunchState, WandbServer

# The upstream CRDs a checkout vendors (tests/fixtures/SOURCES.md); an installed package has none.
DEFAULT_CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=30)

# The document `wandb launch` (`launch_add` → `push_to_run_queue_by_name`) sends; the priority
# variable is added only when a priority is given, as the SDK does.
PUSH_DOCUMENT = """
mutation pushToRunQueueByName(
    $entityName: String!, $projectName: String!, $queueName: String!,
    $runSpec: JSONString!{priority_var}
) {{
    pushToRunQueueByName(input: {{
        entityName: $entityName, projectName: $projectName, queueName: $queueName,
        runSpec: $runSpec{priority_arg}
    }}) {{
        runQueueItemId
        runSpec
    }}
}}
"""


class UsageError(Exception):
    """Bad input from the command line or a file: one `error: ...` line, exit status 2."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = sub.add_parser(
        "sandbox",
        help="run the loopback Kubernetes + W&B sandbox, or submit runs to it",
        description="The loopback sandbox the tests, the demo and the benchmarks use: a"
        " Kubernetes API server with a simulated cluster and a W&B Launch server. See"
        " docs/sandbox.md.",
    )
    actions = sandbox.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    _register_up(actions)
    _register_submit(actions)


def _register_up(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = actions.add_parser(
        "up",
        help="run the sandbox until interrupted and print its environment",
        description="Start the Kubernetes API server, the simulated cluster and the W&B Launch"
        " server in this process, create the entity and queues, write a kubeconfig and print"
        " KUBECONFIG, WANDB_BASE_URL, WANDB_API_KEY, WANDB_ENTITY and LAUNCH_SANDBOX_QUEUES as"
        " KEY=value lines (`set -a; . FILE` loads them). Ctrl-C stops everything.",
    )
    up.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    up.add_argument(
        "--kube-port", type=int, default=0, help="API server port (default: a free one)"
    )
    up.add_argument(
        "--wandb-port", type=int, default=0, help="W&B server port (default: a free one)"
    )
    up.add_argument("--entity", default="ent", help="W&B entity to create (default: %(default)s)")
    up.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="run queue to create in ENTITY/model-registry; repeatable (default: q1)",
    )
    up.add_argument(
        "--api-key",
        default=DEFAULT_API_KEY,
        help="the API key the W&B server accepts (default: a fixed 40-hex-digit test key)",
    )
    up.add_argument(
        "--lease-seconds",
        type=float,
        default=60.0,
        help="how long a popped item stays leased without an ack (default: %(default)s)",
    )
    up.add_argument(
        "--crds",
        metavar="DIR",
        help="register every CRD *.yaml in DIR (default: tests/fixtures/crds of a checkout"
        " if it exists); `none` registers none",
    )
    up.add_argument(
        "--namespace", default="default", help="kubeconfig namespace (default: %(default)s)"
    )
    up.add_argument(
        "--dir",
        metavar="DIR",
        help="where to write `kubeconfig` and `sandbox.env` (default: a new temporary directory)",
    )
    up.add_argument(
        "--outcome",
        default="succeed after=5s",
        help="what a pod does unless its workload says otherwise in the annotation"
        " sandbox.launch-agent.io/outcome (default: %(default)s; grammar in docs/sandbox.md)",
    )
    up.add_argument("--no-cluster", action="store_true", help="API server only: no controllers run")
    up.add_argument(
        "--processes",
        action="store_true",
        help="run opted-in pods as local processes (image sandbox.local/..., or the annotation"
        ' sandbox.launch-agent.io/process: "true"), each in DIR/pods/<pod>; how a sweep\'s'
        " `wandb scheduler` runs by hand (docs/sweeps.md)",
    )
    up.add_argument(
        "--process-time-limit",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --processes: kill a pod's process after this long (default: %(default)s)",
    )
    up.set_defaults(handler=_up)


def _register_submit(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = actions.add_parser(
        "submit",
        help="push run queue items the way `wandb launch` does",
        description="Push COUNT items with a docker-image run spec to a W&B run queue through"
        " pushToRunQueueByName. The server and key come from --base-url/--api-key or"
        " WANDB_BASE_URL/WANDB_API_KEY (what `sandbox up` prints). Prints one item id per line.",
    )
    submit.add_argument("--queue", "-q", required=True, help="run queue name")
    submit.add_argument(
        "--image", required=True, help="docker image of the run (docker.docker_image)"
    )
    submit.add_argument(
        "--entity", "-e", help="entity of the queue and the run (default: $WANDB_ENTITY, else ent)"
    )
    submit.add_argument(
        "--project", "-p", default="proj", help="project of the run (default: %(default)s)"
    )
    submit.add_argument(
        "--resource-args",
        metavar="FILE",
        help="YAML or JSON file with resource_args.kubernetes (a Job or custom resource body);"
        " `-` reads standard input",
    )
    submit.add_argument(
        "--priority", type=int, choices=range(5), metavar="0-4", help="0 = critical ... 4 = lowest"
    )
    submit.add_argument(
        "--count", type=int, default=1, help="how many items (default: %(default)s)"
    )
    submit.add_argument(
        "--arg",
        action="append",
        dest="run_args",
        default=[],
        help="one overrides.args entry; repeatable; --arg=--flag for values that start with -",
    )
    submit.add_argument("--base-url", help="W&B server URL (default: $WANDB_BASE_URL)")
    submit.add_argument("--api-key", help="W&B API key (default: $WANDB_API_KEY)")
    submit.set_defaults(handler=_submit)


# -- up -------------------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> int:
    crds = _crd_dir(args.crds)
    if args.lease_seconds <= 0:
        return _usage(f"--lease-seconds must be positive, got {args.lease_seconds}")
    try:
        parse_outcome(args.outcome)
    except OutcomeError as exc:
        return _usage(f"--outcome: {exc}")
    if crds is not None and not crds.is_dir():
        return _usage(f"--crds {crds}: not a directory")
    if args.processes and args.no_cluster:
        return _usage("--processes needs the simulated cluster (drop --no-cluster)")
    if args.process_time_limit <= 0:
        return _usage(f"--process-time-limit must be positive, got {args.process_time_limit}")
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="launch-sandbox-"))
    try:
        asyncio.run(_serve(args, crds, directory))
    except (UsageError, OSError) as exc:
        return _usage(str(exc))
    return 0


def _crd_dir(flag: str | None) -> Path | None:
    if flag == "none":
        return None
    if flag is None:
        return DEFAULT_CRDS if DEFAULT_CRDS.is_dir() else None
    return Path(flag)


async def _serve(args: argparse.Namespace, crds: Path | None, directory: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    state = LaunchState(entity=args.entity, lease_seconds=args.lease_seconds)
    queues = list(dict.fromkeys(args.queues or ["q1"]))  # a repeated name means one queue
    for name in queues:
        state.add_queue(name)
    async with (
        KubeApiServer(args.host, args.kube_port) as kube,
        WandbServer(state, host=args.host, port=args.wandb_port, api_key=args.api_key) as wb,
    ):
        if crds is not None:
            registered = await kube.load_crds_from(crds)
            print(
                f"# registered {len(registered)} custom resource types from {crds}", file=sys.stderr
            )
        env = {
            "KUBECONFIG": str(directory / "kubeconfig"),
            "WANDB_BASE_URL": wb.url,
            "WANDB_API_KEY": args.api_key,
            "WANDB_ENTITY": args.entity,
            "LAUNCH_SANDBOX_QUEUES": ",".join(queues),
        }
        text = "".join(f"{key}={value}\n" for key, value in env.items())
        await loop.run_in_executor(None, _write_files, directory, kube.url, args.namespace, text)
        print(text, end="", flush=True)
        print(f"# environment also in {directory / 'sandbox.env'}; Ctrl-C stops", file=sys.stderr)
        if args.no_cluster:
            await stop.wait()
            return
        processes = directory / "pods" if args.processes else None
        if processes is not None:
            print(f"# pods that opt in run as local processes under {processes}", file=sys.stderr)
        async with SimulatedCluster(
            kube,
            clock=RealClock(),
            default_outcome=args.outcome,
            processes=processes,
            process_time_limit=args.process_time_limit,
        ):
            await stop.wait()


def _write_files(directory: Path, kube_url: str, namespace: str, env_text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(directory / "kubeconfig", kube_url, namespace)
    # Written last and atomically: a script that waits for this file finds everything ready.
    partial = directory / "sandbox.env.partial"
    partial.write_text(env_text, encoding="utf-8")
    partial.replace(directory / "sandbox.env")


# -- submit ---------------------------------------------------------------------------------


def _submit(args: argparse.Namespace) -> int:
    base_url = args.base_url or os.environ.get("WANDB_BASE_URL")
    api_key = args.api_key or os.environ.get("WANDB_API_KEY")
    entity = args.entity or os.environ.get("WANDB_ENTITY") or "ent"
    if not base_url:
        return _usage("no W&B server: pass --base-url or set WANDB_BASE_URL")
    if not api_key:
        return _usage("no API key: pass --api-key or set WANDB_API_KEY")
    if args.count < 1:
        return _usage(f"--count must be at least 1, got {args.count}")
    try:
        resource_args = _read_resource_args(args.resource_args)
    except UsageError as exc:
        return _usage(str(exc))
    spec = run_spec(args.image, entity, args.project, resource_args, args.run_args)
    try:
        ids = asyncio.run(
            push_items(
                base_url,
                api_key,
                entity=entity,
                queue=args.queue,
                spec=spec,
                priority=args.priority,
                count=args.count,
            )
        )
    except (PushError, BodyTooLarge, aiohttp.ClientError, TimeoutError) as exc:
        print(f"error: pushing to {base_url}: {str(exc) or type(exc).__name__}", file=sys.stderr)
        return 1
    print("\n".join(ids))
    return 0


def _read_resource_args(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        text = read_text(path, ITEM_LIMITS.max_bytes, what="a resource_args file")
        value = load_yaml(text, limits=ITEM_LIMITS)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"{display_name(path)}: cannot read: {reason}") from None
    except InputError as exc:
        raise UsageError(f"{display_name(path)}: not valid YAML or JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(
            f"{display_name(path)}: must hold a mapping (a Kubernetes object),"
            f" got {type(value).__name__}"
        )
    return value


def run_spec(
    image: str, entity: str, project: str, resource_args: dict[str, Any], run_args: list[str]
) -> dict[str, Any]:
    """The runSpec `wandb launch --docker-image IMAGE --resource kubernetes` pushes."""
    return {
        "resource": "kubernetes",
        "resource_args": {"kubernetes": resource_args},
        "docker": {"docker_image": image},
        "job": None,
        "uri": None,
        "entity": entity,
        "project": project,
        "overrides": {"args": list(run_args), "run_config": {}, "entry_point": []},
    }


class PushError(Exception):
    """The server answered the push with an HTTP or GraphQL error."""


async def push_items(
    base_url: str,
    api_key: str,
    *,
    entity: str,
    queue: str,
    spec: dict[str, Any],
    priority: int | None,
    count: int,
) -> list[str]:
    document = PUSH_DOCUMENT.format(
        priority_var=", $priority: Int" if priority is not None else "",
        priority_arg=", priority: $priority" if priority is not None else "",
    )
    variables: dict[str, Any] = {
        "entityName": entity,
        "projectName": LAUNCH_PROJECT,
        "queueName": queue,
        "runSpec": json.dumps(spec),
    }
    if priority is not None:
        variables["priority"] = priority
    token = base64.b64encode(f"api:{api_key}".encode()).decode()
    headers = {"Authorization": f"Basic {token}", "User-Agent": "launch-agent sandbox submit"}
    ids = []
    async with aiohttp.ClientSession(headers=headers, timeout=HTTP_TIMEOUT) as session:
        for _ in range(count):
            body = {"query": document, "variables": variables}
            async with session.post(f"{base_url.rstrip('/')}/graphql", json=body) as response:
                raw = await read_body(
                    response, MIB, what="the server's answer", setting="of sandbox submit"
                )
                text = raw.decode(errors="replace")
                if response.status != 200:
                    raise PushError(f"HTTP {response.status}: {text[:300]}")
            answer = json.loads(text)
            if answer.get("errors"):
                raise PushError("; ".join(e.get("message", "?") for e in answer["errors"]))
            ids.append(answer["data"]["pushToRunQueueByName"]["runQueueItemId"])
    return ids


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
