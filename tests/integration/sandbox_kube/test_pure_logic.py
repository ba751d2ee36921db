"""Pure parts of the sandbox: selectors, patches, outcome grammar, quantities and fit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.sandbox.cluster.nodes import Node, fit, quantity
from launch_agent.sandbox.cluster.outcomes import Outcome, OutcomeError, parse_outcome
from launch_agent.sandbox.kube.patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from launch_agent.sandbox.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector,
)

LABELS = {"app": "web", "tier": "gpu", "wandb.ai/run-id": "r1"}

LABEL_CASES = [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("missing!=x", True),  # != matches objects without the label, as in Kubernetes
    ("app in (web, db)", True),
    ("app in (db)", False),
    ("app notin (db,cache)", True),
    ("missing notin (db)", True),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app=web,tier=gpu", True),
    ("app=web,tier in (cpu)", False),
    ("wandb.ai/run-id=r1", True),
]


@pytest.mark.parametrize(("selector", "expected"), LABEL_CASES)
def test_label_selector_grammar(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


@pytest.mark.parametrize(
    "bad",
    ["app=", "app in ()", "app in (a", "=x", "a b", "app=web,,x", "!app in (a)", "bad key=x"],
)
def test_bad_label_selectors_say_what_is_wrong(bad: str) -> None:
    if bad == "app=":
        # An empty value is valid Kubernetes syntax: it selects objects with `app: ""`.
        assert parse_label_selector(bad).matches({"app": ""})
        return
    with pytest.raises(SelectorError) as err:
        parse_label_selector(bad)
    assert bad.strip() in str(err.value) or "selector" in str(err.value)


FIELD_CASES = [
    ("metadata.name=p1", "pods", True),
    ("metadata.name!=p1", "pods", False),
    ("status.phase=Running", "pods", True),
    ("status.phase==Failed", "pods", False),
    ("metadata.namespace=default,status.phase=Running", "pods", True),
    ("spec.nodeName=n1", "pods", True),
]
POD = {
    "metadata": {"name": "p1", "namespace": "default"},
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(("selector", "resource", "expected"), FIELD_CASES)
def test_field_selectors(selector: str, resource: str, expected: bool) -> None:
    assert parse_field_selector(selector, resource).matches(POD) is expected


def test_unsupported_field_is_refused_with_the_field_name() -> None:
    with pytest.raises(SelectorError, match=r'"status.phase" for jobs'):
        parse_field_selector("status.phase=Running", "jobs")


def test_label_selector_objects() -> None:
    sel = selector_from_label_selector(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
        }
    )
    assert sel.matches(LABELS)
    assert not sel.matches({"app": "web"})


# --- patches ----------------------------------------------------------------------------------

POD_SPEC = {
    "spec": {"containers": [{"name": "main", "image": "a", "env": [{"name": "X", "value": "1"}]}]}
}

STRATEGIC_CASES: list[tuple[str, Any, Any]] = [
    (
        "containers merge by name",
        {"spec": {"containers": [{"name": "side", "image": "b"}]}},
        ["main", "side"],
    ),
    (
        "same name patches in place",
        {"spec": {"containers": [{"name": "main", "image": "c"}]}},
        ["main"],
    ),
    (
        "$patch delete removes",
        {"spec": {"containers": [{"name": "main", "$patch": "delete"}]}},
        [],
    ),
    (
        "$patch replace replaces the list",
        {"spec": {"containers": [{"name": "x", "image": "x"}, {"$patch": "replace"}]}},
        ["x"],
    ),
]


@pytest.mark.parametrize(("case", "patch", "names"), STRATEGIC_CASES)
def test_strategic_merge_lists(case: str, patch: Any, names: list[str]) -> None:
    result = strategic_merge_patch(POD_SPEC, patch)
    assert [c["name"] for c in result["spec"]["containers"]] == names, case


def test_strategic_merge_env_and_ports_keys() -> None:
    base = {"env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80, "name": "http"}]}
    patch = {
        "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
        "ports": [{"containerPort": 443}],
    }
    result = strategic_merge_patch(base, patch)
    assert result["env"] == [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]
    assert [p["containerPort"] for p in result["ports"]] == [80, 443]


def test_merge_patch_replaces_lists_and_null_deletes() -> None:
    result = merge_patch(POD_SPEC, {"spec": {"containers": [{"name": "side"}], "nodeName": None}})
    assert result == {"spec": {"containers": [{"name": "side"}]}}
    assert POD_SPEC["spec"]["containers"][0]["name"] == "main"  # input untouched


JSON_PATCH_CASES = [
    ([{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3], "b": {"c": 1}}),
    ([{"op": "replace", "path": "/b/c", "value": 2}], {"a": [1, 2], "b": {"c": 2}}),
    ([{"op": "remove", "path": "/a/0"}], {"a": [2], "b": {"c": 1}}),
    ([{"op": "move", "from": "/b/c", "path": "/d"}], {"a": [1, 2], "b": {}, "d": 1}),
    ([{"op": "copy", "from": "/b", "path": "/e"}], {"a": [1, 2], "b": {"c": 1}, "e": {"c": 1}}),
    ([{"op": "test", "path": "/b/c", "value": 1}], {"a": [1, 2], "b": {"c": 1}}),
    ([{"op": "add", "path": "/x~1y", "value": 1}], {"a": [1, 2], "b": {"c": 1}, "x/y": 1}),
]


@pytest.mark.parametrize(("ops", "expected"), JSON_PATCH_CASES)
def test_json_patch(ops: list[dict[str, Any]], expected: Any) -> None:
    assert json_patch({"a": [1, 2], "b": {"c": 1}}, ops) == expected


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        ([{"op": "test", "path": "/b/c", "value": 9}], "test operation 0 failed"),
        ([{"op": "remove", "path": "/zz"}], "does not exist"),
        ([{"op": "replace", "path": "/a/7", "value": 1}], "out of range"),
        ([{"op": "frobnicate", "path": "/a"}], "unknown operation"),
        ({"op": "add"}, "must be a list"),
    ],
)
def test_json_patch_errors(ops: Any, reason: str) -> None:
    with pytest.raises(PatchError, match=reason):
        json_patch({"a": [1, 2], "b": {"c": 1}}, ops)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=4), json_values, max_size=4)


@given(objects, objects)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


@given(objects)
def test_merge_patch_with_itself_is_a_no_op_without_nulls(target: dict[str, Any]) -> None:
    def no_nulls(v: Any) -> bool:
        if isinstance(v, dict):
            return all(x is not None and no_nulls(x) for x in v.values())
        return True

    if no_nulls(target):
        assert merge_patch(target, target) == target


# --- outcomes, quantities, fit ----------------------------------------------------------------

OUTCOME_CASES = [
    ("succeed", [Outcome("succeed")]),
    ("succeed after=30s", [Outcome("succeed", after=30)]),
    ("exit code=3 after=2m", [Outcome("exit", after=120, code=3)]),
    ("exit code=0", [Outcome("succeed", code=0)]),
    ("oomkilled start=500ms", [Outcome("oomkilled", start=0.5)]),
    ("fail; succeed", [Outcome("fail", code=1), Outcome("succeed")]),
    (
        'unschedulable message="0/3 nodes are available"',
        [Outcome("unschedulable", message="0/3 nodes are available")],
    ),
    (
        "crashloop code=2 after=1 container=main",
        [Outcome("crashloop", after=1, code=2, container="main")],
    ),
    ('succeed log="epoch 1" log="epoch 2"', [Outcome("succeed", logs=("epoch 1", "epoch 2"))]),
]


@pytest.mark.parametrize(("text", "expected"), OUTCOME_CASES)
def test_outcome_grammar(text: str, expected: list[Outcome]) -> None:
    assert list(parse_outcome(text)) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("explode", "unknown kind 'explode'"),
        ("exit code=300", "exit code must be 0..255"),
        ("succeed after=soon", "is not a duration"),
        ("succeed colour=red", "unknown key 'colour'"),
        ("succeed after", "expected KEY=VALUE"),
        ("succeed;;fail", "empty"),
        ('fail message="unterminated', "No closing quotation"),
    ],
)
def test_outcome_errors_are_precise(text: str, reason: str) -> None:
    with pytest.raises(OutcomeError, match=reason):
        parse_outcome(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("1Ki", "1024"),
        ("16Gi", str(16 * 2**30)),
        ("1.5", "1.5"),
        ("3M", "3000000"),
    ],
)
def test_quantities(text: str, value: str) -> None:
    from decimal import Decimal

    assert quantity(text) == Decimal(value)


NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def test_fit_reports_the_scheduler_message() -> None:
    """kube-scheduler v1.37.2's FitError, with DefaultPreemption's PostFilter message after it
    (`framework/types.go` FitError.Error, `preemption/preemption.go`): a node where the pod
    can never fit (more than its allocatable, or its selector) is one where preemption is not
    helpful; elsewhere no pod of lower priority can be preempted (the sandbox has no priority
    classes), which is what the real tier answers."""
    nodes = [Node(f"n{i}", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "0"}) for i in range(3)]
    spec = {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    assert fit(nodes, {}, spec) == (
        None,
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are"
        f" available: 3 {NOT_HELPFUL}.",
    )
    spec_sel = {"nodeSelector": {"pool": "a"}, "containers": [{"name": "m"}]}
    node, message = fit(nodes, {}, spec_sel)
    assert node is None
    assert message == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
        f" preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."
    )
    cpu = {"containers": [{"name": "m", "resources": {"requests": {"cpu": "6"}}}]}
    assert fit(nodes, {}, cpu)[0] == "n0"
    # Full but able to hold it once others leave: preemption might help, no victim is found.
    used = {f"n{i}": {"cpu": Decimal(4)} for i in range(3)}
    assert fit(nodes, used, cpu) == (
        None,
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available:"
        f" 3 {NO_VICTIMS}.",
    )
    used["n0"] = {"cpu": Decimal(0)}
    big = {"containers": [{"name": "m", "resources": {"requests": {"cpu": "9", "memory": "1Gi"}}}]}
    assert fit(nodes, used, big)[1] == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available:"
        f" 3 {NOT_HELPFUL}."
    )
    mixed = [*nodes[:2], Node("n2", {"cpu": "8", "memory": "32Gi"}, {"pool": "b"})]
    pooled = {"nodeSelector": {"pool": "b"}, **cpu}
    assert fit(mixed, {"n2": {"cpu": Decimal(4)}}, pooled)[1] == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node"
        f" affinity/selector. preemption: 0/3 nodes are available: 1 {NO_VICTIMS}, 2"
        f" {NOT_HELPFUL}."
    )


label_keys = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
label_values = st.from_regex(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?", fullmatch=True)


@given(
    st.dictionaries(label_keys, label_values, max_size=5),
    st.dictionaries(label_keys, label_values, max_size=5),
)
def test_equality_selectors_match_exactly_the_supersets(
    wanted: dict[str, str], labels: dict[str, str]
) -> None:
    selector = parse_label_selector(",".join(f"{k}={v}" for k, v in wanted.items()))
    expected = all(labels.get(k) == v for k, v in wanted.items())
    assert selector.matches(labels) is expected
    assert selector.matches({**labels, **wanted})
