"""The pure translation for `quota.mode: agent`: pod templates → requests, queues → leaves,
the tree the agent's engine runs, and the stamp a suspended workload carries."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.quota import AdmissionEngine, PodSet, RunState, parse_tree, validate_tree
from launch_agent.quota.requests import (
    QuotaStamp,
    RequestError,
    agent_tree,
    leaf_names,
    pod_requests,
    priority_of,
    resolve_leaf,
    run_pod_sets,
    total_request,
)
from launch_agent.render.pipeline import pod_sets

G = 10**9  # one unit in nanounits
Gi = 1024**3 * G


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any) -> Any:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init is not None:
        body["initContainers"] = init
    return {"spec": body}


def c(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **kw: Any
) -> Any:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "x", "resources": resources, **kw}


POD_TABLE = [
    ("no resources", pod({"name": "main"}), {}),
    ("one container", pod(c({"cpu": "500m", "memory": "1Gi"})), {"cpu": G // 2, "memory": Gi}),
    ("containers add up", pod(c({"cpu": 1}), c({"cpu": "1.5"})), {"cpu": 5 * G // 2}),
    (
        "GPUs counted",
        pod(c({"cpu": 2}, {"nvidia.com/gpu": 4})),
        {"cpu": 2 * G, "nvidia.com/gpu": 4 * G},
    ),
    ("limits stand in for requests", pod(c(None, {"cpu": 3})), {"cpu": 3 * G}),
    ("requests win over limits", pod(c({"cpu": 1}, {"cpu": 3})), {"cpu": G}),
    (
        "a larger init container sets the peak",
        pod(c({"cpu": 1}), init=[c({"cpu": 4})]),
        {"cpu": 4 * G},
    ),
    (
        "a smaller init container changes nothing",
        pod(c({"cpu": 2}), init=[c({"cpu": 1})]),
        {"cpu": 2 * G},
    ),
    (
        "a sidecar runs beside the containers",
        pod(c({"cpu": 1}), init=[c({"cpu": 1}, restartPolicy="Always")]),
        {"cpu": 2 * G},
    ),
    (
        "an init container after a sidecar runs next to it",
        pod(c({"cpu": 1}), init=[c({"cpu": 1}, restartPolicy="Always"), c({"cpu": 3})]),
        {"cpu": 4 * G},
    ),
    ("overhead is added", pod(c({"cpu": 1}), overhead={"cpu": "250m"}), {"cpu": 5 * G // 4}),
    ("zero requests are dropped", pod(c({"cpu": 0, "memory": "1Mi"})), {"memory": 1024**2 * G}),
]


@pytest.mark.parametrize(("name", "template", "expected"), POD_TABLE, ids=[t[0] for t in POD_TABLE])
def test_pod_requests(name: str, template: Any, expected: dict[str, int]) -> None:
    assert pod_requests(template) == expected


BAD_PODS = [
    (
        pod(c({"cpu": "2 cores"})),
        "template.spec.containers[0].resources.requests.cpu",
        "unknown unit",
    ),
    (pod(c({"cpu": "-1"})), "template.spec.containers[0].resources.requests.cpu", "negative"),
    (
        pod(c(), init=[{"resources": {"limits": "4"}}]),
        "template.spec.initContainers[0].resources.limits",
        "mapping",
    ),
    (
        {"spec": {"containers": [{"resources": []}]}},
        "template.spec.containers[0].resources",
        "mapping",
    ),
]


@pytest.mark.parametrize(("template", "path", "reason"), BAD_PODS)
def test_bad_requests_name_the_path(template: Any, path: str, reason: str) -> None:
    with pytest.raises(RequestError) as caught:
        pod_requests(template)
    assert caught.value.path == path
    assert reason in caught.value.reason


def pytorchjob(master: int, workers: int, cpu: str) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": pod(c({"cpu": cpu}, {"nvidia.com/gpu": 1}))}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(master), "Worker": replica(workers)}},
    }


def test_a_gang_is_summed_over_its_pod_sets() -> None:
    sets = run_pod_sets(pod_sets(pytorchjob(1, 3, "5")))
    assert sets == (
        PodSet(1, {"cpu": 5 * G, "nvidia.com/gpu": G}),
        PodSet(3, {"cpu": 5 * G, "nvidia.com/gpu": G}),
    )
    assert total_request(sets) == {"cpu": 20 * G, "nvidia.com/gpu": 4 * G}


def test_empty_pod_sets_are_dropped_and_negative_counts_refused() -> None:
    assert run_pod_sets([(0, pod(c({"cpu": 1}))), (2, pod({"name": "main"}))]) == ()
    with pytest.raises(RequestError, match=r"podSets\[0\]: replica count -1 is negative"):
        run_pod_sets([(-1, pod(c({"cpu": 1})))])


@pytest.mark.parametrize(
    ("run_spec", "priority"),
    [
        ({}, 0),
        ({"priority": 0}, 4),
        ({"priority": 2}, 2),
        ({"priority": 4}, 0),
        ({"priority": 9}, 0),
        ({"priority": "1"}, 0),
        ({"priority": True}, 0),
    ],
)
def test_priority_of(run_spec: dict[str, Any], priority: int) -> None:
    assert priority_of(run_spec) == priority


TREE: dict[str, Any] = {
    "root": {
        "name": "root",
        "min": {"cpu": 4},
        "max": {"cpu": 4},
        "children": [
            {"name": "a", "min": {"cpu": 2}, "children": [{"name": "a.1", "queues": ["listed"]}]},
            {"name": "b.1", "min": {"cpu": 2}},
        ],
    }
}
LEAVES = leaf_names(TREE)

LEAF_TABLE = [
    ("spec names a leaf", "q", "b.1", "b.1", ""),
    ("tree lists the queue", "listed", None, "a.1", ""),
    ("both agree", "listed", "a.1", "a.1", ""),
    ("both disagree", "listed", "b.1", None, "quota.tree lists queue 'listed' under leaf 'a.1'"),
    ("unknown leaf", "q", "zz", None, "'zz' is not a leaf of quota.tree (leaves: a.1, b.1)"),
    ("inner node is no leaf", "q", "a", None, "'a' is not a leaf of quota.tree"),
    ("no leaf at all", "q", None, None, "queue 'q' is tied to no quota leaf: set spec.quota.leaf"),
]


@pytest.mark.parametrize(
    ("name", "queue", "spec_leaf", "leaf", "why"), LEAF_TABLE, ids=[t[0] for t in LEAF_TABLE]
)
def test_resolve_leaf(
    name: str, queue: str, spec_leaf: str | None, leaf: str | None, why: str
) -> None:
    found, reason = resolve_leaf(queue, spec_leaf, LEAVES)
    assert found == leaf
    assert why in reason if why else reason == ""


def test_agent_tree_serves_each_leaf_and_takes_max_jobs_as_runs() -> None:
    assert LEAVES == {"a.1": ["listed"], "b.1": []}
    tree = agent_tree(TREE, max_jobs=3)
    assert validate_tree(tree) == []
    parsed = parse_tree(tree)
    assert {q: n.name for q, n in parsed.leaf_of_queue().items()} == {
        "listed": "a.1",
        "@a.1": "a.1",
        "@b.1": "b.1",
    }
    assert tree["root"]["max"] == {"cpu": 4, "runs": 3}
    assert TREE["root"]["max"] == {"cpu": 4}, "the admin's mapping is not changed"
    assert "runs" not in agent_tree(TREE, max_jobs=-1)["root"]["max"]
    named = {"root": {**TREE["root"], "max": {"cpu": 4, "runs": 9}}}
    assert agent_tree(named, max_jobs=3)["root"]["max"]["runs"] == 9, "the tree's runs wins"


def test_max_jobs_caps_running_runs_through_the_tree() -> None:
    engine = AdmissionEngine(parse_tree(agent_tree(TREE, max_jobs=1)))
    stamp = QuotaStamp("b.1", 0, Fraction(0), (PodSet(1, {"cpu": G}),))
    for rid in ("r1", "r2"):
        engine.submit(stamp.spec(rid))
    engine.cycle()
    assert [engine.runs[r].state for r in ("r1", "r2")] == [RunState.ADMITTED, RunState.PENDING]
    assert engine.explain("r2") == "waiting for quota: root uses 1/1 runs"


requests_st = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, 10**15), max_size=3
)
stamps = st.builds(
    QuotaStamp,
    st.text(min_size=1, max_size=8),
    st.integers(-10, 10),
    st.fractions(min_value=0, max_value=10**10),
    st.lists(st.builds(PodSet, st.integers(0, 100), requests_st), max_size=4).map(tuple),
    st.booleans(),
)


@given(stamps)
def test_stamp_round_trips(stamp: QuotaStamp) -> None:
    assert QuotaStamp.load(stamp.dump()) == stamp


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "annotation launch-agent.io/quota is missing"),
        ("{", "is not JSON"),
        ("[]", "is not an object"),
        ('{"leaf": "", "priority": 0}', "leaf must be a non-empty string"),
        ('{"leaf": "a", "priority": "high"}', "priority must be an integer"),
        ('{"leaf": "a", "priority": 0, "enqueued": 5}', "enqueued must be a string of seconds"),
        ('{"leaf": "a", "priority": 0, "enqueued": "soon"}', "'soon' is not a number of seconds"),
        ('{"leaf": "a", "priority": 0, "enqueued": "1", "podSets": {}}', "podSets must be a list"),
        (
            '{"leaf": "a", "priority": 0, "enqueued": "1", "podSets": [{"count": -1}]}',
            "podSets[0] needs a count >= 0",
        ),
        (
            '{"leaf": "a", "priority": 0, "enqueued": "1",'
            ' "podSets": [{"count": 1, "requests": {"cpu": 1.5}}]}',
            "podSets[0].requests: nanounits must be integers",
        ),
    ],
)
def test_bad_stamps_say_what_is_wrong(text: str | None, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        QuotaStamp.load(text)
