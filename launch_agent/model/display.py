"""The one sanitizer for text a person reads: tables, summaries, log lines, the status page.

Pure. Much of what the agent shows was written by someone else: a submitter's run name, a
container's termination message, an item id or an error text from W&B, a value in a queue
config. Printed raw, a newline forges a line of a log or a table, `ESC ] 52` writes the
reader's clipboard (OSC 52), a CSI sequence repaints or hides what the terminal shows, and a
bidi override (U+202E) makes `exe.txt` read as `txt.exe`. So every such character is shown as
its escape (`\\x1b`, `\\u202e`), never passed on:

- C0 controls (U+0000-U+001F; `\\n` and `\\t` only where the caller keeps them), DEL and the
  C1 controls (U+0080-U+009F, with NEL and the 8-bit CSI and OSC);
- the Unicode line and paragraph separators (U+2028, U+2029), which many viewers and YAML
  treat as line breaks;
- the bidi marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
  U+202A-U+202E, U+2066-U+2069);
- lone surrogates, which cannot be encoded for a terminal at all (printing one raises).

An escape sequence is neutralised by escaping its ESC (or C1 introducer): what follows it is
then plain printable text. Values that were refused are also clipped (`clip`), so a
200,000-character item id is shown as its first characters and its length.
"""

from __future__ import annotations

import re

# Everything but C0 (and tab and newline, which each pattern adds or leaves out).
_NOT_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
# Every character `one_line` escapes.
CONTROL = re.compile(f"[\x00-\x1f{_NOT_C0}]")
# The same but tab (`one_line(tabs=True)`), and but tab and newline (`terminal_text`).
_BUT_TAB = re.compile(f"[\x00-\x08\x0a-\x1f{_NOT_C0}]")
_BUT_TAB_AND_NEWLINE = re.compile(f"[\x00-\x08\x0b-\x1f{_NOT_C0}]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def one_line(text: str, *, tabs: bool = False) -> str:
    """`text` on one line with no control character: each shown as its escape (`\\n`,
    `\\x1b`, `\\u202e`), tabs too unless `tabs`. For table cells, log messages and the
    comments of generated files."""
    return (_BUT_TAB if tabs else CONTROL).sub(_escape, text)


def terminal_text(text: str) -> str:
    """`text` with its line breaks (`\\n`) and tabs kept and every other control character
    escaped: for multi-line text a person reads (a traceback, a log tail on the status page)."""
    return _BUT_TAB_AND_NEWLINE.sub(_escape, text)


def first_control(text: str) -> re.Match[str] | None:
    """The first character `one_line` would escape, for refusing identifiers that hold one."""
    return CONTROL.search(text)


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how long it was: `abc... (200,000 characters)`."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def quoted(value: object, limit: int = 80) -> str:
    """A value quoted in a message: its repr (which escapes what is not printable), clipped."""
    return one_line(clip(repr(value), limit))


def shown(value: object, limit: int) -> str:
    """Any value as one clipped, escaped line (`str`, not `repr`): for ids and names."""
    return one_line(clip(value if isinstance(value, str) else str(value), limit))
