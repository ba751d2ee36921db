"""`launch-agent render`: show exactly what the agent would create for one item.

An admin tries a queue spec against a popped item (copy it from W&B or write one) before the
agent ever runs it; an ML engineer sees why an override is refused. Reading the files happens
here; everything else is the pure render pipeline.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from launch_agent.commands.config_cmd import load_config, report_config_error
from launch_agent.commands.inputs import display_name, is_stdin, read_bytes
from launch_agent.commands.outputs import render as render_output
from launch_agent.model.config import LimitsConfig
from launch_agent.model.config_resolve import ConfigError
from launch_agent.model.display import one_line
from launch_agent.model.queue_spec import InvalidInput, Problem
from launch_agent.model.run_item import parse_run_item
from launch_agent.model.safe_load import InputError, Limits, check_value, load_json, load_yaml
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

MAX_ITEM_BYTES = 10_000_000

DESCRIPTION = """\
Render one run-queue item with a queue spec and print the Kubernetes objects the agent would
create: the submitter's overrides checked against the spec's `overridable` paths, the layered
merge, macros, W&B environment, labels and the enforced restricted Pod Security defaults.

--item is what W&B's popFromRunQueue returns, as YAML or JSON:
  {"runQueueItemId": "...", "runSpec": {"entity": ..., "project": ...,
   "docker": {"docker_image": ...}, "resource_args": {"kubernetes": {...}}, "overrides": {...}}}
It is held to the agent's item limits (`limits.max_item_bytes`, `limits.max_item_depth`) and
refused, like a popped item, for duplicate keys, YAML aliases beyond the bound, unsafe tags,
non-finite numbers or invalid Unicode.

Invalid input exits with status 2 and one line per problem on stderr:
  error: <file>: <path>: <reason>
Warnings (values the enforcement changed, ignored keys) go to stderr as `warning: ...`.
"""


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_NoAliases, sort_keys=False, default_flow_style=False)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "render",
        help="print the Kubernetes objects a queue spec makes of one run-queue item",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--spec", required=True, metavar="FILE", help="queue spec YAML file (`-`: stdin)"
    )
    parser.add_argument(
        "--item",
        required=True,
        metavar="FILE",
        help="popped run-queue item, YAML or JSON (`-`: stdin)",
    )
    parser.add_argument(
        "--image", metavar="URI", help="image to run (default: the item's docker_image)"
    )
    parser.add_argument(
        "--queue", metavar="NAME", help="W&B queue the item came from (default: the spec's first)"
    )
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="the agent's launch-config.yaml, for the agent name, W&B URL and API-key Secret"
        " the objects refer to (default: as `launch-agent run` finds it)",
    )
    parser.add_argument("--agent-name", metavar="NAME", help="overrides the configuration")
    parser.add_argument("--base-url", metavar="URL", help="overrides the configuration")
    parser.add_argument(
        "-o",
        "--output",
        choices=["yaml", "json", "table"],
        default="yaml",
        help="yaml (default) or json: the objects; table: KIND, NAME and NAMESPACE of each",
    )
    parser.set_defaults(handler=run)


def _read(path: str, limit: int) -> tuple[str | None, list[Problem]]:
    try:
        data = read_bytes(path, limit, what="a render input")
    except OSError as exc:
        return None, [Problem("", f"cannot read: {exc.strerror or exc}")]
    if len(data) > limit:
        return None, [Problem("", f"is {len(data):,} bytes; the limit is {limit:,}")]
    try:
        return data.decode(), []
    except UnicodeDecodeError as exc:
        return None, [Problem("", f"is not UTF-8 text: {exc.reason} at byte {exc.start}")]


def print_problems(file: str, problems: list[Problem], level: str = "error") -> None:
    for p in problems:
        at = f"{file}:{p.line}:{p.column}" if p.line is not None else file
        print(one_line(f"{level}: {at}: {p.path or '(root)'}: {p.reason}"), file=sys.stderr)


def item_limits(args: argparse.Namespace) -> Limits:
    """The configured item limits; the defaults when the configuration is broken (that error
    is reported once the item and the spec have been read)."""
    try:
        limits = load_config(args).config.limits
    except ConfigError:
        limits = LimitsConfig()
    # +1: the item wraps the runSpec, whose depth the limit counts.
    return Limits(max_bytes=limits.max_item_bytes, max_depth=limits.max_item_depth + 1)


def parse_item_text(text: str, source: str, limits: Limits) -> Any:
    """An item file, JSON (as W&B sends it) or YAML (as people write it), or `InputError`."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return load_json(text, source=source, limits=limits)
        except InputError as exc:
            if not exc.reason.startswith("invalid JSON"):
                raise
            # Not JSON: a YAML flow mapping, read below.
    data = load_yaml(text, source=source, limits=limits)
    problem = check_value(data, limits.max_depth)
    if problem is not None:
        raise InputError(problem[1], source=source, path=problem[0])
    return data


def _item_problem(exc: InputError) -> Problem:
    reason = f"{exc.path}: {exc.reason}" if exc.path and exc.line is not None else exc.reason
    return Problem(exc.where, reason)


def run(args: argparse.Namespace) -> int:
    if is_stdin(args.spec) and is_stdin(args.item):
        print("error: render: --spec and --item cannot both be `-` (stdin)", file=sys.stderr)
        return 2
    limits = item_limits(args)
    spec_name, item_name = display_name(args.spec), display_name(args.item)
    spec_text, spec_problems = _read(args.spec, MAX_ITEM_BYTES)
    item_text, item_problems = _read(args.item, limits.max_bytes)
    spec = item = None
    if spec_text is not None:
        try:
            spec, warnings = load_queue_spec(spec_text)
            print_problems(spec_name, warnings, "warning")
        except InvalidInput as exc:
            spec_problems += exc.problems
    if item_text is not None:
        try:
            item = parse_run_item(parse_item_text(item_text, item_name, limits))
        except InputError as exc:
            item_problems.append(_item_problem(exc))
        except InvalidInput as exc:
            item_problems += exc.problems
    print_problems(spec_name, spec_problems)
    print_problems(item_name, item_problems)
    if spec is None or item is None:
        return 2
    try:
        settings = RenderSettings.from_config(load_config(args).config)
    except ConfigError as exc:
        return report_config_error(exc)
    try:
        result = render(spec, item, args.image, settings, queue_name=args.queue)
    except InvalidInput as exc:
        for p in exc.problems:
            from_item = p.path.startswith(("runSpec", "runQueueItemId"))
            print_problems(item_name if from_item else args.spec, [p])
        return 2
    for p in result.warnings:
        from_item = p.path.startswith(("runSpec", "runQueueItemId"))
        print_problems(item_name if from_item else args.spec, [p], "warning")
    if args.output == "json":
        print(json.dumps(result.objects, indent=2))
    elif args.output == "table":
        rows = [
            {
                "kind": o.get("kind"),
                "name": (o.get("metadata") or {}).get("name"),
                "namespace": (o.get("metadata") or {}).get("namespace"),
            }
            for o in result.objects
        ]
        print(render_output(rows, "table", ("kind", "name", "namespace")), end="")
    else:
        print(dump_yaml(result.objects), end="")
    return 0
