"""Structured logging for the agent: text or JSON lines, secrets never printed.

The redaction filter knows the actual secret values (the API key) and masks them wherever they
appear: in the message, its arguments and exception text. Masking by value catches what a
field-name rule misses, such as a key pasted into a manifest a submitter sent.

Text lines escape the control characters of their message (JSON lines are escaped by JSON):
a message can quote what a submitter wrote or a pod printed (a log tail in a failure reason),
and a newline there would start a forged line of the agent's log, an ANSI escape repaint the
reader's terminal.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO

MASK = "********"
_STANDARD = set(vars(logging.makeLogRecord({})))
# C0 (but tab) and C1 controls, DEL, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """`text` on one line: each control character as its Python escape (`\\n`, `\\x1b`)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


class TextFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


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
            "msg": record.getMessage(),
        }
        # Structured fields passed with `extra={...}` (run id, queue, stage, ...).
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_text:
            entry["exc"] = record.exc_text
        elif record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


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
