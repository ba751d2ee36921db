"""The sandbox sweep server's parameter choice (grid and random) and its heartbeat rules."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.wandb import LaunchState
from launch_agent.sandbox.wandb.sweep_engine import (
    SweepConfigError,
    grid_points,
    next_params,
    sweep_config,
)

GRID: dict[str, Any] = {
    "method": "grid",
    "parameters": {
        "opt": {"value": "adam"},
        "lr": {"values": [0.1, 0.01]},
        "layers": {"values": [1, 2, 3]},
    },
}


RECORDED = json.loads(
    (
        Path(__file__).resolve().parents[2] / "fixtures" / "sweeps" / "grid-sequences.json"
    ).read_text()
)


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_grid_order_equals_the_real_sweeps_engine(case: str) -> None:
    config, expected = RECORDED[case]["config"], RECORDED[case]["runs"]
    issued: list[dict[str, Any]] = []
    while (params := next_params(config, issued, random.Random(0))) is not None:
        issued.append(params)
    assert issued == expected


def test_grid_is_the_product_of_sorted_names_last_fastest() -> None:
    points = grid_points(GRID)
    assert [(p["layers"], p["lr"]) for p in points] == [
        (1, 0.1), (1, 0.01), (2, 0.1), (2, 0.01), (3, 0.1), (3, 0.01),
    ]  # fmt: skip
    assert all(p["opt"] == "adam" for p in points)
    q = {
        "method": "grid",
        "parameters": {"x": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.25}},
    }
    assert [p["x"] for p in grid_points(q)] == [0.0, 0.25, 0.5, 0.75]


def test_grid_issues_each_point_once_then_ends() -> None:
    rng = random.Random(1)
    issued: list[dict[str, Any]] = []
    while (params := next_params(GRID, issued, rng)) is not None:
        issued.append(params)
    assert len(issued) == 6
    assert issued[0] == {"layers": {"value": 1}, "lr": {"value": 0.1}, "opt": {"value": "adam"}}
    assert len({str(p) for p in issued}) == 6


def test_grid_refuses_continuous_parameters_with_the_path() -> None:
    config = {"method": "grid", "parameters": {"lr": {"min": 0.0, "max": 1.0}}}
    with pytest.raises(SweepConfigError, match=r"parameters\.lr: grid search needs value"):
        grid_points(config)


def test_random_samples_within_each_distribution() -> None:
    config = {
        "method": "random",
        "parameters": {
            "lr": {"min": 0.001, "max": 0.1},
            "epochs": {"min": 1, "max": 5},
            "wd": {"distribution": "log_uniform_values", "min": 1e-6, "max": 1e-2},
            "bs": {"values": [16, 32]},
            "model": {"parameters": {"width": {"values": [64, 128]}, "act": {"value": "relu"}}},
        },
    }
    rng = random.Random(7)
    for _ in range(200):
        p = next_params(config, [], rng)
        assert p is not None
        assert 0.001 <= p["lr"]["value"] <= 0.1
        assert isinstance(p["epochs"]["value"], int) and 1 <= p["epochs"]["value"] <= 5
        assert 1e-6 <= p["wd"]["value"] <= 1e-2
        assert p["bs"]["value"] in (16, 32)
        assert p["model"]["value"]["act"] == "relu"
        assert p["model"]["value"]["width"] in (64, 128)


def test_unsupported_methods_and_forms_are_refused() -> None:
    with pytest.raises(SweepConfigError, match="method: 'bayes'"):
        next_params({"method": "bayes", "parameters": {}}, [], random.Random())
    with pytest.raises(SweepConfigError, match=r"parameters\.x: needs value, values"):
        next_params({"method": "random", "parameters": {"x": {}}}, [], random.Random())
    with pytest.raises(SweepConfigError, match="not YAML"):
        sweep_config("parameters: [unclosed")


def test_heartbeat_hands_out_one_run_per_idle_agent_up_to_the_run_cap() -> None:
    state = LaunchState()
    sweep = state.add_sweep("ent", "proj", "s1", "PENDING", config={**GRID, "run_cap": 2})
    agent = state.create_sweep_agent("ent", "proj", "s1", "host-0")
    assert sweep.state == "RUNNING", "a registered agent starts a pending sweep"
    (first,) = state.sweep_heartbeat(agent, {})
    assert first["type"] == "run"
    run = state.run("ent", "proj", first["run_id"])
    assert run is not None and run.state == "pending" and run.sweep_name == "s1"
    assert state.sweep_heartbeat(agent, {first["run_id"]: True}) == [], "its run is alive"
    (second,) = state.sweep_heartbeat(agent, {})
    assert second["args"]["lr"] == {"value": 0.01}, "the next grid point"
    assert state.sweep_heartbeat(agent, {}) == [], "run_cap reached"


def test_an_exhausted_grid_finishes_the_sweep_and_a_cancel_stops_its_runs() -> None:
    state = LaunchState()
    config = {"method": "grid", "parameters": {"a": {"values": [1]}}}
    sweep = state.add_sweep("ent", "proj", "s2", config=config)
    agent = state.create_sweep_agent("ent", "proj", "s2", "h")
    (cmd,) = state.sweep_heartbeat(agent, {})
    assert state.sweep_heartbeat(agent, {}) == []
    assert sweep.state == "FINISHED"
    state.set_sweep_state(sweep, "CANCELED")
    run = state.run("ent", "proj", cmd["run_id"])
    assert run is not None and run.stopped
