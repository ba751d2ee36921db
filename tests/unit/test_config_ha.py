"""The configuration keys of leader election and the stop-check tiers (docs/configuration.md)."""

from __future__ import annotations

import textwrap

import pytest

from launch_agent.model.config import AgentConfig
from launch_agent.model.config_resolve import ConfigError, resolve
from launch_agent.runtime.stopper import stop_check_policy


def load(text: str | None = None, env: dict[str, str] | None = None) -> AgentConfig:
    return resolve(
        file_text=textwrap.dedent(text) if text is not None else None,
        filename="launch-config.yaml",
        env={"WANDB_API_KEY": "k" * 40, **(env or {})},
    ).config


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return [str(p) for p in info.value.problems]


def test_defaults_are_client_gos_and_off() -> None:
    election = load().leader_election
    assert not election.enabled
    assert (
        election.lease_duration_seconds,
        election.renew_deadline_seconds,
        election.retry_period_seconds,
    ) == (15, 10, 2)
    policy = stop_check_policy(load())
    assert (policy.interval, policy.young_seconds, policy.old_interval) == (10, 3600, 300)
    assert (policy.batch, policy.max_requests_per_minute) == (100, 100)


def test_the_chart_environment_turns_it_on_with_the_pod_as_identity() -> None:
    election = load(
        env={
            "LAUNCH_AGENT_LEADER_ELECTION": "true",
            "LAUNCH_AGENT_LEASE_NAME": "release",
            "LAUNCH_AGENT_POD_NAME": "release-7d9f-abcde",
            "LAUNCH_AGENT_POD_NAMESPACE": "agents",
        }
    ).leader_election
    assert election.enabled
    assert (election.lease_name, election.identity, election.namespace) == (
        "release",
        "release-7d9f-abcde",
        "agents",
    )


def test_timing_out_of_order_is_refused_at_its_line() -> None:
    found = problems(
        """\
        leader_election:
          enabled: true
          lease_duration_seconds: 10
          renew_deadline_seconds: 10
        """
    )
    assert len(found) == 1
    assert "launch-config.yaml:1: leader_election:" in found[0]
    assert "need lease_duration_seconds > renew_deadline_seconds > retry_period_seconds" in found[0]


def test_older_runs_cannot_be_checked_more_often_than_young_ones() -> None:
    found = problems("tracking: {stop_check_seconds: 10, stop_check_old_seconds: 5}")
    assert len(found) == 1
    assert "stop_check_old_seconds (5) must be at least stop_check_seconds (10)" in found[0]


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("tracking: {stop_check_batch: 0}", "tracking.stop_check_batch"),
        ("tracking: {stop_check_batch: 5000}", "tracking.stop_check_batch"),
        ("tracking: {stop_check_max_requests_per_minute: 0}", "tracking.stop_check_max"),
        ("leader_election: {lease_name: 3, enabled: 1.5}", "leader_election."),
        ("leader_election: {leader: true}", "leader_election.leader"),
    ],
)
def test_bad_values_name_the_key(text: str, path: str) -> None:
    found = problems(text)
    assert found and all(path in p for p in found), found
