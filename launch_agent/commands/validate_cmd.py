"""`launch-agent validate [PATH ...]`: check queue specs before the agent loads them.

For each spec file: the JSON Schema and the semantic checks (`render.spec_load`), a render
with a sample item as W&B would send it (`render.sample`), and the rendered objects against
the Kubernetes and CRD schemas (`render.output_check`). Across files: no W&B queue is served
by two specs. Every problem is listed; the exit status is 1 if there was any.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from launch_agent.commands.inputs import display_name, is_stdin, read_bytes
from launch_agent.commands.outputs import render as render_output
from launch_agent.commands.render_cmd import MAX_ITEM_BYTES, print_problems
from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.render.output_check import (
    KUBERNETES_VERSION,
    MissingValidator,
    validate_objects,
)
from launch_agent.render.pipeline import pod_sets, render
from launch_agent.render.sample import sample_item
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

DESCRIPTION = """\
Check queue spec files: their schema (the JSON Schema ships in the package, see
docs/queue-specs.md), the template and its paths, a render with a sample item, and the
rendered objects against Kubernetes' strict schemas and the workload CRDs' schemas and
CEL rules (x-kubernetes-validations, as the API server applies them on create).

PATH is a spec file, a directory of *.yaml / *.yml files or `-` for one spec on standard input
(default: queue-specs/).
Exit status 1 if any problem was found (all are listed, `error: <file>: <path>: <reason>`).
Output validation needs kubernetes-validate and cel-python: pip install 'launch-agent[validate]'.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "validate",
        help="check queue specs: schema, a sample render, and the output's Kubernetes schemas",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", default=["queue-specs"])
    parser.add_argument(
        "--kubernetes-version",
        default=KUBERNETES_VERSION,
        metavar="X.Y",
        help=f"Kubernetes version whose schemas to check against (default {KUBERNETES_VERSION})",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "table"),
        default="text",
        help="text: `ok:` / `error:` lines (default); json/yaml: one record per file on stdout;"
        " table: FILE, OK, SUMMARY and PROBLEMS columns",
    )
    parser.set_defaults(handler=run)


def spec_files(paths: list[str]) -> tuple[list[Path], list[tuple[str, Problem]]]:
    files: list[Path] = []
    problems: list[tuple[str, Problem]] = []
    for raw in paths:
        path = Path(raw)
        if is_stdin(raw):
            files.append(path)
        elif path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                problems.append((raw, Problem("", "directory holds no *.yaml or *.yml file")))
            files += found
        elif path.is_file():
            files.append(path)
        else:
            problems.append((raw, Problem("", "no such file or directory")))
    return files, problems


def check_file(path: Path, version: str) -> tuple[QueueSpec | None, list[Problem], str]:
    """(spec, problems, summary) for one file."""
    try:
        data = read_bytes(path, MAX_ITEM_BYTES, what="a queue spec")
    except OSError as exc:
        return None, [Problem("", f"cannot read: {exc.strerror or exc}")], ""
    if len(data) > MAX_ITEM_BYTES:
        return None, [Problem("", f"is {len(data):,} bytes")], ""
    return check_text(data.decode(errors="replace"), version)


def check_text(text: str, version: str) -> tuple[QueueSpec | None, list[Problem], str]:
    """(spec, problems, summary) for one spec's text (also `launch-agent migrate`'s check)."""
    try:
        spec, _warnings = load_queue_spec(text)
    except InvalidInput as exc:
        return None, list(exc.problems), ""
    try:
        result = render(spec, sample_item(spec), None, RenderSettings())
    except InvalidInput as exc:
        return spec, [Problem(f"(sample render) {p.path}", p.reason) for p in exc.problems], ""
    problems = [
        Problem(f"(rendered {spec.kind}) {p.path}", p.reason)
        for p in validate_objects(result.objects, spec.custom_kind, version=version)
    ]
    pods = sum(count for count, _ in pod_sets(result.workload, spec.custom_kind))
    summary = f"{spec.kind} ({spec.api_version}), queues {', '.join(spec.queues)}, {pods} pods"
    return spec, problems, summary


def run(args: argparse.Namespace) -> int:
    files, missing = spec_files(args.paths)
    failed = bool(missing)
    records: list[dict[str, Any]] = [
        {"file": where, "ok": False, "problems": [_problem(problem)]} for where, problem in missing
    ]
    text = args.output == "text"
    if text:
        for where, problem in missing:
            print_problems(where, [problem])
    served: dict[str, Path] = {}
    for path in files:
        try:
            spec, problems, summary = check_file(path, args.kubernetes_version)
        except MissingValidator as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if spec is not None:
            for queue in spec.queues:
                if queue in served:
                    problems.append(
                        Problem(
                            "spec.queues",
                            f"queue {queue!r} is also served by {display_name(served[queue])}",
                        )
                    )
                served.setdefault(queue, path)
        failed = failed or bool(problems)
        records.append(
            {
                "file": display_name(path),
                "ok": not problems,
                "summary": summary,
                "problems": [_problem(p) for p in problems],
            }
        )
        if not text:
            continue
        if problems:
            print_problems(display_name(path), problems)
        else:
            print(f"ok: {display_name(path)}: {summary}")
    if args.output == "json":
        print(json.dumps(records, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(records, sort_keys=False), end="")
    elif args.output == "table":
        rows = [
            {**r, "problems": [f"{p['path']}: {p['reason']}" for p in r["problems"]]}
            for r in records
        ]
        print(render_output(rows, "table", ("file", "ok", "summary", "problems")), end="")
    return 1 if failed else 0


def _problem(problem: Problem) -> dict[str, str]:
    return {"path": problem.path or "(root)", "reason": problem.reason}
