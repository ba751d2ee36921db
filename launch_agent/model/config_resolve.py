"""Resolve the agent's configuration: defaults < file < environment < command-line flags.

Pure: the caller reads the file, the environment and `~/.netrc` and passes their contents in,
so the precedence rules and every error message are tested as tables without touching the
machine. Every value remembers where it came from (`config show` prints it), and every problem
names its origin (file and line, environment variable or flag), the key path and the reason.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, SecretStr, ValidationError

from launch_agent.model.build import builder_problems
from launch_agent.model.config import ENV_ONLY_FIELDS, SECRET_FIELDS, SECRET_PATHS, AgentConfig
from launch_agent.model.safe_load import CONFIG_LIMITS, InputError, compose_yaml

Path = tuple[str | int, ...]
SourceKind = Literal["default", "file", "env", "flag", "netrc"]


@dataclass(frozen=True)
class Source:
    """Where one configuration value came from."""

    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        return self.kind if not self.detail else f"{self.kind} {self.detail}"


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with the configuration: where, which key, why."""

    origin: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.path}: {self.reason}"


class ConfigError(Exception):
    """The configuration cannot be used; `problems` lists every reason, not just the first."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Override:
    """A value from the environment or a flag, aimed at one configuration path."""

    path: Path
    value: Any
    source: Source


@dataclass(frozen=True)
class ResolvedConfig:
    config: AgentConfig
    sources: Mapping[str, Source]
    warnings: Sequence[str] = field(default_factory=tuple)

    def redacted_items(self) -> Iterator[tuple[str, Any, Source]]:
        """Every leaf as (dotted path, value, source), secrets replaced by a mask."""
        for path, value in _leaves(_dump(self.config)):
            key = _dotted(path)
            secret = value is not None and (
                (bool(path) and path[0] in SECRET_FIELDS) or tuple(path[:2]) in SECRET_PATHS
            )
            yield key, "********" if secret else value, self.sources.get(key, Source("default"))


# Environment variables, applied in this order (a later one wins over an earlier one).
ENVIRONMENT: tuple[tuple[str, Path, str], ...] = (
    ("WANDB_API_KEY", ("api_key",), "str"),
    ("WANDB_BASE_URL", ("base_url",), "str"),
    ("WANDB_ENTITY", ("entity",), "str"),
    ("WANDB_LAUNCH_MAX_JOBS", ("max_jobs",), "str"),
    # W&B's Helm chart names the agent after the release; our own variable wins over it.
    ("WANDB_RELEASE_NAME", ("agent_name",), "str"),
    ("LAUNCH_AGENT_NAME", ("agent_name",), "str"),
    ("LAUNCH_AGENT_QUEUES", ("queues",), "list"),
    ("LAUNCH_AGENT_NAMESPACES", ("namespaces",), "list"),
    ("LAUNCH_AGENT_QUEUE_SPECS_DIR", ("queue_specs_dir",), "str"),
    ("LAUNCH_AGENT_LOG_FORMAT", ("log_format",), "str"),
    ("LAUNCH_AGENT_HEALTH_PORT", ("health", "port"), "str"),
    ("LAUNCH_AGENT_STATUS_TOKEN", ("status", "token"), "str"),
    ("LAUNCH_AGENT_API_KEY_SECRET", ("api_key_secret",), "str"),
    ("LAUNCH_AGENT_API_KEY_SECRET_KEY", ("api_key_secret_key",), "str"),
    ("LAUNCH_AGENT_KANIKO_NAMESPACE", ("kaniko_namespace",), "str"),
    ("LAUNCH_AGENT_KANIKO_SERVICE_ACCOUNT", ("kaniko_service_account",), "str"),
    ("WANDB_LAUNCH_KANIKO_AUTH_SECRET", ("kaniko_docker_config_secret",), "str"),
    ("WANDB_LAUNCH_KANIKO_PVC_NAME", ("kaniko_pvc_name",), "str"),
    ("WANDB_LAUNCH_KANIKO_PVC_MOUNT_PATH", ("kaniko_pvc_mount_path",), "str"),
    ("LAUNCH_AGENT_AZURE_STORAGE_KEY_SECRET", ("azure_storage_key_secret",), "str"),
    ("WANDB_LAUNCH_START_TIMEOUT", ("tracking", "start_timeout_seconds"), "str"),
    # The chart's downward API: the pod is the replica's identity in the leader Lease.
    ("LAUNCH_AGENT_LEADER_ELECTION", ("leader_election", "enabled"), "str"),
    ("LAUNCH_AGENT_LEASE_NAME", ("leader_election", "lease_name"), "str"),
    ("LAUNCH_AGENT_POD_NAME", ("leader_election", "identity"), "str"),
    ("LAUNCH_AGENT_POD_NAMESPACE", ("leader_election", "namespace"), "str"),
    # The chart's `gitCreds` and `sshAuthSecrets`: git itself never sees the agent's
    # environment, so these reach it through the builder's git settings.
    ("LAUNCH_AGENT_GIT_CREDENTIALS_FILE", ("builder", "git", "credentials_file"), "str"),
    ("LAUNCH_AGENT_GIT_SSH_COMMAND", ("builder", "git", "ssh_command"), "str"),
    # The chart's downward API: the build record lives in the agent's own namespace.
    ("LAUNCH_AGENT_BUILD_RECORD_NAMESPACE", ("builder", "trust", "record_namespace"), "str"),
)

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean (true or false)",
    "bool_parsing": "a boolean (true or false)",
    "string_type": "a string",
    "float_type": "a number",
    "float_parsing": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def parse_yaml_with_lines(text: str, filename: str) -> tuple[Any, dict[Path, int]]:
    """Parse one YAML document; return the data and the 1-based line of every key and item.

    The shared loader (`safe_load`) refuses duplicate keys, merge keys, unsafe tags, alias
    bombs and deep nesting with the line where it found them.
    """
    try:
        data, node = compose_yaml(text, source=filename, limits=CONFIG_LIMITS)
    except InputError as exc:
        where = f"{filename}:{exc.line}" if exc.line is not None else filename
        raise ConfigError([ConfigProblem(where, exc.path or "(document)", exc.reason)]) from None
    if node is None:
        return None, {}
    lines: dict[Path, int] = {}
    problems: list[ConfigProblem] = []
    _collect_lines(node, (), lines, problems, filename)
    if problems:
        raise ConfigError(problems)
    return data, lines


def _collect_lines(
    node: yaml.Node,
    path: Path,
    lines: dict[Path, int],
    problems: list[ConfigProblem],
    filename: str,
) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    ConfigProblem(f"{filename}:{line}", _dotted((*path, key)), "duplicate key")
                )
            seen.add(key)
            lines[(*path, key)] = line
            _collect_lines(value_node, (*path, key), lines, problems, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _collect_lines(item, (*path, index), lines, problems, filename)


def parse_netrc(text: str, host: str) -> str | None:
    """The password for `host` (or the `default` entry) in a .netrc file's text."""
    tokens = text.split()
    current: str | None = None
    found: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "machine" and i + 1 < len(tokens):
            current = tokens[i + 1]
            i += 2
        elif token == "default":
            current = ""
            i += 1
        elif token == "password" and i + 1 < len(tokens) and current is not None:
            found.setdefault(current, tokens[i + 1])
            i += 2
        elif token == "macdef":
            # A macro runs to the next blank line, which a split() has erased: stop here.
            break
        else:
            i += 1
    return found.get(host, found.get(""))


def environment_overrides(env: Mapping[str, str]) -> list[Override]:
    """The configuration values the environment sets, in precedence order."""
    result = []
    for name, path, shape in ENVIRONMENT:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        value: Any = [part.strip() for part in raw.split(",") if part.strip()]
        if shape == "str":
            value = raw
        result.append(Override(path, value, Source("env", name)))
    return result


def resolve(
    *,
    file_text: str | None = None,
    filename: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Iterable[Override] = (),
    netrc_text: str | None = None,
) -> ResolvedConfig:
    """Build the configuration from its layers; raise `ConfigError` listing every problem."""
    env = env or {}
    data: dict[str, Any] = {}
    lines: dict[Path, int] = {}
    fname = filename or "launch-config.yaml"
    warnings: list[str] = []
    if file_text is not None:
        parsed, lines = parse_yaml_with_lines(file_text, fname)
        if parsed is None:
            parsed = {}
        if not isinstance(parsed, dict):
            raise ConfigError(
                [ConfigProblem(fname, "(document)", "expected a mapping of configuration keys")]
            )
        data = parsed
        file_problems = [
            ConfigProblem(
                f"{fname}:{lines.get((key,), 1)}",
                key,
                "credentials may not be stored in the configuration file;"
                " set WANDB_API_KEY (the Helm chart does this from a Secret)",
            )
            for key in ENV_ONLY_FIELDS
            if key in data
        ]
        if file_problems:
            raise ConfigError(file_problems)

    origins: dict[Path, Source] = {}
    for override in [*environment_overrides(env), *flags]:
        _set(data, override.path, override.value)
        origins[override.path] = override.source

    if "api_key" not in data and netrc_text:
        host = urlparse(str(data.get("base_url", AgentConfig().base_url))).hostname or ""
        key = parse_netrc(netrc_text, host)
        if key:
            data["api_key"] = key
            origins[("api_key",)] = Source("netrc", host)

    try:
        config = AgentConfig.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(err, data, lines, origins, fname) for err in exc.errors()]
        # Report in the order an admin reads the file; env and flag problems after it.
        problems.sort(key=lambda p: _file_line(p.origin, fname))
        raise ConfigError(problems) from None

    # A Kaniko builder that cannot work fails at start-up, not at the first build.
    build_problems = builder_problems(
        config.builder, config.registry, pvc=config.kaniko_pvc_name is not None
    )
    if build_problems:
        raise ConfigError(
            [
                ConfigProblem(_build_origin(p.path, origins, lines, fname), p.path, p.reason)
                for p in build_problems
            ]
        )

    if config.project is not None:
        warnings.append(
            "project: accepted for compatibility with W&B's documentation and ignored:"
            " launch queues and agents always live in the W&B project 'model-registry'"
        )
    if not config.all_queues:
        warnings.append("queues: no queue is configured; the agent would have nothing to poll")

    sources: dict[str, Source] = {}
    for path, _ in _leaves(_dump(config)):
        sources[_dotted(path)] = _source_of(path, origins, lines, fname)
    return ResolvedConfig(config, sources, tuple(warnings))


def _build_origin(
    dotted: str, origins: Mapping[Path, Source], lines: Mapping[Path, int], fname: str
) -> str:
    """`file:line` of the nearest key of a builder problem's path (or its env/flag source)."""
    path: Path = tuple(dotted.split("."))
    for depth in range(len(path), 0, -1):
        prefix = path[:depth]
        if prefix in origins:
            return str(origins[prefix])
        if prefix in lines:
            return f"{fname}:{lines[prefix]}"
    return fname


def _source_of(
    path: Path, origins: Mapping[Path, Source], lines: Mapping[Path, int], fname: str
) -> Source:
    for depth in range(len(path), 0, -1):
        prefix = path[:depth]
        if prefix in origins:
            return origins[prefix]
    for depth in range(len(path), 0, -1):
        prefix = path[:depth]
        if prefix in lines:
            return Source("file", f"{fname}:{lines[prefix]}")
    return Source("default")


def _problem(
    err: Mapping[str, Any],
    data: Mapping[str, Any],
    lines: Mapping[Path, int],
    origins: Mapping[Path, Source],
    fname: str,
) -> ConfigProblem:
    loc: Path = tuple(err["loc"])
    # Errors raised by a model validator point at the model, not at one of its keys.
    loc = tuple(part for part in loc if part != "__root__")
    kind = err["type"]
    origin = _origin(loc, lines, origins, fname)
    path = _dotted(loc) if loc else "(document)"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        reason = f"unknown key {key!r}"
        suggestion = _suggest(key, _valid_keys(loc[:-1]))
        if suggestion:
            reason += f"; did you mean {suggestion!r}?"
        return ConfigProblem(origin, path, reason)
    if kind == "missing":
        return ConfigProblem(origin, path, "required key is missing")
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return ConfigProblem(origin, path, f"expected one of {expected}, got {err['input']!r}")
    if kind in _EXPECTED:
        got = err.get("input")
        return ConfigProblem(
            origin, path, f"expected {_EXPECTED[kind]}, got {got!r} ({type(got).__name__})"
        )
    message = str(err.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    return ConfigProblem(origin, path, message)


def _file_line(origin: str, fname: str) -> int:
    prefix = f"{fname}:"
    if origin.startswith(prefix) and origin[len(prefix) :].isdigit():
        return int(origin[len(prefix) :])
    return 1 << 30


def _origin(
    loc: Path, lines: Mapping[Path, int], origins: Mapping[Path, Source], fname: str
) -> str:
    source = _source_of(loc, origins, lines, fname)
    if source.kind == "file":
        return source.detail
    if source.kind == "default":
        return fname
    return str(source)


def _model_at(path: Path) -> type[BaseModel] | None:
    model: type[BaseModel] | None = AgentConfig
    for part in path:
        if model is None or isinstance(part, int):
            return None
        found = None
        for name, info in model.model_fields.items():
            if part in (name, info.alias):
                found = _as_model(info.annotation)
        model = found
    return model


def _as_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            model = _as_model(arg)
            if model is not None:
                return model
    return None


def _valid_keys(path: Path) -> list[str]:
    model = _model_at(path)
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _suggest(key: str, valid: Sequence[str]) -> str | None:
    def norm(s: str) -> str:
        return s.lower().replace("-", "_")

    by_norm = {norm(v): v for v in valid}
    if norm(key) in by_norm:
        return by_norm[norm(key)]
    match = difflib.get_close_matches(norm(key), list(by_norm), n=1, cutoff=0.6)
    return by_norm[match[0]] if match else None


def _set(data: dict[str, Any], path: Path, value: Any) -> None:
    target = data
    for part in path[:-1]:
        nxt = target.get(str(part))
        if not isinstance(nxt, dict):
            nxt = {}
            target[str(part)] = nxt
        target = nxt
    target[str(path[-1])] = value


def _dump(config: AgentConfig) -> dict[str, Any]:
    raw = config.model_dump(by_alias=True, mode="python")
    secret = raw.get("api_key")
    if isinstance(secret, SecretStr):
        raw["api_key"] = secret.get_secret_value()
    return raw


def _leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    else:
        yield path, value


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
