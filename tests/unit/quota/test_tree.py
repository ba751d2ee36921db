"""R1: tree validation. Every problem is reported with its path and a reason; an invalid tree
is rejected as a whole."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from launch_agent.model.config import AgentConfig
from launch_agent.quota import TreeError, parse_tree, validate_tree
from tests.unit.quota.helpers import ack_tree


def edit(change: Any) -> dict[str, Any]:
    tree = copy.deepcopy(ack_tree())
    change(tree)
    return tree


def a(tree: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = tree["root"]["children"][0]
    return node


def a1(tree: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = a(tree)["children"][0]
    return node


@pytest.mark.parametrize(
    ("change", "path", "reason"),
    [
        (
            lambda t: a1(t)["min"].update(cpu=30),
            "root.children[0].children[0].min.cpu",
            "min 30 is greater than max 20 on node 'a.1'",
        ),
        (
            lambda t: a1(t)["min"].update(cpu=15),
            "root.children[0].min.cpu",
            "the children of 'root.a' guarantee 25 cpu in total, more than its own min 20",
        ),
        (
            lambda t: a(t)["min"].update(cpu=25),
            "root.min.cpu",
            "the children of 'root' guarantee 45 cpu in total",
        ),
        (
            lambda t: t["root"]["min"].update(cpu=30),
            "root.min.cpu",
            "the root's min must equal its max (the cluster's capacity): min 30 != max 40",
        ),
        (
            lambda t: a1(t)["min"].update(runs=3),
            "root.children[0].children[0].min.runs",
            "runs is a count resource and has no min (R12)",
        ),
        (
            lambda t: a1(t)["max"].update(runs="1.5"),
            "root.children[0].children[0].max.runs",
            "must be a whole number",
        ),
        (
            lambda t: a1(t)["max"].update(memory="1Gi"),
            "root.children[0].children[0].max.memory",
            "resource 'memory' is not declared in the root's max",
        ),
        (
            lambda t: a1(t)["min"].update(cpu="ten"),
            "root.children[0].children[0].min.cpu",
            "is not a Kubernetes quantity",
        ),
        (
            lambda t: a1(t)["min"].update(cpu="10Q"),
            "root.children[0].children[0].min.cpu",
            "unknown unit 'Q'",
        ),
        (
            lambda t: a1(t)["min"].update(cpu=-1),
            "root.children[0].children[0].min.cpu",
            "must not be negative",
        ),
        (
            lambda t: a1(t).update(mins={"cpu": 1}),
            "root.children[0].children[0].mins",
            "unknown key",
        ),
        (
            lambda t: a(t)["children"][1].update(queues=["q1"]),
            "root.children[0].children[1].queues[0]",
            "queue 'q1' is already mapped to a leaf at root.children[0].children[0]",
        ),
        (
            lambda t: a(t).update(queues=["qx"]),
            "root.children[0].queues",
            "only leaves hold queues",
        ),
        (
            lambda t: a(t)["children"][1].update(name="a.1"),
            "root.children[0].children[1].name",
            "duplicate node name 'a.1'",
        ),
        (lambda t: a1(t).update(name=""), "root.children[0].children[0].name", "non-empty name"),
        (
            lambda t: a1(t).update(weight=0),
            "root.children[0].children[0].weight",
            "must be greater than 0",
        ),
        (
            lambda t: a1(t).update(withinQueue="Always"),
            "root.children[0].children[0].withinQueue",
            "must be one of Never, LowerPriority",
        ),
        (
            lambda t: a1(t).update(strictAfter="soon"),
            "root.children[0].children[0].strictAfter",
            "expected a duration",
        ),
        (
            lambda t: a(t).update(strictAfter="5m"),
            "root.children[0].strictAfter",
            "is a leaf setting",
        ),
        (
            lambda t: t.update(reclaimPolicy="Never"),
            "reclaimPolicy",
            "must be one of Any, LowerPriority",
        ),
        (
            lambda t: t.update(instantTermination="yes"),
            "instantTermination",
            "must be true or false",
        ),
        (lambda t: t.update(backoffLimit=-1), "backoffLimit", "must be a whole number >= 0"),
        (lambda t: t.update(readyTimeout="-5m"), "readyTimeout", "expected a duration"),
        (lambda t: t.update(extra=1), "extra", "unknown key"),
        (lambda t: t.pop("root"), "root", "missing"),
        (lambda t: a(t).update(children="a.1"), "root.children[0].children", "must be a list"),
    ],
)
def test_invalid_trees_name_the_node_and_resource(change: Any, path: str, reason: str) -> None:
    problems = validate_tree(edit(change))
    assert any(p.path == path and reason in p.reason for p in problems), problems
    with pytest.raises(TreeError) as error:
        parse_tree(edit(change))
    assert any(p.path == path for p in error.value.problems)


def test_every_problem_is_reported_not_only_the_first() -> None:
    def breaks(tree: dict[str, Any]) -> None:
        a1(tree)["min"]["cpu"] = 30  # min > max
        t2 = tree["root"]["children"][1]["children"][1]
        t2["queues"] = ["q1"]  # q1 is already a.1's
        tree["reclaimPolicy"] = "Sometimes"

    paths = {p.path for p in validate_tree(edit(breaks))}
    assert {
        "root.children[0].children[0].min.cpu",
        "root.children[1].children[1].queues[0]",
        "reclaimPolicy",
    } <= paths


@pytest.mark.parametrize(
    "data", [None, [], "root", {"root": "leaf"}, {"root": {"name": "r", "min": 5}}]
)
def test_malformed_documents_are_problems_not_crashes(data: Any) -> None:
    assert validate_tree(data)


def test_valid_tree_parses_to_nanounits_and_defaults() -> None:
    tree = parse_tree(ack_tree(readyTimeout="10m", backoffBase="30s", preemptionTimeout="1h30m"))
    assert tree.root.max == {"cpu": 40 * 10**9}
    assert tree.reclaim_policy == "Any"
    assert tree.instant_termination is True
    assert tree.ready_timeout == 600
    assert tree.backoff_base == 30
    assert tree.preemption_timeout == 5400
    assert tree.resources == ("cpu",)
    leaf = next(n for n in tree.nodes() if n.name == "a.1")
    assert leaf.within_queue == "Never"
    assert leaf.strict_after == 1800
    assert tree.leaf_of_queue()["q3"].name == "b.1"


def test_child_max_may_exceed_parent_max_and_weights_are_rational() -> None:
    # koordinator: an admin shrinks a subtree by lowering one parent's max.
    tree = parse_tree(edit(lambda t: (a1(t)["max"].update(cpu=60), a1(t).update(weight="0.75"))))
    leaf = next(n for n in tree.nodes() if n.name == "a.1")
    assert leaf.max["cpu"] == 60 * 10**9
    assert leaf.weight == Fraction(3, 4)


def test_count_resources_need_no_root_declaration() -> None:
    tree = parse_tree(edit(lambda t: a1(t)["max"].update(runs=4)))
    assert tree.resources == ("cpu", "runs")


def test_the_agent_configuration_tree_is_validated_with_the_same_rules() -> None:
    config = AgentConfig.model_validate(
        {"quota": {"mode": "agent", "tree": edit(lambda t: a1(t)["min"].update(cpu=30))}}
    )
    problems = validate_tree(config.quota.tree)
    assert {p.path for p in problems} == {
        "root.children[0].children[0].min.cpu",  # min 30 > max 20 on a.1
        "root.children[0].min.cpu",  # and a's children now guarantee more than a's min
    }
    assert (
        validate_tree(
            AgentConfig.model_validate({"quota": {"mode": "agent", "tree": ack_tree()}}).quota.tree
        )
        == []
    )
