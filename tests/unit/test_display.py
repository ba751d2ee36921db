"""The one sanitizer (`model/display.py`), judged by Unicode's own tables (`tests/terminal.py`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.model.display import clip, first_control, one_line, quoted, terminal_text
from tests.terminal import hostile_text, unsafe_characters

ANY_TEXT = st.one_of(hostile_text(surrogates=True), st.text(st.characters(exclude_categories=[])))


@settings(max_examples=500)
@given(text=ANY_TEXT)
def test_one_line_lets_no_control_character_out(text: str) -> None:
    shown = one_line(text)
    assert unsafe_characters(shown, allowed="") == []
    assert unsafe_characters(one_line(text, tabs=True), allowed="\t") == []
    assert (shown == text) == (first_control(text) is None)
    shown.encode("utf-8")  # printable on any UTF-8 terminal: no lone surrogate left


@settings(max_examples=500)
@given(text=ANY_TEXT)
def test_terminal_text_keeps_only_newline_and_tab(text: str) -> None:
    shown = terminal_text(text)
    assert unsafe_characters(shown) == []
    assert shown.count("\n") == text.count("\n") and shown.count("\t") == text.count("\t")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),  # OSC 52: clipboard write
        ("\x1b[2J", "\\x1b[2J"),  # CSI: clear the screen
        ("\x9b2J", "\\x9b2J"),  # the C1 form of CSI
        ("exe\u202etxt", "exe\\u202etxt"),
        ("\u2066x\u2069", "\\u2066x\\u2069"),
        ("a\u2028b\x85c\rd", "a\\u2028b\\x85c\\rd"),
        ("del\x7f", "del\\x7f"),
        ("\ud800", "\\ud800"),
        ("café ✓", "café ✓"),  # printable text is left alone
    ],
)
def test_each_class_is_shown_as_its_escape(raw: str, shown: str) -> None:
    assert one_line(raw) == shown


def test_clip_and_quoted_bound_a_refused_value() -> None:
    assert clip("Q" * 200_000, 256) == "Q" * 256 + "... (200,000 characters)"
    assert clip("short", 256) == "short"
    assert quoted("a\nb" * 100, 20) == "'a\\nba\\nba\\nba\\nba\\n... (402 characters)"
