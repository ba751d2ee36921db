"""`launch-agent quota simulate` and `launch-agent quota check`: try a quota tree before
deploying it.

The files are read and parsed here; everything else is the pure `launch_agent.quota`
package. Any problem in either file exits with status 2 and one line per problem,
`error: <file>: <path>: <reason>`, and nothing on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from launch_agent.commands.inputs import display_name, is_stdin, read_text
from launch_agent.commands.outputs import render as render_output
from launch_agent.model.display import one_line
from launch_agent.model.safe_load import InputError, Limits, load_yaml
from launch_agent.quota.simulate import SimulationError, simulate
from launch_agent.quota.tree import TreeError, parse_tree

SIMULATE_HELP = """\
Apply EVENTS.yaml to the quota tree in TREE.yaml, one event at a time, and print one JSON
object per event after the admission cycle reaches its fixpoint:

  {"event": N, "running": [...], "pending": [...], "evicting": [...], "inadmissible": [...],
   "evicted": [...], "usage": {"<node>": {"<resource>": "<quantity>"}}}

N is the event's 0-based index. Run lists are sorted by name, except "evicted", which lists
the runs evicted during that event in eviction order; finished runs are omitted. Usage is the
quota charged to each node (Kubernetes notation), including evicted runs still terminating.

TREE.yaml:
  reclaimPolicy: Any          # or LowerPriority
  instantTermination: true    # false: evicted runs stay charged until a `terminated` event
  root:
    name: root
    min: {cpu: 40}
    max: {cpu: 40}
    children:
      - {name: a.1, min: {cpu: 10}, max: {cpu: 20}, queues: [q1]}

EVENTS.yaml (a list; the clock starts at 0 and moves only with `advance`):
  - submit: {run: q1-r1, queue: q1, priority: 0, pods: [{count: 1, requests: {cpu: 5}}]}
  - submit: {runs: [{run: r2, queue: q1, pods: [...]}, ...]}   # one cycle for the batch
  - finish: {run: q1-r1}
  - ready: {run: q1-r1}         # for runs submitted with ready: false
  - terminated: {run: q1-r1}    # with instantTermination: false
  - advance: {seconds: 60}

docs/quota.md describes every key, the rules and worked examples. Exit status 2 on any
problem in either file, with `error: FILE: PATH: REASON` lines on stderr.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quota = sub.add_parser(
        "quota",
        help="try an elastic quota tree: validate it or simulate events against it",
        description="Tools for the elastic quota tree (quota.mode: agent). See docs/quota.md.",
    )
    quota_sub = quota.add_subparsers(dest="quota_command", metavar="COMMAND", required=True)
    sim = quota_sub.add_parser(
        "simulate",
        help="apply a list of events to a tree and print the state after each",
        description=SIMULATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument(
        "--tree", required=True, metavar="TREE.yaml", help="the quota tree (`-`: stdin)"
    )
    sim.add_argument(
        "--events", required=True, metavar="EVENTS.yaml", help="the events (`-`: stdin)"
    )
    sim.add_argument(
        "-o",
        "--output",
        choices=("jsonl", "json", "yaml", "table"),
        default="jsonl",
        help="jsonl: one JSON object per event (default); json/yaml: the list of reports;"
        " table: EVENT, RUNNING, PENDING, EVICTING, INADMISSIBLE and EVICTED columns",
    )
    sim.set_defaults(handler=_simulate)
    check = quota_sub.add_parser(
        "check",
        help="validate a tree (rule R1) and print its leaves and queues",
        description="Validate TREE.yaml (the same format as quota.tree in launch-config.yaml)."
        " Exit status 0 and a summary when it is valid; 2 and one `error: FILE: PATH: REASON`"
        " line per problem when it is not. A tree with any problem is rejected as a whole.",
    )
    check.add_argument(
        "--tree", required=True, metavar="TREE.yaml", help="the quota tree (`-`: stdin)"
    )
    check.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "table"),
        default="text",
        help="text: a summary and one line per leaf (default); json/yaml: the leaves and their"
        " queues; table: LEAF and QUEUES columns",
    )
    check.set_defaults(handler=_check)


# Event files of long simulations are bigger than specs; the other rules are the same.
QUOTA_FILE_LIMITS = Limits(max_bytes=10_000_000)


class _FileError(Exception):
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines


def _load(path: str) -> Any:
    name = display_name(path)
    try:
        text = read_text(path, QUOTA_FILE_LIMITS.max_bytes, what="a quota file")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise _FileError([f"{name}: (file): cannot read: {reason}"]) from None
    try:
        return load_yaml(text, limits=QUOTA_FILE_LIMITS)
    except InputError as exc:
        where = f"line {exc.line} column {exc.column}" if exc.line is not None else "(document)"
        what = f"{exc.path}: " if exc.path else ""
        raise _FileError([f"{name}: {where}: {what}{exc.reason}"]) from None


def _fail(lines: list[str]) -> int:
    for line in lines:
        print(f"error: {one_line(line)}", file=sys.stderr)
    return 2


def _simulate(args: argparse.Namespace) -> int:
    if is_stdin(args.tree) and is_stdin(args.events):
        return _fail(["--tree and --events cannot both be `-` (stdin)"])
    try:
        tree_data = _load(args.tree)
        events_data = _load(args.events)
    except _FileError as exc:
        return _fail(exc.lines)
    try:
        reports = simulate(tree_data, events_data)
    except SimulationError as exc:
        files = {"tree": display_name(args.tree), "events": display_name(args.events)}
        return _fail([f"{files[p.document]}: {p.path}: {p.reason}" for p in exc.problems])
    if args.output == "jsonl":
        for item in reports:
            print(json.dumps(item))
    else:
        columns = ("event", "running", "pending", "evicting", "inadmissible", "evicted")
        print(render_output(reports, args.output, columns), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        tree = parse_tree(_load(args.tree))
    except _FileError as exc:
        return _fail(exc.lines)
    except TreeError as exc:
        return _fail([f"{display_name(args.tree)}: {p.path}: {p.reason}" for p in exc.problems])
    nodes = list(tree.nodes())
    leaves = [n for n in nodes if n.is_leaf]
    if args.output != "text":
        rows = [{"leaf": leaf.name, "queues": list(leaf.queues)} for leaf in leaves]
        data: Any = rows
        if args.output != "table":
            data = {"file": display_name(args.tree), "nodes": len(nodes), "leaves": rows}
        print(render_output(data, args.output, ("leaf", "queues")), end="")
        return 0
    print(f"{display_name(args.tree)}: valid: {len(nodes)} nodes, {len(leaves)} leaves")
    for leaf in leaves:
        queues = ", ".join(leaf.queues) or "(no queues)"
        print(f"  {leaf.name}: {queues}")
    return 0
