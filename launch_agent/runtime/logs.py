"""Structured logging for the agent: text or JSON lines, secrets never printed.

The redaction filter knows the actual secret values (the API key) and masks them wherever they
appear: in the message, its arguments and exception text. Masking by value catches what a
field-name rule misses, such as a key pasted into a manifest a submitter sent.

Text lines escape the control characters of their message with the one sanitizer
(`model/display.py`; JSON lines are escaped by JSON, DEL included): a message can quote what a
submitter wrote or a pod printed (a log tail in a failure reason), and a newline there would
start a forged line of the agent's log, an ANSI escape repaint the reader's terminal. A
traceback keeps its line breaks and nothing else. Every message is clipped to
`MAX_LOG_MESSAGE` characters: a value W&B sent that is refused (a 200,000-character item id) is
never written whole, however many times it comes back.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO

from launch_agent.model.display import clip, one_line, terminal_text

MASK = "********"
_STANDARD = set(vars(logging.makeLogRecord({})))
_FORMATTED = frozenset({"message", "asctime"})
# As much as W&B takes of a failure message (`Reporter.clip`): a log tail fits, a refused
# 200,000-character value does not.
MAX_LOG_MESSAGE = 16_000


class TextFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(clip(record.message, MAX_LOG_MESSAGE), tabs=True)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        # The message is on one line already; a traceback keeps its line breaks, and the
        # exception texts in it lose every other control character.
        return terminal_text(super().format(record))


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Very short values would mask ordinary words; an API key is 40+ characters.
        self._secrets = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if self._secrets:
            record.msg = self.redact(record.getMessage())
            record.args = None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": clip(record.getMessage(), MAX_LOG_MESSAGE),
        }
        # Structured fields passed with `extra={...}` (run id, queue, stage, ...).
        # (`message` and `asctime` are what another handler's formatter left on the record.)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _FORMATTED and not key.startswith("_"):
                entry[key] = clip(value, MAX_LOG_MESSAGE) if isinstance(value, str) else value
        if record.exc_text:
            entry["exc"] = record.exc_text
        elif record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        # JSON escapes every control character but DEL, which the terminal would get raw.
        return json.dumps(entry, default=str).replace("\x7f", "\\u007f")


def configure_logging(
    fmt: str, verbosity: int, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> logging.Handler:
    """Install the agent's handler on the `launch_agent` logger; returns it (for removal)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RedactingFilter(secrets))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logger = logging.getLogger("launch_agent")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    logger.propagate = False
    return handler
