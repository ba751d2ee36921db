"""`launch-agent config show`, and the configuration flags every agent command shares.

This module is where the configuration's inputs are read (the file, the environment,
`~/.netrc`); the rules that combine them are pure and live in `launch_agent.model`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from launch_agent.commands.inputs import display_name, read_text
from launch_agent.commands.outputs import render as render_output
from launch_agent.model.config_resolve import (
    ConfigError,
    ConfigProblem,
    Override,
    ResolvedConfig,
    Source,
    parse_yaml_with_lines,
    resolve,
)
from launch_agent.model.display import one_line
from launch_agent.model.safe_load import CONFIG_LIMITS
from launch_agent.quota.tree import validate_tree

# W&B's agent reads this file when no --config is given; so do we, for drop-in compatibility.
WANDB_DEFAULT_CONFIG = Path("~/.config/wandb/launch-config.yaml")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that override configuration values (highest precedence)."""
    group = parser.add_argument_group(
        "configuration",
        "Precedence: built-in defaults < --config file < environment < these flags.",
    )
    group.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="launch-config.yaml to read, `-` for standard input (default: $LAUNCH_AGENT_CONFIG,"
        " else ~/.config/wandb/launch-config.yaml if it exists)",
    )
    group.add_argument(
        "-q",
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="W&B run queue to serve; repeat for several (replaces `queues` from the file)",
    )
    group.add_argument("-e", "--entity", help="W&B entity that owns the queues")
    group.add_argument(
        "-j", "--max-jobs", type=int, metavar="N", help="runs in flight at once; -1 = unlimited"
    )
    group.add_argument(
        "-v", "--verbose", action="count", dest="verbosity", help="more output; repeatable"
    )
    group.add_argument("--agent-name", metavar="NAME", help="stable agent identity (a DNS label)")
    group.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="target namespace; repeat for several",
    )
    group.add_argument("--queue-specs", metavar="DIR", help="directory of queue spec files")
    group.add_argument("--base-url", metavar="URL", help="W&B server URL")
    group.add_argument("--log-format", choices=["text", "json"], help="log line format")


_FLAG_PATHS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("queues", ("queues",), "--queue"),
    ("entity", ("entity",), "--entity"),
    ("max_jobs", ("max_jobs",), "--max-jobs"),
    ("verbosity", ("verbosity",), "-v"),
    ("agent_name", ("agent_name",), "--agent-name"),
    ("namespaces", ("namespaces",), "--namespace"),
    ("queue_specs", ("queue_specs_dir",), "--queue-specs"),
    ("base_url", ("base_url",), "--base-url"),
    ("log_format", ("log_format",), "--log-format"),
)


def flag_overrides(args: argparse.Namespace) -> list[Override]:
    overrides = []
    for attr, path, flag in _FLAG_PATHS:
        value = getattr(args, attr, None)
        if value is not None:
            overrides.append(Override(path, value, Source("flag", flag)))
    return overrides


def load_config(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ResolvedConfig:
    """Read the configuration's inputs and resolve them; raise `ConfigError` on any problem."""
    env = os.environ if environ is None else environ
    explicit = getattr(args, "config", None) or env.get("LAUNCH_AGENT_CONFIG") or None
    path = Path(explicit) if explicit else WANDB_DEFAULT_CONFIG.expanduser()
    name = display_name(explicit) if explicit else str(path)
    file_text = None
    if explicit or path.exists():
        try:
            file_text = read_text(explicit or path, CONFIG_LIMITS.max_bytes, what="a launch config")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise ConfigError([ConfigProblem(name, "(file)", f"cannot read: {reason}")]) from None
    netrc_text = None
    netrc_path = Path(env.get("NETRC", "~/.netrc")).expanduser()
    if netrc_path.is_file():
        try:
            netrc_text = read_text(netrc_path, CONFIG_LIMITS.max_bytes, what="a netrc file")
        except OSError:
            netrc_text = None
    resolved = resolve(
        file_text=file_text,
        filename=name if file_text is not None else None,
        env=env,
        flags=flag_overrides(args),
        netrc_text=netrc_text,
    )
    problems = quota_tree_problems(resolved, name, file_text)
    if problems:
        raise ConfigError(problems)
    return resolved


def quota_tree_problems(
    resolved: ResolvedConfig, filename: str, file_text: str | None
) -> list[ConfigProblem]:
    """R1 on `quota.tree`, each problem at the file line of the key it names.

    The tree's rules need the quota package, which the model layer may not import, so they
    are checked here, where the file is still at hand. A tree is checked whenever one is
    given, not only with `quota.mode: agent`: an admin who switches modes later should not
    discover a broken tree then. The file is parsed for its lines only when there is a
    problem to place (`resolve` parsed it already).
    """

    def lines() -> dict[tuple[str | int, ...], int]:
        return parse_yaml_with_lines(file_text, filename)[1] if file_text is not None else {}

    quota = resolved.config.quota
    if quota.tree is None:
        if quota.mode != "agent":
            return []
        origin = _origin(resolved.sources.get("quota.mode"), filename, lines(), ("quota", "mode"))
        return [ConfigProblem(origin, "quota.tree", "quota.mode is agent but no tree is set")]
    found = validate_tree(quota.tree)
    if not found:
        return []
    source = resolved.sources.get("quota.tree") or next(
        (v for k, v in resolved.sources.items() if k.startswith("quota.tree.")), None
    )
    where = lines()
    out = []
    for problem in found:
        key = problem.key("quota.tree")
        out.append(
            ConfigProblem(_origin(source, filename, where, _split(key)), key, problem.reason)
        )
    return out


def _split(key: str) -> tuple[str | int, ...]:
    """`a.b[2].c` → `("a", "b", 2, "c")`, the form `parse_yaml_with_lines` indexes lines by."""
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return tuple(parts)


def _origin(
    source: Source | None,
    filename: str,
    lines: Mapping[tuple[str | int, ...], int],
    path: tuple[str | int, ...],
) -> str:
    """`FILE:LINE` of the nearest key of `path` the file sets; else where the value came from."""
    if source is None or source.kind != "file":
        return str(source) if source is not None else "configuration"
    while path:
        if path in lines:
            return f"{filename}:{lines[path]}"
        path = path[:-1]
    return filename


def report_config_error(error: ConfigError) -> int:
    for problem in error.problems:
        print(f"error: {one_line(str(problem))}", file=sys.stderr)
    return 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser(
        "config",
        help="inspect the agent's configuration",
        description="Inspect the configuration the agent would run with.",
    )
    config_sub = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    show = config_sub.add_parser(
        "show",
        help="print the resolved configuration and where each value came from",
        description=(
            "Print the configuration the agent would run with, after applying defaults, the"
            " config file, the environment and the flags below, in that order. Secrets are"
            " redacted. Each value is annotated with its source: default, file PATH:LINE,"
            " env NAME, netrc HOST or flag --NAME. Exit status 2 when the configuration is"
            " invalid, with one line per problem on stderr."
        ),
    )
    add_config_flags(show)
    show.add_argument(
        "-o",
        "--output",
        choices=["text", "yaml", "json", "table"],
        default="text",
        help="text: one key per line with its source (default); yaml/json: values only;"
        " table: KEY, VALUE and SOURCE columns",
    )
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    try:
        resolved = load_config(args)
    except ConfigError as exc:
        return report_config_error(exc)
    for warning in resolved.warnings:
        print(f"warning: {one_line(str(warning))}", file=sys.stderr)
    items = list(resolved.redacted_items())
    if args.output == "table":
        rows = [
            {"key": k, "value": json.dumps(v, sort_keys=True), "source": str(s)}
            for k, v, s in items
        ]
        print(render_output(rows, "table", ("key", "value", "source")), end="")
        return 0
    if args.output == "text":
        width = max(len(key) for key, _, _ in items)
        for key, value, source in items:
            shown = json.dumps(value, sort_keys=True)
            print(one_line(f"{key:<{width}}  {shown:<40}  # {source}"))
        return 0
    tree: dict[str, Any] = {}
    for key, value, _ in items:
        _insert(tree, key, value)
    if args.output == "json":
        print(json.dumps(tree, indent=2, sort_keys=True))
    else:
        print(yaml.safe_dump(tree, sort_keys=True), end="")
    return 0


def _insert(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        tree = tree.setdefault(part, {})
    tree[parts[-1]] = value
