"""`migrate` writes its spec as data: no value of the W&B config, comments included, can add a
key, and the written text reads back as exactly the spec it was built from (issue 23)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.model.queue_spec import InvalidInput, SecurityExceptions
from launch_agent.model.safe_load import load_yaml
from launch_agent.render.migrate import (
    DEFAULT_OVERRIDES,
    UnsafeOutput,
    check_written,
    colliding,
    literal_path,
    migrate,
    spec_name,
)
from launch_agent.render.spec_load import load_queue_spec
from tests.migrate_configs import ISSUE_NAME, config_with, variables_with
from tests.terminal import hostile_text


def grants_nothing(text: str, document: dict[str, Any]) -> None:
    """The written text is the document, has no `security` key, only ASCII comments, and
    whatever the loader makes of it grants no exception and no pattern."""
    parsed = load_yaml(text)
    assert parsed == document
    assert "security" not in parsed["spec"]
    for line in text.splitlines():
        body = line.lstrip()
        if body.startswith("#"):
            assert re.fullmatch(r"[ -~]*", line), line
    try:
        spec, _warnings = load_queue_spec(text)
    except InvalidInput:
        return  # refused until the admin decides: nothing granted
    assert spec.security == SecurityExceptions()
    assert not spec.custom_schedulers
    for glob in spec.overridable:
        assert glob in DEFAULT_OVERRIDES or literal_path(glob) is not None


def test_the_issues_volume_name_grants_nothing() -> None:
    pod = {
        "containers": [{"name": "main", "image": "x", "securityContext": {"privileged": True}}],
        "volumes": [{"name": ISSUE_NAME, "hostPath": {"path": "/"}}],
    }
    m = migrate("q", {"spec": {"template": {"spec": pod}}})
    text = m.text("W&B")
    grants_nothing(text, m.document)
    assert not re.search(r"^\s*security:", text, re.MULTILINE)
    with pytest.raises(InvalidInput) as refused:
        load_queue_spec(text)
    paths = [p.path for p in refused.value.problems]
    assert any(p.endswith("securityContext.privileged") for p in paths)
    assert any(p.endswith("hostPath") for p in paths)
    # The review comment still says which volume, escaped on its one line.
    assert "#     # spec.template.spec.template.spec.volumes[data\\n  security:\\n" in text


@pytest.mark.parametrize(
    "place",
    [
        "volume",
        "container",
        "host_path",
        "secret",
        "secret_volume",
        "pull_secret",
        "service_account",
        "capability",
        "namespace",
    ],
)
@pytest.mark.parametrize(
    "breaker", ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\n---\n", "\n...\n"]
)
def test_no_line_break_in_any_copied_value_adds_a_key(place: str, breaker: str) -> None:
    name = f"x{breaker}  security:{breaker}    privileged: true{breaker}#"
    m = migrate("q", config_with("ok", **{place: name}), variables_with("ok"))
    grants_nothing(m.text("W&B"), m.document)


def test_an_unused_variable_name_and_the_queue_name_add_no_key() -> None:
    m = migrate(
        f"gpu{ISSUE_NAME}", config_with("ok"), variables_with(ISSUE_NAME, used_default=ISSUE_NAME)
    )
    text = m.text(f"file{ISSUE_NAME}")
    grants_nothing(text, m.document)
    assert any("not used by the config" in d and ISSUE_NAME in d for d in m.decisions)


@settings(max_examples=150, deadline=None)
@given(
    names=st.fixed_dictionaries(
        {
            k: hostile_text(min_size=1)
            for k in (
                "volume",
                "container",
                "host_path",
                "secret",
                "secret_volume",
                "pull_secret",
                "service_account",
                "capability",
                "namespace",
            )
        }
    ),
    queue=hostile_text(min_size=1),
    unused=hostile_text(),
    default=hostile_text(),
    source=hostile_text(),
)
def test_hostile_names_in_every_copied_value_grant_nothing(
    names: dict[str, str], queue: str, unused: str, default: str, source: str
) -> None:
    m = migrate(queue, config_with(**names), variables_with(unused, used_default=default))
    grants_nothing(m.text(source), m.document)


@settings(max_examples=100, deadline=None)
@given(key=hostile_text(min_size=1), label=hostile_text(min_size=1))
def test_a_variable_under_any_key_or_item_name_is_overridable_only_there(
    key: str, label: str
) -> None:
    # `containers[*]` from a container named `*` would grant every container; a key `**`
    # every path below it. The path written names the one place, or none at all.
    config = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": label, "image": "x", "env": {key: "{{v}}"}}]}
            }
        }
    }
    m = migrate("q", config, {"v": {"default": "1"}})
    text = m.text("W&B")
    grants_nothing(text, m.document)
    written = [g for g in m.document["spec"]["overridable"] if g not in DEFAULT_OVERRIDES]
    for glob in written:
        place = literal_path(glob)
        assert place is not None and place[-1] == key


def test_an_item_named_star_is_a_decision_not_a_pattern() -> None:
    config = {"spec": {"template": {"spec": {"containers": [{"name": "*", "image": "{{img}}"}]}}}}
    m = migrate("q", config, {"img": {"default": "x"}})
    assert list(m.document["spec"]["overridable"]) == list(DEFAULT_OVERRIDES)
    assert any("no overridable path names" in d for d in m.decisions)


@pytest.mark.parametrize(
    "tampered",
    [
        "  security:\n    privileged: true\n",
        "  sweeps:\n    customSchedulers: true\n",
        "  overridable2: []\n",
    ],
)
def test_a_text_that_reads_back_otherwise_is_refused(tampered: str) -> None:
    m = migrate("q", config_with("ok"))
    text = m.text("W&B")
    with pytest.raises(UnsafeOutput):
        check_written(text + tampered, m.document)


def test_a_pattern_in_overridable_is_refused() -> None:
    m = migrate("q", config_with("ok"))
    document = m.document
    document["spec"]["overridable"].append("spec.**")
    with pytest.raises(UnsafeOutput, match="pattern"):
        check_written(m.text("W&B"), document)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("gpu", "GPU"),
        ("gpu queue", "gpu-queue"),
        ("gpu_queue", "GPU.Queue"),
        ("\u212a8s", "k8s"),  # KELVIN SIGN lower-cases to an ASCII k
        ("ｇｐｕ", "ＧＰＵ"),  # fullwidth letters: both sanitize to the same name
        ("a" * 40 + "-x", "a" * 40 + "-y"),  # alike in the 40 characters a name keeps
    ],
)
def test_queues_that_share_a_file_collide(a: str, b: str) -> None:
    assert spec_name(a) == spec_name(b)
    assert colliding([a, "other", b]) == [[a, b]]


@settings(max_examples=200, deadline=None)
@given(queues=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6))
def test_every_pair_sharing_a_file_is_named(queues: list[str]) -> None:
    groups = colliding(queues)
    named = {q for group in groups for q in group}
    distinct = list(dict.fromkeys(queues))
    for i, a in enumerate(distinct):
        for b in distinct[i + 1 :]:
            if spec_name(a) == spec_name(b):
                assert a in named and b in named
    assert all(len({spec_name(q) for q in group}) == 1 for group in groups)
