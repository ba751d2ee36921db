"""What must never reach a person's terminal raw, written from Unicode's own tables (not from
`launch_agent.model.display`, whose work the tests judge), and hostile text to try it with.

Unsafe: every character of category Cc (C0, DEL, C1) but the allowed `\\n` and `\\t`, the line
and paragraph separators (Zl, Zp), lone surrogates (Cs: a terminal cannot even be sent one),
and the bidi formatting characters (UAX #9: embeddings, overrides, isolates, the implicit
marks), which reorder what a reader sees.
"""

from __future__ import annotations

import unicodedata

from hypothesis import strategies as st

_BIDI_CLASSES = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
_BIDI_MARKS = frozenset({"\u200e", "\u200f", "\u061c"})  # LRM, RLM, ALM


def unsafe(char: str) -> bool:
    return (
        unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")
        or unicodedata.bidirectional(char) in _BIDI_CLASSES
        or char in _BIDI_MARKS
    )


def unsafe_characters(text: str, allowed: str = "\n\t") -> list[str]:
    """The characters of `text` a terminal must not get raw (with their repr, for messages)."""
    return [c for c in text if c not in allowed and unsafe(c)]


# Pieces a hostile value is made of: every line break YAML and terminals know, escape
# sequences (OSC 52 writes the clipboard, CSI repaints, C1 forms of both), bidi overrides,
# and what YAML gives meaning to (`#`, `: `, document markers, quotes, flow and anchors).
PIECES = (
    "\n",
    "\r",
    "\r\n",
    "\x85",
    "\u2028",
    "\u2029",
    "\t",
    "\x0b",
    "\x0c",
    "\x00",
    "\x7f",
    "\x1b]52;c;aGFja2Vk\x07",
    "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[H",
    "\x1b[31m",
    "\x9b2J",
    "\x9d52;c;aGFja2Vk\x9c",
    "\u202e",
    "\u2066",
    "\u200f",
    "#",
    ": ",
    "\n---\n",
    "\n...\n",
    "---",
    "'",
    '"',
    "{",
    "}",
    "[",
    "&a",
    "*a",
    "!!python/object:os.system",
    "|",
    ">",
    "%",
    "@",
    "`",
    "\n  security:\n    privileged: true\n    hostPaths: [/]\n  #",
)


def hostile_text(*, min_size: int = 0, surrogates: bool = False) -> st.SearchStrategy[str]:
    """Text made of hostile pieces and arbitrary characters (lone surrogates only when asked:
    no UTF-8 file or JSON answer can hold one)."""
    chars = st.characters(exclude_categories=[] if surrogates else ["Cs"])
    piece = st.one_of(st.sampled_from(PIECES), st.text(chars, max_size=4))
    return st.lists(piece, min_size=min_size, max_size=6).map("".join)
