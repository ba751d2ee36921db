"""`launch-agent status`'s renderer: any JSON in, a `BadStatus` naming a key or a bounded table
with no control character out; the status page (HTML) from hostile values likewise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from launch_agent.commands.status_view import BadStatus, check, table
from launch_agent.runtime.status import page
from tests.status_documents import MAX_OUTPUT, near_documents, snapshot
from tests.terminal import hostile_text, unsafe_characters


def test_a_real_document_with_hostile_text_prints_escaped_everywhere() -> None:
    # The header lines (agent, W&B, builder) used to skip the filter the rows get.
    evil = "a\x1b]52;c;aGFja2Vk\x07b\u202ec\nAGENT forged\x9b2J"
    out = table(check(snapshot(evil)))
    assert unsafe_characters(out, allowed="\n") == []
    assert "\\x1b]52;c;aGFja2Vk\\x07" in out and "\\u202e" in out
    assert not any(line.startswith("AGENT forged") for line in out.splitlines())
    assert out.count("\nAGENT ") == 0 and out.startswith("AGENT a\\x1b")


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d["agent"].pop("uptime_seconds"), "agent.uptime_seconds: missing"),
        (lambda d: d["agent"].update(uptime_seconds="12"), "agent.uptime_seconds: expected a"),
        (lambda d: d["runs"]["items"][0].update(age_seconds=None), "runs.items[0].age_seconds"),
        (lambda d: d.update(queues={}), "queues: expected a list"),
        (lambda d: d["quota"]["nodes"][1].update(depth=10**9), "quota.nodes[1].depth"),
        (lambda d: d["quota"]["nodes"][1].update(depth=True), "quota.nodes[1].depth"),
        (lambda d: d["quota"]["nodes"][0]["resources"][0].update(used=10**400), "used"),
        (lambda d: d["builds"]["recent"].update(built=-1), "builds.recent.built"),
        (lambda d: d.update(failures=[7]), "failures[0]: expected a mapping"),
        (lambda d: d["agent"].update(problems="down"), "agent.problems: expected a list"),
        (lambda d: d["runs"]["items"][0].update(worker=7), "runs.items[0].worker"),
        (lambda d: d["runs"]["items"][0].update(placements="w1"), "runs.items[0].placements"),
    ],
)
def test_a_wrong_document_names_the_key(change: Any, path: str) -> None:
    doc = snapshot()
    change(doc)
    with pytest.raises(BadStatus) as exc:
        check(doc)
    assert path in str(exc.value) and "\n" not in str(exc.value)


@settings(max_examples=300, deadline=None)
@given(doc=near_documents())
def test_any_answer_is_refused_with_its_key_or_printed_bounded(doc: Any) -> None:
    try:
        checked = check(doc)
    except BadStatus as exc:
        refusal = str(exc)
    else:
        out = table(checked)
        assert unsafe_characters(out, allowed="\n") == []
        assert len(out) <= MAX_OUTPUT
        return
    assert refusal.split(": ", maxsplit=1)[0] and "\n" not in refusal and len(refusal) < 400


def test_a_run_placed_by_multikueue_shows_its_worker_column() -> None:
    doc = snapshot("x")
    assert "WORKER" not in table(check(doc))
    doc["runs"]["items"][0].update(worker="worker-2\x1b[2J", placements=["worker-1", "worker-2"])
    lines = table(check(doc)).splitlines()
    header = next(line for line in lines if line.startswith("ITEM"))
    assert header.split()[5] == "WORKER"
    row = lines[lines.index(header) + 1]
    assert "worker-2\\x1b[2J" in row and "\x1b" not in row


def test_a_huge_document_prints_a_bounded_table() -> None:
    doc = snapshot()
    node = doc["quota"]["nodes"][1]
    node["depth"] = 100
    node["resources"] = node["resources"] * 5_000
    doc["queues"] = doc["queues"] * 5_000
    doc["runs"]["items"][0]["reason"] = "r" * 1_000_000
    out = table(check(doc))
    assert len(out) <= MAX_OUTPUT
    assert "4,000 more not shown" in out and "... 5,000 more" not in out


@settings(max_examples=200, deadline=None)
@given(text=hostile_text(surrogates=True))
def test_the_status_page_shows_no_control_character_but_newline_and_tab(text: str) -> None:
    html = page.render(snapshot(text))
    assert unsafe_characters(html) == []
    assert json.dumps(snapshot(text))  # the same document is JSON-able (served as is)


def test_an_escape_sequence_on_the_page_is_shown_escaped() -> None:
    html = page.render(snapshot("log tail\x1b]52;c;aGFja2Vk\x07\u202eexe.txt"))
    assert "log tail\\x1b]52;c;aGFja2Vk\\x07\\u202eexe.txt" in html
