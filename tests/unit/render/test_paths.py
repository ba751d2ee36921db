"""Path globs: parsing, matching (with prefixes) and locating values, as tables."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.render.paths import (
    AnyItem,
    AnyKey,
    Deep,
    Item,
    PathSyntaxError,
    PrefixMatcher,
    find,
    format_path,
    glob_matches_prefix,
    parse_glob,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spec.template", ("spec", "template")),
        ("**.containers[*].resources", (Deep(), "containers", AnyItem(), "resources")),
        (
            "spec.pytorchReplicaSpecs.*.replicas",
            ("spec", "pytorchReplicaSpecs", AnyKey(), "replicas"),
        ),
        ("containers[main].env", ("containers", Item("main"), "env")),
        ('metadata.labels["example.com/team"]', ("metadata", "labels", "example.com/team")),
        ("overrides.args", ("overrides", "args")),
    ],
)
def test_parse_glob(text: str, expected: tuple[object, ...]) -> None:
    assert parse_glob(text) == expected


@pytest.mark.parametrize("text", ["", "spec.", ".spec", "spec..x", "a[]", 'a"b'])
def test_parse_glob_rejects(text: str) -> None:
    with pytest.raises(PathSyntaxError):
        parse_glob(text)


C = Item("main")


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        (
            "**.containers[*].resources",
            ("spec", "template", "spec", "containers", C, "resources", "limits", "cpu"),
            True,
        ),
        (
            "**.containers[*].resources",
            ("spec", "template", "spec", "containers", C, "image"),
            False,
        ),
        (
            "**.containers[*].resources",
            ("spec", "template", "spec", "initContainers", C, "resources"),
            False,
        ),
        (
            "**.containers[main].env",
            ("spec", "containers", Item("main"), "env", Item("X"), "value"),
            True,
        ),
        ("**.containers[main].env", ("spec", "containers", Item("side"), "env"), False),
        (
            "spec.pytorchReplicaSpecs.Worker.replicas",
            ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
            True,
        ),
        (
            "spec.pytorchReplicaSpecs.Worker.replicas",
            ("spec", "pytorchReplicaSpecs", "Master", "replicas"),
            False,
        ),
        (
            "spec.pytorchReplicaSpecs.*.replicas",
            ("spec", "pytorchReplicaSpecs", "Master", "replicas"),
            True,
        ),
        ("spec.*", ("spec", Item("0")), False),  # * is a key, not an item
        ("**", ("anything", Item("0"), "at", "all"), True),
        ("spec.**", ("spec",), True),
        ("metadata.labels", ("metadata",), False),  # a glob longer than the path
        ("spec", (), False),
    ],
)
def test_glob_matches_prefix(glob: str, path: tuple[object, ...], matches: bool) -> None:
    assert glob_matches_prefix(parse_glob(glob), path) is matches


def test_find_uses_names_and_indexes() -> None:
    obj = {
        "spec": {"tasks": [{"name": "a", "t": 1}, {"t": 2}], "m": {"x": {"t": 3}, "y": {"t": 4}}}
    }
    assert [(format_path(p), v) for p, v in find(obj, parse_glob("spec.tasks[*].t"))] == [
        ("spec.tasks[a].t", 1),
        ("spec.tasks[1].t", 2),
    ]
    assert [v for _p, v in find(obj, parse_glob("spec.m.*.t"))] == [3, 4]
    assert list(find(obj, parse_glob("spec.missing[*]"))) == []


def test_format_path_quotes_keys_with_dots() -> None:
    assert format_path(("metadata", "labels", "kueue.x-k8s.io/queue-name")) == (
        'metadata.labels["kueue.x-k8s.io/queue-name"]'
    )
    assert format_path(("containers", Item("main")), "spec") == "spec.containers[main]"


def _reference_match(glob: tuple[Any, ...], path: tuple[Any, ...]) -> bool:
    """The matching rule read literally (the former recursive implementation)."""

    def match(gi: int, pi: int) -> bool:
        if gi == len(glob):
            return True
        if pi == len(path):
            return all(isinstance(g, Deep) for g in glob[gi:])
        g = glob[gi]
        if isinstance(g, Deep):
            return match(gi + 1, pi) or match(gi, pi + 1)
        if isinstance(g, AnyKey):
            ok = isinstance(path[pi], str)
        elif isinstance(g, AnyItem):
            ok = isinstance(path[pi], Item)
        else:
            ok = g == path[pi]
        return ok and match(gi + 1, pi + 1)

    return match(0, 0) if path else False


_glob_segs = st.sampled_from([Deep(), AnyKey(), AnyItem(), "a", "b", Item("x"), Item("0")])
_path_segs = st.sampled_from(["a", "b", "c", Item("x"), Item("0"), Item("y")])


@settings(max_examples=400, deadline=None)
@given(
    globs=st.lists(st.lists(_glob_segs, min_size=1, max_size=5).map(tuple), max_size=3),
    paths=st.lists(st.lists(_path_segs, max_size=6).map(tuple), max_size=8),
)
def test_glob_matching_agrees_with_the_rule(
    globs: list[tuple[Any, ...]], paths: list[tuple[Any, ...]]
) -> None:
    matcher = PrefixMatcher(globs)
    for path in paths:
        want = any(_reference_match(g, path) for g in globs)
        assert any(glob_matches_prefix(g, path) for g in globs) == want, path
        assert matcher.allows(path) == want, path
