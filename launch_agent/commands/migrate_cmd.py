"""`launch-agent migrate`: a queue spec for each W&B run queue, from the queue's config in W&B.

The config is read as wandb's public API reads it (`RunQueue.default_resource_config` and
`template_variables`: `adapters.wandb_client.queue_config`), or from a file pasted from the
W&B UI. `render.migrate` turns it into a spec; each spec is then checked exactly as
`launch-agent validate` checks one, so what this writes is what the agent will load or refuse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launch_agent.adapters.wandb_client import QueueConfig, WandbClient
from launch_agent.adapters.wandb_errors import WandbError
from launch_agent.commands.config_cmd import add_config_flags, load_config, report_config_error
from launch_agent.commands.inputs import display_name, read_text
from launch_agent.commands.outputs import render as render_output
from launch_agent.commands.validate_cmd import check_text
from launch_agent.model.config_resolve import ConfigError
from launch_agent.model.display import one_line
from launch_agent.model.queue_spec import InvalidInput, Problem
from launch_agent.model.safe_load import SPEC_LIMITS, InputError, compose_yaml, load_yaml
from launch_agent.render.migrate import (
    Migrated,
    NotAQueueConfig,
    UnsafeOutput,
    colliding,
    migrate,
    read_template_variables,
    spec_name,
)
from launch_agent.render.output_check import KUBERNETES_VERSION, MissingValidator
from launch_agent.render.spec_load import locate, node_positions

DESCRIPTION = """\
Write a queue spec for each W&B run queue this agent serves (the configured `queues`, or
--queue), in the namespace --namespace names (else the config's, else the agent's first),
from the queue's config in W&B (its default resource config and template variables), or
from --from-file: the queue's Kubernetes config as pasted from the W&B UI (JSON or YAML,
the Job-spec form or the `kubernetes:` custom-resource form, or the whole
`{"resource_args": {"kubernetes": ...}}`), `-` for standard input.

Each spec keeps the config as its template; template variables become `overridable` paths.
With --fix-misplaced, a key the kind's schema has in one free place nearby is moved there
(W&B's examples put `ttlSecondsAfterFinished` at a PyTorchJob's `spec`), each move listed.
Security exceptions the config needs (privileged, host namespaces, hostPath, capabilities, root,
a service account, Secrets) are listed as comments for review, never granted. Every spec is then
checked as `launch-agent validate` checks it.

Exit status: 0 every spec is valid; 1 a spec needs a decision before the agent loads it (listed);
2 the input could not be read.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "migrate",
        help="write queue specs from W&B run queues' configs (W&B or a pasted file)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from-file",
        metavar="FILE",
        help="the queue's config pasted from the W&B UI instead of asking W&B (`-`: stdin)",
    )
    parser.add_argument(
        "--template-variables",
        metavar="FILE",
        help="with --from-file: the queue's template variables, JSON/YAML: a mapping of name to"
        " JSON schema as the W&B UI shows them (`{cpus: {type: integer, default: 2}}`), or a"
        " list of {name, schema} (W&B's API) or a mapping of name to {name, schema} (Terraform);"
        " a schema may be JSON text",
    )
    parser.add_argument(
        "--fix-misplaced",
        action="store_true",
        help="move each key the kind's schema has in one free place nearby there"
        " (`spec.ttlSecondsAfterFinished` of a PyTorchJob to `spec.runPolicy`); each move is"
        " listed for review",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="write one <name>.yaml per queue here")
    where.add_argument(
        "--dry-run", action="store_true", help="print the specs on stdout, write nothing"
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing spec files")
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml", "table"),
        default="text",
        help="text: specs (--dry-run) and a summary on stderr; json/yaml: one record per queue;"
        " table: QUEUE, FILE, OK, DECISIONS and REVIEW columns",
    )
    add_config_flags(parser)
    parser.set_defaults(handler=run)


@dataclass
class Outcome:
    migrated: Migrated
    text: str
    problems: list[Problem] = field(default_factory=list)
    summary: str = ""
    file: str | None = None


def run(args: argparse.Namespace) -> int:
    if not args.out and not args.dry_run:
        print("error: migrate: give --out DIR (write the specs) or --dry-run", file=sys.stderr)
        return 2
    try:
        resolved = load_config(args)
    except ConfigError as exc:
        report_config_error(exc)
        return 2
    config = resolved.config
    # `--queue` and `--namespace` are the configuration's flags: the queues to migrate, and
    # the namespace of the specs (else the W&B config's, else the agent's first).
    queues = list(dict.fromkeys(config.all_queues))
    if not queues:
        print("error: migrate: no queue: configure `queues` or pass --queue", file=sys.stderr)
        return 2
    if _collide(queues):
        return 2
    default_ns = config.namespaces[0] if config.namespaces else "default"
    try:
        if args.template_variables and not args.from_file:
            raise _InputFailure("--template-variables goes with --from-file (W&B has them)")
        if args.from_file:
            configs = [_from_file(args.from_file, queues, args.template_variables)]
            source = display_name(args.from_file)
        else:
            configs = asyncio.run(_from_wandb(config, queues))
            source = f"W&B at {config.base_url}"
    except _InputFailure as exc:
        _error(str(exc))
        return 2

    outcomes: list[Outcome] = []
    for found in configs:
        try:
            migrated = migrate(
                found.queue,
                found.config,
                found.template_variables,
                namespace=args.namespaces[0] if args.namespaces else None,
                default_namespace=default_ns,
                fix_misplaced_keys=args.fix_misplaced,
            )
            text = migrated.text(f"{source} (queue {found.queue!r})")
        except NotAQueueConfig as exc:
            _error(f"queue {found.queue!r}: {exc}")
            return 2
        except UnsafeOutput as exc:
            _error(f"queue {found.queue!r}: nothing written: the spec {exc}")
            return 2
        try:
            _spec, problems, summary = check_text(text, KUBERNETES_VERSION)
        except MissingValidator as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        outcomes.append(Outcome(migrated, text, problems, summary))

    if args.out:
        failed = _write(Path(args.out), outcomes, force=args.force)
        if failed:
            _error(failed)
            return 2
    if args.output == "text":
        if args.dry_run:
            print("---\n".join(o.text for o in outcomes), end="")
        _summary(outcomes)
    elif args.output == "table":
        rows = [
            {**r, "decisions": len(r["decisions"]), "review": len(r["review"])}
            for r in map(_record, outcomes)
        ]
        columns = ("queue", "file", "ok", "decisions", "review")
        print(render_output(rows, "table", columns), end="")
    else:
        records = [_record(o) for o in outcomes]
        if args.output == "json":
            print(json.dumps(records, indent=2))
        else:
            print(yaml.safe_dump(records, sort_keys=False), end="")
    return 1 if any(o.problems for o in outcomes) else 0


class _InputFailure(Exception):
    pass


def _collide(queues: list[str]) -> bool:
    """Refuse queues that would be written to one file, naming them (before anything is read)."""
    clashes = colliding(queues)
    for group in clashes:
        _error(
            f"queues {' and '.join(map(repr, group))} would be written to one file,"
            f" {spec_name(group[0])}.yaml (a spec's name is its queue's name as a DNS label):"
            " migrate them one at a time (--queue NAME --out DIR) into different"
            " directories and give each spec its own metadata.name"
        )
    return bool(clashes)


def _error(message: str) -> None:
    print(f"error: migrate: {one_line(message)}", file=sys.stderr)


def _from_file(path: str, queues: list[str], variables_path: str | None) -> QueueConfig:
    if len(queues) != 1:
        raise _InputFailure(
            "--from-file holds one queue's config: pass --queue NAME"
            f" (configured: {', '.join(queues)})"
        )
    name = display_name(path)
    try:
        text = read_text(path, SPEC_LIMITS.max_bytes, what="a queue's config")
    except (OSError, UnicodeDecodeError) as exc:
        raise _InputFailure(
            f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    try:
        data = load_yaml(text, source=name, limits=SPEC_LIMITS)
    except InputError as exc:
        raise _InputFailure(str(exc)) from None
    if not isinstance(data, dict):
        raise _InputFailure(f"{name}: expected a JSON/YAML object, the queue's config")
    variables = _read_variables(variables_path) if variables_path else {}
    return QueueConfig(queues[0], "kubernetes", data, variables)


def _read_variables(path: str) -> dict[str, dict[str, Any]]:
    """The template variables file, in any shape W&B and its tools write (`render.migrate.
    read_template_variables`); each problem as `file:line:column: path: reason`."""
    name = display_name(path)
    try:
        text = read_text(path, SPEC_LIMITS.max_bytes, what="a YAML input")
    except (OSError, UnicodeDecodeError) as exc:
        raise _InputFailure(
            f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    try:
        data, node = compose_yaml(text, source=name, limits=SPEC_LIMITS)
    except InputError as exc:
        raise _InputFailure(str(exc)) from None
    try:
        return read_template_variables(data)
    except InvalidInput as exc:
        positions = node_positions(node) if node is not None else {}
        where = [locate(p, positions) for p in exc.problems]
        raise _InputFailure(
            "; ".join(f"{name}:{p.where or ' '}{p.path or '(root)'}: {p.reason}" for p in where)
        ) from None


async def _from_wandb(config: Any, queues: list[str]) -> list[QueueConfig]:
    try:
        async with WandbClient.from_config(config) as client:
            entity = config.entity or (await client.viewer()).entity
            if not entity:
                raise _InputFailure("no entity: set `entity` or pass --entity")
            found = []
            for queue in queues:
                answer = await client.queue_config(entity, queue)
                if not answer.config:
                    raise _InputFailure(
                        f"queue {queue!r} has no config in W&B: write its spec by hand"
                        " (docs/queue-specs.md) or use --from-file"
                    )
                found.append(answer)
            return found
    except WandbError as exc:
        raise _InputFailure(str(exc)) from None


def _write(directory: Path, outcomes: list[Outcome], *, force: bool) -> str | None:
    directory.mkdir(parents=True, exist_ok=True)
    targets = [(o, directory / f"{o.migrated.name}.yaml") for o in outcomes]
    existing = [str(t) for _, t in targets if t.exists()]
    if existing and not force:
        return f"would overwrite {', '.join(existing)} (pass --force)"
    for outcome, target in targets:
        target.write_text(outcome.text, encoding="utf-8")
        outcome.file = str(target)
    return None


def _summary(outcomes: list[Outcome]) -> None:
    """What each spec grants and needs, on stderr; every line through the one sanitizer (the
    paths and grants quote the config's values)."""
    for o in outcomes:
        m = o.migrated
        where = o.file or f"{m.name}.yaml"
        state = f"ok, {o.summary}" if not o.problems else "NOT LOADABLE until decided"
        lines = [f"queue {m.queue!r} -> {where}: {state}"]
        lines += [f"  moved: {src} -> {dst} (review)" for src, dst in m.moves]
        lines += [f"  decide: {decision}" for decision in m.decisions]
        lines += [f"  review: {f.path}: {f.what} (grant: security.{f.grant})" for f in m.findings]
        for p in o.problems:
            at = f"line {p.line}: " if p.line is not None else ""
            lines.append(f"  refused: {at}{p.path or '(root)'}: {p.reason}")
        for line in lines:
            print(one_line(line), file=sys.stderr)


def _record(o: Outcome) -> dict[str, Any]:
    m = o.migrated
    return {
        "queue": m.queue,
        "name": m.name,
        "file": o.file,
        "ok": not o.problems,
        "summary": o.summary,
        "decisions": list(m.decisions),
        "moved": [{"from": src, "to": dst} for src, dst in m.moves],
        "review": [
            {"path": f.path, "what": f.what, "grant": f.grant, "key": f.key, "value": f.value}
            for f in m.findings
        ],
        "problems": [{"path": p.path or "(root)", "reason": p.reason} for p in o.problems],
        "spec": m.document,
        "text": o.text,
    }
