"""Configuration: W&B keys, precedence, unknown keys, wrong types, redaction (tables)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from launch_agent.model.config import AgentConfig
from launch_agent.model.config_resolve import (
    ConfigError,
    Override,
    Source,
    parse_netrc,
    resolve,
)

KEY = "0123456789abcdef0123456789abcdef01234567"


def _resolve(text: str | None = None, env: dict[str, str] | None = None, **kw: Any) -> Any:
    return resolve(
        file_text=textwrap.dedent(text) if text is not None else None,
        filename="launch-config.yaml",
        env=env or {},
        **kw,
    )


def _problems(text: str, env: dict[str, str] | None = None, **kw: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _resolve(text, env, **kw)
    return [str(p) for p in info.value.problems]


# --- every key W&B documents (reference §4), with the value it must load as ----------------
WANDB_KEYS = [
    ("queues: [a, b]", lambda c: c.queues == ["a", "b"]),
    ("entity: team", lambda c: c.entity == "team"),
    ("max_jobs: -1", lambda c: c.max_jobs == -1 and c.unlimited_jobs),
    ("max_jobs: 10", lambda c: c.max_jobs == 10),
    ("max_schedulers: 3", lambda c: c.max_schedulers == 3),
    ("secure_mode: true", lambda c: c.secure_mode is True),
    ("verbosity: 2", lambda c: c.verbosity == 2),
    ("stopped_run_timeout: 120", lambda c: c.stopped_run_timeout == 120),
    (
        "registry: {type: ecr, uri: 1.dkr.ecr.us-east-1.amazonaws.com/r, region: us-east-1}",
        lambda c: c.registry.type == "ecr" and c.registry.region == "us-east-1",
    ),
    (
        "registry: {repository: r, account_id: '1', image-name: img, project: p}",
        lambda c: c.registry.image_name == "img" and c.registry.account_id == "1",
    ),
    (
        "environment: {type: aws, region: us-east-1}",
        lambda c: c.environment.type == "aws" and c.environment.region == "us-east-1",
    ),
    (
        "environment: {type: gcp, region: us-central1, project: p}",
        lambda c: c.environment.project == "p",
    ),
    ("builder: {type: noop}", lambda c: c.builder.type == "noop"),
    (
        "builder: {type: docker, platform: linux/arm64}",
        lambda c: c.builder.platform == "linux/arm64",
    ),
    (
        """
        builder:
          type: kaniko
          destination: 123456789012.dkr.ecr.us-east-1.amazonaws.com/repo
          build-context-store: s3://bucket/ctx
          build-job-name: build
          secret-name: regcred
          secret-key: config.json
          kaniko-image: gcr.io/kaniko-project/executor:v1.11.0
          kaniko-config: {spec: {template: {spec: {nodeSelector: {pool: build}}}}}
        """,
        lambda c: (
            c.builder.build_context_store == "s3://bucket/ctx"
            and c.builder.build_job_name == "build"
            and c.builder.secret_name == "regcred"
            and c.builder.secret_key == "config.json"
            and c.builder.kaniko_image.endswith("v1.11.0")
            and c.builder.kaniko_config["spec"]["template"]["spec"]["nodeSelector"]["pool"]
            == "build"
        ),
    ),
    # Documented by W&B but rejected by its own pydantic model: accepted here.
    ("queues: [a]\nqueue: b", lambda c: c.all_queues == ["a", "b"]),
    ("queue: b", lambda c: c.all_queues == ["b"]),
    ("queues: [a]\nproject: p", lambda c: c.project == "p"),
]


@pytest.mark.parametrize(("text", "check"), WANDB_KEYS)
def test_every_documented_wandb_key_loads(text: str, check: Any) -> None:
    resolved = _resolve(text)
    assert check(resolved.config)


def test_wandb_defaults_match_the_reference_agent() -> None:
    c = _resolve(None).config
    assert (c.max_jobs, c.max_schedulers, c.verbosity, c.stopped_run_timeout) == (1, 1, 0, 60)
    assert (c.secure_mode, c.queues, c.registry, c.builder) == (False, [], None, None)


def test_wandb_helm_chart_default_launch_config_loads() -> None:
    # The `launchConfig` string of W&B's launch-agent chart (values.yaml), queue name filled in.
    text = """
    queues:
      - my-queue
    max_jobs: 10
    max_schedulers: 1
    builder:
      type: noop
    verbosity: 0
    """
    c = _resolve(text).config
    assert (c.queues, c.max_jobs, c.builder.type) == (["my-queue"], 10, "noop")


def test_project_key_warns_that_it_is_ignored() -> None:
    resolved = _resolve("queues: [a]\nproject: p")
    assert any("project" in w and "model-registry" in w for w in resolved.warnings)


# --- precedence: defaults < file < environment < flags ---------------------------------------
PRECEDENCE = [
    # (file, env, flags, expected max_jobs, expected source)
    (None, {}, [], 1, "default"),
    ("max_jobs: 4", {}, [], 4, "file launch-config.yaml:1"),
    ("max_jobs: 4", {"WANDB_LAUNCH_MAX_JOBS": "6"}, [], 6, "env WANDB_LAUNCH_MAX_JOBS"),
    (
        "max_jobs: 4",
        {"WANDB_LAUNCH_MAX_JOBS": "6"},
        [Override(("max_jobs",), 8, Source("flag", "--max-jobs"))],
        8,
        "flag --max-jobs",
    ),
    (None, {"WANDB_LAUNCH_MAX_JOBS": "-1"}, [], -1, "env WANDB_LAUNCH_MAX_JOBS"),
    ("max_jobs: 4", {"WANDB_LAUNCH_MAX_JOBS": ""}, [], 4, "file launch-config.yaml:1"),
]


@pytest.mark.parametrize(("text", "env", "flags", "expected", "source"), PRECEDENCE)
def test_precedence(
    text: str | None, env: dict[str, str], flags: list[Override], expected: int, source: str
) -> None:
    resolved = _resolve(text, env, flags=flags)
    assert resolved.config.max_jobs == expected
    assert str(resolved.sources["max_jobs"]) == source


ENV_TABLE = [
    ("WANDB_API_KEY", KEY, "api_key", None),
    ("WANDB_BASE_URL", "http://127.0.0.1:9/", "base_url", "http://127.0.0.1:9"),
    ("WANDB_ENTITY", "team", "entity", "team"),
    ("WANDB_RELEASE_NAME", "rel-1", "agent_name", "rel-1"),
    ("LAUNCH_AGENT_NAME", "agent-x", "agent_name", "agent-x"),
    ("LAUNCH_AGENT_QUEUES", "a, b", "queues", ["a", "b"]),
    ("LAUNCH_AGENT_NAMESPACES", "ml,research", "namespaces", ["ml", "research"]),
    ("LAUNCH_AGENT_QUEUE_SPECS_DIR", "/etc/specs", "queue_specs_dir", "/etc/specs"),
    ("LAUNCH_AGENT_LOG_FORMAT", "json", "log_format", "json"),
    ("LAUNCH_AGENT_API_KEY_SECRET", "my-key", "api_key_secret", "my-key"),
    ("LAUNCH_AGENT_API_KEY_SECRET_KEY", "token", "api_key_secret_key", "token"),
    ("LAUNCH_AGENT_KANIKO_NAMESPACE", "kaniko", "kaniko_namespace", "kaniko"),
    ("LAUNCH_AGENT_KANIKO_SERVICE_ACCOUNT", "kaniko-sa", "kaniko_service_account", "kaniko-sa"),
    ("WANDB_LAUNCH_KANIKO_AUTH_SECRET", "push", "kaniko_docker_config_secret", "push"),
]


@pytest.mark.parametrize(
    "field", ["kaniko_namespace", "kaniko_service_account", "kaniko_docker_config_secret"]
)
def test_kaniko_names_must_be_dns_labels(field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _resolve(f"{field}: Not_A_Name", {})
    assert any(field in str(p) for p in caught.value.problems), caught.value.problems


SECRET_NAMES = [
    ({}, "wandb-api-key-launch-agent", "password"),
    ({"LAUNCH_AGENT_NAME": "rel"}, "wandb-api-key-rel", "password"),
    (
        {"LAUNCH_AGENT_API_KEY_SECRET": "shared", "LAUNCH_AGENT_API_KEY_SECRET_KEY": "k"},
        "shared",
        "k",
    ),
]


@pytest.mark.parametrize(("env", "name", "key"), SECRET_NAMES)
def test_api_key_secret_defaults_to_the_chart_name(
    env: dict[str, str], name: str, key: str
) -> None:
    config = _resolve(None, env).config
    assert (config.api_key_secret_name, config.api_key_secret_key) == (name, key)


@pytest.mark.parametrize(("var", "value", "field", "expected"), ENV_TABLE)
def test_environment_variables(var: str, value: str, field: str, expected: Any) -> None:
    resolved = _resolve("entity: from-file\nagent_name: from-file", {var: value})
    got = getattr(resolved.config, field)
    if field == "api_key":
        assert got.get_secret_value() == value
    else:
        assert got == expected
    assert str(resolved.sources[field]) == f"env {var}"


def test_launch_agent_name_beats_wandb_release_name() -> None:
    resolved = _resolve(None, {"WANDB_RELEASE_NAME": "rel", "LAUNCH_AGENT_NAME": "mine"})
    assert resolved.config.agent_name == "mine"


def test_flags_replace_queue_lists_from_file() -> None:
    resolved = _resolve(
        "queues: [a, b]", flags=[Override(("queues",), ["c"], Source("flag", "--queue"))]
    )
    assert resolved.config.queues == ["c"]


def test_nested_sources_point_at_the_line_of_the_key() -> None:
    text = """\
    queues: [a]
    builder:
      type: kaniko
      build-context-store: s3://bucket/p
      destination: registry.example/ml/train
    """
    resolved = _resolve(text)
    assert str(resolved.sources["builder.type"]) == "file launch-config.yaml:3"
    assert str(resolved.sources["builder.build-context-store"]) == "file launch-config.yaml:4"
    assert str(resolved.sources["builder.build-job-name"]) == "file launch-config.yaml:2"
    assert str(resolved.sources["poll.idle_interval_seconds"]) == "default"


# --- unknown keys: name, file and line, nearest valid key ------------------------------------
UNKNOWN = [
    (
        "queues: [a]\nmax_job: 3",
        "launch-config.yaml:2: max_job: unknown key 'max_job'; did you mean 'max_jobs'?",
    ),
    (
        "max-jobs: 3",
        "launch-config.yaml:1: max-jobs: unknown key 'max-jobs'; did you mean 'max_jobs'?",
    ),
    ("queus: [a]", "launch-config.yaml:1: queus: unknown key 'queus'; did you mean 'queues'?"),
    (
        "builder:\n  type: kaniko\n  build-context-stor: s3://x",
        "launch-config.yaml:3: builder.build-context-stor: unknown key 'build-context-stor';"
        " did you mean 'build-context-store'?",
    ),
    (
        "builder:\n  build_context_stor: s3://x",
        "launch-config.yaml:2: builder.build_context_stor: unknown key 'build_context_stor';"
        " did you mean 'build-context-store'?",
    ),
    (
        "poll:\n  idle_interval: 3",
        "launch-config.yaml:2: poll.idle_interval: unknown key 'idle_interval';"
        " did you mean 'idle_interval_seconds'?",
    ),
    ("zzzzzz: 1", "launch-config.yaml:1: zzzzzz: unknown key 'zzzzzz'"),
]


@pytest.mark.parametrize(("text", "expected"), UNKNOWN)
def test_unknown_keys_are_errors_with_suggestions(text: str, expected: str) -> None:
    assert _problems(text) == [expected]


def test_every_problem_is_reported_not_just_the_first() -> None:
    problems = _problems("max_job: 1\nverbosty: 2\nsecure_mode: maybe")
    assert len(problems) == 3
    assert problems[0].startswith("launch-config.yaml:1: max_job:")
    assert problems[1].startswith("launch-config.yaml:2: verbosty:")
    assert problems[2].startswith("launch-config.yaml:3: secure_mode:")


# --- wrong types: key and expected type ------------------------------------------------------
WRONG_TYPES = [
    ("max_jobs: ten", "launch-config.yaml:1: max_jobs: expected an integer, got 'ten' (str)"),
    ("max_jobs: 1.5", "launch-config.yaml:1: max_jobs: expected an integer, got 1.5 (float)"),
    ("queues: q1", "launch-config.yaml:1: queues: expected a list, got 'q1' (str)"),
    (
        "secure_mode: maybe",
        "launch-config.yaml:1: secure_mode: expected a boolean (true or false), got 'maybe' (str)",
    ),
    ("builder: kaniko", "launch-config.yaml:1: builder: expected a mapping, got 'kaniko' (str)"),
    (
        "builder: {type: buildah}",
        "launch-config.yaml:1: builder.type: expected one of 'docker', 'kaniko' or 'noop', got 'buildah'",
    ),
    ("entity: [a]", "launch-config.yaml:1: entity: expected a string, got ['a'] (list)"),
    (
        "max_jobs: 0",
        "launch-config.yaml:1: max_jobs: must be a positive integer, or -1 for unlimited",
    ),
    (
        "max_jobs: -5",
        "launch-config.yaml:1: max_jobs: must be a positive integer, or -1 for unlimited",
    ),
    (
        "builder: {type: kaniko, secret-name: s}",
        "launch-config.yaml:1: builder: secret-name and secret-key must be set together",
    ),
    (
        "agent_name: Agent_1",
        "launch-config.yaml:1: agent_name: must be a DNS label (lower-case letters, digits and '-',"
        " at most 63 characters) because it becomes a Kubernetes label value",
    ),
    ("namespaces: []", "launch-config.yaml:1: namespaces: must name at least one namespace"),
    (
        "poll: {max_pops_per_queue: 0}",
        "launch-config.yaml:1: poll.max_pops_per_queue: Input should be greater than or equal to 1",
    ),
    (
        "quota: {max_pending_per_leaf: 0}",
        "launch-config.yaml:1: quota.max_pending_per_leaf: Input should be greater than or equal"
        " to 1",
    ),
    (
        "base_url: api.wandb.ai",
        "launch-config.yaml:1: base_url: must be an http:// or https:// URL",
    ),
]


@pytest.mark.parametrize(("text", "expected"), WRONG_TYPES)
def test_wrong_types_name_key_and_expected_type(text: str, expected: str) -> None:
    assert _problems(text) == [expected]


def test_wrong_type_from_environment_names_the_variable() -> None:
    assert _problems("", {"WANDB_LAUNCH_MAX_JOBS": "many"}) == [
        "env WANDB_LAUNCH_MAX_JOBS: max_jobs: expected an integer, got 'many' (str)"
    ]


def test_wrong_type_from_flag_names_the_flag() -> None:
    flags = [Override(("log_format",), "xml", Source("flag", "--log-format"))]
    assert _problems("", flags=flags) == [
        "flag --log-format: log_format: expected one of 'text' or 'json', got 'xml'"
    ]


MALFORMED = [
    ("queues: [a\n", "launch-config.yaml:2: (document): "),
    ("- a\n- b\n", "launch-config.yaml: (document): expected a mapping of configuration keys"),
    ("entity: a\nentity: b\n", "launch-config.yaml:2: entity: duplicate key"),
    ("api_key: " + KEY, "launch-config.yaml:1: api_key: credentials may not be stored"),
]


@pytest.mark.parametrize(("text", "prefix"), MALFORMED)
def test_malformed_files(text: str, prefix: str) -> None:
    problems = _problems(text)
    assert problems[0].startswith(prefix), problems


def test_empty_file_is_all_defaults() -> None:
    assert _resolve("").config == AgentConfig()


# --- secrets ---------------------------------------------------------------------------------
def test_redaction_hides_the_api_key_and_keeps_its_source() -> None:
    resolved = _resolve("queues: [a]", {"WANDB_API_KEY": KEY})
    items = {key: (value, str(src)) for key, value, src in resolved.redacted_items()}
    assert items["api_key"] == ("********", "env WANDB_API_KEY")
    assert KEY not in repr(resolved.config)
    assert all(KEY not in repr(value) for value, _ in items.values())


def test_the_status_token_comes_from_the_environment_and_is_redacted() -> None:
    token = "status-token-4e1b"  # a known value that must not be shown
    resolved = _resolve("queues: [a]", {"LAUNCH_AGENT_STATUS_TOKEN": token})
    assert resolved.config.status.token is not None
    assert resolved.config.status.token.get_secret_value() == token
    items = {key: (value, str(src)) for key, value, src in resolved.redacted_items()}
    assert items["status.token"] == ("********", "env LAUNCH_AGENT_STATUS_TOKEN")
    assert all(token not in repr(value) for value, _ in items.values())


def test_api_key_from_netrc_for_the_base_url_host() -> None:
    netrc = f"machine example.org login user password nope\nmachine api.wandb.ai login user password {KEY}\n"
    resolved = _resolve(None, netrc_text=netrc)
    assert resolved.config.api_key is not None
    assert resolved.config.api_key.get_secret_value() == KEY
    assert str(resolved.sources["api_key"]) == "netrc api.wandb.ai"


def test_environment_key_beats_netrc() -> None:
    netrc = "default login user password fromnetrc"
    resolved = _resolve(None, {"WANDB_API_KEY": KEY}, netrc_text=netrc)
    assert resolved.config.api_key is not None
    assert resolved.config.api_key.get_secret_value() == KEY


NETRC = [
    ("machine h login u password p", "h", "p"),
    ("machine h login u password p\ndefault login d password dp", "other", "dp"),
    ("machine h login u password p", "other", None),
    ("", "h", None),
]


@pytest.mark.parametrize(("text", "host", "expected"), NETRC)
def test_parse_netrc(text: str, host: str, expected: str | None) -> None:
    assert parse_netrc(text, host) == expected


# --- the agent's tracking and shutdown keys (docs/configuration.md) ---------------------------
AGENT_RUNTIME_KEYS = [
    ("", lambda c: c.tracking.unschedulable_timeout_seconds == 600),
    ("", lambda c: (c.tracking.max_requeues, c.tracking.log_tail_lines) == (5, 50)),
    ("", lambda c: c.tracking.stop_check_seconds == 10),
    ("", lambda c: (c.shutdown_grace_seconds, c.specs_reload_seconds) == (10, 5)),
    (
        "tracking: {unschedulable_timeout_seconds: 90}",
        lambda c: c.tracking.unschedulable_timeout_seconds == 90,
    ),
    ("tracking: {max_requeues: 0}", lambda c: c.tracking.max_requeues == 0),
    ("tracking: {log_tail_lines: 0}", lambda c: c.tracking.log_tail_lines == 0),
    ("tracking: {stop_check_seconds: 2.5}", lambda c: c.tracking.stop_check_seconds == 2.5),
    ("shutdown_grace_seconds: 0", lambda c: c.shutdown_grace_seconds == 0),
    ("specs_reload_seconds: 0.5", lambda c: c.specs_reload_seconds == 0.5),
]


@pytest.mark.parametrize(("text", "check"), AGENT_RUNTIME_KEYS)
def test_agent_runtime_keys(text: str, check: Any) -> None:
    assert check(_resolve(text or None).config)


BAD_RUNTIME_VALUES = [
    ("tracking: {unschedulable_timeout_seconds: 0}", "tracking.unschedulable_timeout_seconds"),
    ("tracking: {max_requeues: -1}", "tracking.max_requeues"),
    ("tracking: {log_tail_lines: 5000}", "tracking.log_tail_lines"),
    ("tracking: {stop_check_seconds: 0}", "tracking.stop_check_seconds"),
    ("tracking: {stop_check: 1}", "tracking.stop_check"),
    ("shutdown_grace_seconds: -1", "shutdown_grace_seconds"),
    ("specs_reload_seconds: 0", "specs_reload_seconds"),
]


@pytest.mark.parametrize(("text", "path"), BAD_RUNTIME_VALUES)
def test_bad_agent_runtime_values_name_the_key(text: str, path: str) -> None:
    problems = _problems(text)
    assert len(problems) == 1
    assert f": {path}:" in problems[0], problems


KANIKO_CASES = [
    (
        "builder:\n  type: kaniko\n  destination: registry.example/ml/train\n",
        # A missing key is reported at its parent's line.
        ["launch-config.yaml:1: builder.build-context-store: required for Kaniko builds"],
    ),
    (
        "builder:\n  type: kaniko\n  build-context-store: bucket/x\n"
        "  destination: registry.example/ml/train:v1\n",
        [
            "launch-config.yaml:3: builder.build-context-store: 'bucket/x': expected s3://",
            "launch-config.yaml:4: builder.destination: 'registry.example/ml/train:v1': give",
        ],
    ),
    ("builder:\n  type: noop\n", []),
    (
        "builder:\n  type: kaniko\n  build-context-store: s3://ctx-bucket\n"
        "  destination: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml\n",
        [],
    ),
]


@pytest.mark.parametrize(("text", "expected"), KANIKO_CASES)
def test_kaniko_builder_is_checked_at_start(text: str, expected: list[str]) -> None:
    if not expected:
        assert _resolve(text, {}).config.builder is not None
        return
    with pytest.raises(ConfigError) as caught:
        _resolve(text, {})
    got = [str(p) for p in caught.value.problems]
    assert len(got) == len(expected), got
    for line, start in zip(got, expected, strict=True):
        assert line.startswith(start), (line, start)


# --- rate limits ------------------------------------------------------------------------------


def test_rate_limit_defaults() -> None:
    config = AgentConfig()
    assert (config.kubernetes.qps, config.kubernetes.burst) == (1000.0, 2000)
    assert config.dispatch.max_runs_per_second_per_project is None


def test_rate_limits_load() -> None:
    config = _resolve(
        """
        kubernetes: {qps: 50, burst: 100}
        dispatch: {max_runs_per_second_per_project: 2.5}
        """
    ).config
    assert (config.kubernetes.qps, config.kubernetes.burst) == (50.0, 100)
    assert config.dispatch.max_runs_per_second_per_project == 2.5


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kubernetes: {qps: 0}", "kubernetes.qps"),
        ("kubernetes: {burst: 0}", "kubernetes.burst"),
        (
            "dispatch: {max_runs_per_second_per_project: 0}",
            "dispatch.max_runs_per_second_per_project",
        ),
        ("dispatch: {max_runs_per_second: 1}", "dispatch.max_runs_per_second"),
    ],
)
def test_bad_rate_limits_name_the_key_and_line(text: str, where: str) -> None:
    problems = _problems(text)
    assert len(problems) == 1
    assert where in problems[0]
    assert "launch-config.yaml" in problems[0] and ":1" in problems[0]
