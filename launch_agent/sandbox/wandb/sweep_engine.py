"""The sweep server's parameter choice for `grid` and `random` sweeps, as W&B's open-source
`sweeps` engine (PyPI `sweeps`, `grid_search.py`, `random_search.py`, `config/schema.json`)
defines them, for the sandbox's `agentHeartbeat`.

Parameter forms: `value` (constant), `values` (categorical; with optional `probabilities`),
`min`/`max` (both integers: `int_uniform`; else `uniform`), an explicit `distribution` among
`constant`, `categorical`, `int_uniform`, `uniform`, `log_uniform_values`, `q_uniform`,
`q_log_uniform_values`, and nested `parameters`. Grid takes the parameters sorted by name
(`params.py` `HyperParameterSet.from_config`), `int_uniform` as every integer of its range and
`q_uniform` as `np.arange(min, max, q)`, the last name varying fastest (`itertools.product`, as
`grid_search.py` does), and ends when every combination was issued. The order is checked
against sequences the real engine produced (`tests/fixtures/sweeps/grid-sequences.json`).
A run's parameters are `{name: {"value": v}}`; nested parameters arrive as one dict.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

SUPPORTED_METHODS = frozenset({"grid", "random"})


class SweepConfigError(ValueError):
    """A sweep config the engine cannot search, with the parameter's path."""


def sweep_config(text: str) -> dict[str, Any]:
    """The stored config: the SDK sends YAML (`_upsert_sweep`), tests may store JSON."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SweepConfigError(f"the sweep config is not YAML: {exc}") from None
    if not isinstance(value, dict):
        raise SweepConfigError("the sweep config must be a mapping")
    return value


def _distribution(spec: Mapping[str, Any], path: str) -> str:
    if "distribution" in spec:
        return str(spec["distribution"])
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical"
    if "min" in spec and "max" in spec:
        ints = all(
            isinstance(spec[k], int) and not isinstance(spec[k], bool) for k in ("min", "max")
        )
        return "int_uniform" if ints else "uniform"
    raise SweepConfigError(f"parameters.{path}: needs value, values, or min and max")


def _flatten(
    parameters: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for name, spec in sorted(parameters.items()):  # the engine sorts names (`params.py`)
        path = f"{prefix}{name}"
        if not isinstance(spec, Mapping):
            raise SweepConfigError(f"parameters.{path}: must be a mapping")
        if "parameters" in spec:
            out += _flatten(spec["parameters"], f"{path}.")
        else:
            out.append((path, spec))
    return out


def _sample(spec: Mapping[str, Any], path: str, rng: random.Random) -> Any:
    kind = _distribution(spec, path)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        values = list(spec["values"])
        weights = spec.get("probabilities")
        return rng.choices(values, weights=weights)[0] if weights else rng.choice(values)
    low, high = spec["min"], spec["max"]
    if kind == "int_uniform":
        return rng.randint(int(low), int(high))
    if kind == "uniform":
        return rng.uniform(float(low), float(high))
    if kind == "log_uniform_values":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    if kind == "q_uniform":
        q = float(spec.get("q", 1.0))
        return round(rng.uniform(float(low), float(high)) / q) * q
    if kind == "q_log_uniform_values":
        q = float(spec.get("q", 1.0))
        return round(math.exp(rng.uniform(math.log(low), math.log(high))) / q) * q
    raise SweepConfigError(f"parameters.{path}: distribution {kind!r} is not supported here")


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` -> `{"a": {"value": {"b": 1}}}`: nested parameters arrive as one dict."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        head, _, rest = path.partition(".")
        if not rest:
            out[head] = {"value": value}
            continue
        inner = out.setdefault(head, {"value": {}})["value"]
        parts = rest.split(".")
        for part in parts[:-1]:
            inner = inner.setdefault(part, {})
        inner[parts[-1]] = value
    return out


def grid_points(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    flat = _flatten(config.get("parameters") or {})
    axes: list[list[Any]] = []
    for path, spec in flat:
        kind = _distribution(spec, path)
        if kind == "constant":
            axes.append([spec["value"]])
        elif kind == "categorical":
            axes.append(list(spec["values"]))
        elif kind == "int_uniform":
            axes.append(list(range(int(spec["min"]), int(spec["max"]) + 1)))
        elif kind == "q_uniform":
            low, high, q = float(spec["min"]), float(spec["max"]), float(spec.get("q", 1.0))
            axes.append([low + i * q for i in range(math.ceil((high - low) / q))])  # np.arange
        else:
            raise SweepConfigError(
                f"parameters.{path}: grid search needs value, values, int_uniform or"
                f" q_uniform, not {kind}"
            )
    names = [path for path, _ in flat]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]


def next_params(
    config: Mapping[str, Any], issued: Sequence[Mapping[str, Any]], rng: random.Random
) -> dict[str, Any] | None:
    """The next run's parameters (heartbeat form), or None when the search is exhausted."""
    method = config.get("method")
    if method not in SUPPORTED_METHODS:
        raise SweepConfigError(f"method: {method!r} is not supported here (grid, random)")
    if method == "grid":
        points = grid_points(config)
        if len(issued) >= len(points):
            return None
        return _nest(points[len(issued)])
    flat = _flatten(config.get("parameters") or {})
    return _nest({path: _sample(spec, path, rng) for path, spec in flat})
