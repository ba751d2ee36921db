"""The runSpec recorded on a workload (runtime/recorded_spec.py): one encoder, one decoder."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from launch_agent.model.sweeps import SCHEDULER_MARK
from launch_agent.runtime.recorded_spec import (
    MAX_RUN_SPEC_ANNOTATION,
    record_run_spec,
    recorded_run_spec,
    resume_count,
)
from launch_agent.runtime.runs import RUN_SPEC

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
RUN_SPECS = st.dictionaries(st.text(max_size=12), JSON, max_size=6)


def workload(annotations: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "w", "annotations": annotations}}


@given(RUN_SPECS, st.text(min_size=1, max_size=40), st.booleans())
def test_what_is_recorded_reads_back_without_the_api_key(
    run_spec: dict[str, Any], key: str, scheduler: bool
) -> None:
    recorded = record_run_spec({**run_spec, "_wandb_api_key": key}, scheduler=scheduler)
    assert (SCHEDULER_MARK in recorded) is scheduler
    expected = {k: v for k, v in run_spec.items() if k != "_wandb_api_key"}
    assert recorded_run_spec(workload(recorded)) == expected
    assert "_wandb_api_key" not in recorded[RUN_SPEC]


def test_a_run_spec_over_the_limit_is_not_recorded() -> None:
    big = {"overrides": {"run_config": {"x": "a" * MAX_RUN_SPEC_ANNOTATION}}}
    recorded = record_run_spec(big, scheduler=False)
    assert RUN_SPEC not in recorded
    assert recorded_run_spec(workload(recorded)) is None


@given(st.one_of(st.text(max_size=60), JSON))
def test_any_annotation_reads_as_a_spec_or_nothing(value: Any) -> None:
    found = recorded_run_spec(workload({RUN_SPEC: value}))
    assert found is None or isinstance(found, dict)


@given(JSON)
def test_any_workload_object_reads_as_a_spec_or_nothing(obj: Any) -> None:
    found = recorded_run_spec(obj if isinstance(obj, dict) else None)
    assert found is None or isinstance(found, dict)


def test_resume_count() -> None:
    assert resume_count({}) == 0
    assert resume_count({"_resume_count": 2}) == 2
    assert resume_count({"_resume_count": "2"}) == 0
