"""`launch-agent diagnose`: the agent's judgement of one workload, as a tool for admins.

It reads the workload, its pods and their Events (from the cluster, or from a file captured
with kubectl) and prints what the running agent would report for it. The judgement is the
tracker's own `tracking.assess`, called with the same inputs: there is no second
implementation to drift from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from launch_agent.adapters.kube import KindNotInstalled, KubeClient, KubeNotFound, Resource
from launch_agent.commands.config_cmd import load_config, report_config_error
from launch_agent.commands.inputs import read_bytes
from launch_agent.commands.outputs import json_text
from launch_agent.model.config import TrackingConfig
from launch_agent.model.config_resolve import ConfigError
from launch_agent.model.display import one_line
from launch_agent.model.safe_load import InputError, Limits, load_json, load_yaml
from launch_agent.tracking import (
    Assessment,
    MainContainer,
    TrackingPolicy,
    assess,
    main_container_of,
)
from launch_agent.tracking.dump import (
    API_VERSIONS,
    KUEUE_GROUP,
    DumpError,
    Inputs,
    items_of,
    parse_kind,
    select,
)
from launch_agent.tracking.fields import timestamp

# A namespace's pods and Events with managedFields can be large; nesting stays shallow.
DUMP_LIMITS = Limits(max_bytes=256 * 1024 * 1024, max_depth=64)
FIELDS = ("state", "reason", "message", "pod", "container")
_YAML_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.MULTILINE)

DESCRIPTION = """\
Print what the agent would report for one workload: its state (queued, starting, running,
succeeded, failed, preempted, stopped), the reason (a stable word: ExitCode, OOMKilled,
FailedCreate, Deactivated, ...), the message the submitter reads in W&B, and the pod and
container it blames.

From the cluster:   launch-agent diagnose NAMESPACE/NAME [--kind rayjob]
From a capture:     kubectl get job/NAME,pods,events -n NS -o json > dump.json
                    launch-agent diagnose -f dump.json [--now 2026-12-01T08:00:00Z]
                    (-f - reads standard input; add the Kueue Workload to the capture,
                    `kubectl get workloads.kueue.x-k8s.io`, to judge Kueue's admission)

The workload is the one object of the capture that is not a Pod, an Event or a Kueue Workload
and is not owned by another one (a JobSet's Jobs, a RayJob's RayCluster). A capture with
several (`kubectl get jobs,pods,events` lists every Job of the namespace) is refused with their
names: pick one by name, `diagnose -f dump.json [NAMESPACE/]NAME`, and/or by --kind. Its pods
are matched by ownerReferences and the labels the operators set; pods, Events and Kueue
Workloads of other workloads in the capture are ignored. The capture may also be a single
object (`kubectl get job NAME -o json`), a typed list (PodList, EventList, JobList), several
outputs appended to one file or in a JSON array, or `-o yaml` documents separated by `---`.
--now judges at another time than now (the start deadline, grace periods).

Exit status 0 with a verdict, 2 for input that cannot be judged (with the reason on stderr),
1 when the cluster cannot be read.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "diagnose",
        help="print what the agent would report for one workload (from the cluster or a file)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="the workload (with -f: which of the capture's workloads, NAME or NAMESPACE/NAME)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="read `kubectl get <workload>,pods,events -o json` output instead (`-` for stdin)",
    )
    parser.add_argument(
        "--kind",
        help="the workload's kind: job (default from the cluster), jobset, pytorchjob, trainjob,"
        " leaderworkerset, rayjob, vcjob",
    )
    parser.add_argument("--now", metavar="RFC3339", help="judge at this time (default: now)")
    parser.add_argument(
        "--start-timeout",
        type=float,
        metavar="SECONDS",
        help="the start deadline (default: the config's tracking.start_timeout_seconds, 1800)",
    )
    parser.add_argument(
        "--main-container",
        action="append",
        default=[],
        metavar="NAME",
        help="the run's main container, blamed before sidecars (default: the first container)",
    )
    parser.add_argument("--image", help="the run's image: its container is the main one")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("-c", "--config", metavar="FILE", help="the agent's launch-config.yaml")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context")
    parser.set_defaults(handler=_run)


def _error(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2


def _tracking(args: argparse.Namespace) -> TrackingConfig:
    if getattr(args, "config", None):
        return load_config(args).config.tracking
    return TrackingConfig()


def verdict(assessment: Assessment) -> dict[str, str | None]:
    """Exactly the fields `-o json` prints, None where there is none."""
    state, diag = assessment
    return {
        "state": state.value,
        "reason": diag.reason.value if diag else None,
        "message": diag.message if diag else None,
        "pod": diag.pod if diag else None,
        "container": diag.container if diag else None,
    }


def _read(path: str) -> Any:
    source = "<stdin>" if path == "-" else path
    try:
        raw = read_bytes(path, DUMP_LIMITS.max_bytes, what="a diagnose input")
    except OSError as exc:
        raise DumpError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            return load_json(raw, source=source, limits=DUMP_LIMITS)
        except InputError:
            documents = _json_documents(raw)
            if len(documents) < 2:
                raise
        # Several outputs appended to one file: each is read by the same bounded loader.
        return [
            load_json(doc, source=f"{source} (document {i + 1})", limits=DUMP_LIMITS)
            for i, doc in enumerate(documents)
        ]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DumpError(f"{source}: not UTF-8") from None
    try:
        return load_yaml(text, source=source, limits=DUMP_LIMITS)
    except InputError:
        documents = [d for d in _YAML_SEPARATOR.split(text) if d.strip()]
        if len(documents) < 2:
            raise
    # `kubectl get job X -o yaml; echo ---; kubectl get pods -o yaml`: kubectl indents every
    # block scalar, so a `---` at the start of a line is a document separator.
    return [
        load_yaml(doc, source=f"{source} (document {i + 1})", limits=DUMP_LIMITS)
        for i, doc in enumerate(documents)
    ]


def _json_documents(raw: bytes) -> list[str]:
    """The JSON texts written one after the other in `raw` (`kubectl get job X -o json;
    kubectl get pods -o json` into one file); [] when it is not such a sequence."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return []
    decoder = json.JSONDecoder()
    spans: list[str] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return spans
        try:
            _, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return []
        spans.append(text[pos:end])
        pos = end


def _run(args: argparse.Namespace) -> int:
    if args.start_timeout is not None and not args.start_timeout > 0:
        return _error("--start-timeout: must be a number of seconds > 0")
    now = datetime.now(UTC)
    if args.now:
        parsed = timestamp(args.now)
        if parsed is None:
            return _error(f"--now: not an RFC 3339 time: {args.now!r}")
        now = parsed
    try:
        tracking = _tracking(args)
    except ConfigError as exc:
        return report_config_error(exc)
    try:
        kind = parse_kind(args.kind) if args.kind else None
        if args.filename is not None:
            # With -f the target only picks one of the capture's workloads.
            inputs = select(items_of(_read(args.filename)), kind, args.target or None)
        elif args.target:
            namespace, _, name = args.target.partition("/")
            if not namespace or not name or "/" in name:
                return _error(f"expected NAMESPACE/NAME, got {args.target!r}")
            try:
                inputs = asyncio.run(
                    read_cluster(namespace, name, kind, args.kubeconfig, args.context)
                )
            except DumpError:
                raise
            except Exception as exc:
                # A kubeconfig, TLS or API failure: one line, no traceback (like kubectl).
                print(
                    f"error: cannot read {args.target} from the cluster: {one_line(str(exc))}",
                    file=sys.stderr,
                )
                return 1
        else:
            return _error("give NAMESPACE/NAME or -f FILE")
    except (DumpError, InputError) as exc:
        return _error(str(exc))
    # The flags name the main container; else what render recorded on the workload, as the
    # running agent reads it.
    recorded = main_container_of(inputs.workload)
    main = MainContainer(
        frozenset(args.main_container) or recorded.names, args.image or recorded.image
    )
    assessment = assess(
        inputs.workload,
        inputs.pods,
        now,
        TrackingPolicy.from_config(tracking, args.start_timeout),
        events=inputs.events,
        kueue_workload=inputs.kueue_workload,
        main=main,
    )
    print(render(verdict(assessment), args.output))
    return 0


def render(result: Mapping[str, str | None], output: str) -> str:
    """The verdict as JSON (ASCII: every control character escaped) or a table whose values
    went through the one sanitizer: the message quotes a container's termination message,
    which the submitter's code wrote (an OSC 52 there would write the reader's clipboard)."""
    if output == "json":
        return json_text(dict(result))
    width = max(len(k) for k in FIELDS)
    return "\n".join(f"{k.upper():<{width}}  {one_line(result[k] or '-')}" for k in FIELDS)


async def read_cluster(
    namespace: str,
    name: str,
    kind: tuple[str, str] | None,
    kubeconfig: str | None,
    context: str | None,
) -> Inputs:
    """The workload, the namespace's pods and Events, and Kueue's Workloads, through the same
    client and list calls the agent's informers use; then the same selection as `-f`."""
    group, kind_name = kind or ("batch", "Job")
    api_version = API_VERSIONS[(group, kind_name)]
    async with await KubeClient.from_kubeconfig(kubeconfig, context) as kube:
        try:
            resource = await kube.resolve(api_version, kind_name)
        except KindNotInstalled as exc:
            raise DumpError(str(exc)) from None
        try:
            workload = dict(await kube.get(resource, namespace, name))
        except KubeNotFound:
            raise DumpError(f"{kind_name} {namespace}/{name} not found") from None
        workload.setdefault("apiVersion", api_version)
        workload.setdefault("kind", kind_name)
        items: list[Mapping[str, Any]] = [workload]
        items += (await kube.list(Resource("", "v1", "Pod", "pods"), namespace)).items
        items += (await kube.list(Resource("", "v1", "Event", "events"), namespace)).items
        try:
            kueue = await kube.resolve(f"{KUEUE_GROUP}/v1beta1", "Workload")
        except KindNotInstalled:
            kueue = None
        if kueue is not None:
            items += (await kube.list(kueue, namespace)).items
    return select(items, (group, kind_name))
