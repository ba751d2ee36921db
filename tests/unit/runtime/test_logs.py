"""Log output: JSON lines with structured fields, and the API key masked everywhere."""

from __future__ import annotations

import io
import json
import logging
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.runtime.logs import configure_logging
from tests.terminal import hostile_text, unsafe_characters

KEY = "0123456789abcdef0123456789abcdef01234567"


def _logger(fmt: str) -> tuple[logging.Logger, io.StringIO, logging.Handler]:
    stream = io.StringIO()
    handler = configure_logging(fmt, verbosity=0, secrets=[KEY], stream=stream)
    return logging.getLogger("launch_agent.test"), stream, handler


def test_json_lines_carry_structured_fields_and_mask_the_key() -> None:
    log, stream, handler = _logger("json")
    try:
        log.info("created %s with key %s", "job-a", KEY, extra={"run_id": "r1", "queue": "q"})
        try:
            raise ValueError(f"bad manifest containing {KEY}")
        except ValueError:
            log.exception("render failed")
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["msg"] == "created job-a with key ********"
    assert (lines[0]["run_id"], lines[0]["queue"], lines[0]["level"]) == ("r1", "q", "info")
    assert "bad manifest containing ********" in lines[1]["exc"]
    assert KEY not in stream.getvalue()


def test_text_format_masks_the_key() -> None:
    log, stream, handler = _logger("text")
    try:
        log.warning("key=%s", KEY)
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    assert "key=********" in stream.getvalue()
    assert KEY not in stream.getvalue()


def test_text_lines_cannot_be_forged_by_a_message() -> None:
    # A failure reason quotes a pod's log tail: its newlines and escapes stay on one line.
    log, stream, handler = _logger("text")
    try:
        log.info("run failed: %s", "oops\n2026-12-01 00:00:00 ERROR forged\x1b[2J\u2028x\tend")
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("run failed: oops\\n2026-12-01 00:00:00 ERROR forged\\x1b[2J\\u2028x\tend")


@settings(max_examples=200, deadline=None)
@given(
    message=hostile_text(surrogates=True),
    arg=hostile_text(surrogates=True),
    error=hostile_text(surrogates=True),
    fmt=st.sampled_from(["text", "json"]),
)
def test_no_control_character_but_newline_and_tab_gets_out(
    message: str, arg: str, error: str, fmt: str
) -> None:
    # Whatever the message, its arguments and an exception's text hold (a pod's log tail, an
    # item id from W&B), the log carries no escape sequence, C1 control, DEL, bidi override or
    # line separator; newlines only between the lines of a traceback.
    log, stream, handler = _logger(fmt)
    try:
        log.warning("%s %s", message, arg)
        try:
            raise ValueError(error)
        except ValueError:
            log.exception("failed: %s", arg)
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)
    out = stream.getvalue()
    assert unsafe_characters(out) == []
    # The warning is one line: the next line is the next record's.
    second = out.split("\n")[1]
    if fmt == "json":
        assert json.loads(second)["level"] == "error"
    else:
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ERROR ", second), second


def test_a_refused_value_is_not_logged_whole() -> None:
    # A 200,000-character item id from W&B is refused; each log line about it stays bounded.
    for fmt in ("text", "json"):
        log, stream, handler = _logger(fmt)
        try:
            log.info("failing item %s", "Q" * 200_000)
        finally:
            logging.getLogger("launch_agent").removeHandler(handler)
        out = stream.getvalue()
        assert len(out) < 16_400 and "(200,013 characters)" in out


def test_a_json_line_carries_the_message_once_even_after_another_handler() -> None:
    # Another handler's formatter leaves `message` on the record; it is not a structured field
    # (it used to be copied whole, unclipped, into every JSON line).
    stream, other = io.StringIO(), io.StringIO()
    plain = logging.StreamHandler(other)
    logger = logging.getLogger("launch_agent")
    logger.addHandler(plain)
    handler = configure_logging("json", verbosity=0, stream=stream)
    try:
        logging.getLogger("launch_agent.test").info("failing item %s", "Q" * 200_000)
    finally:
        logger.removeHandler(plain)
        logger.removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert "message" not in entry and len(line) < 16_400
