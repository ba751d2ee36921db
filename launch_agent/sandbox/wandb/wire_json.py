"""JSON as W&B's Go server reads and writes it, for the sandbox (which imports no product code).

The real server accepts what Go's `encoding/json` accepts: nesting up to 10,000 levels
(`maxNestingDepth` in golang `src/encoding/json/scanner.go`; deeper is the SyntaxError
"exceeded max depth"), duplicate keys (the last wins), any number the grammar allows (however
large), `\\ud800` escapes, and invalid UTF-8, which Go replaces by U+FFFD. Python's `json`
recurses in C and raises `RecursionError` near 1,000 levels, so deep texts are read here
iteratively; shallow ones take the C parser.

The sandbox keeps a pushed runSpec as the text it was sent and serves it back on pop inline,
verbatim (`RawJSON` + `dumps`), as the real server stores it: the agent must cope with exactly
what a submitter can put there.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

# golang src/encoding/json/scanner.go: `maxNestingDepth = 10000`.
MAX_NESTING_DEPTH = 10_000
# Below this many brackets the C parser cannot reach its recursion limit.
_C_PARSER_BRACKETS = 500

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class WireJSONError(ValueError):
    """Text Go's encoding/json would refuse; the message follows Go's where it matters."""


def decode_body(raw: bytes) -> str:
    """Request bytes as Go sees them: invalid UTF-8 becomes U+FFFD instead of an error."""
    return raw.decode("utf-8", "replace")


def _number(token: str) -> Any:
    if any(c in token for c in ".eE"):
        return float(token)  # 1e999999 is inf here; the text served back is the original
    try:
        return int(token)
    except ValueError:  # longer than Python converts: Go keeps it as a float64 too
        return float(token)


def _refuse_constant(name: str) -> Any:
    raise WireJSONError(f"invalid character {name[0]!r} looking for beginning of value")


def loads(text: str, max_depth: int = MAX_NESTING_DEPTH) -> Any:
    """Parse like Go's encoding/json (see the module doc), iteratively for deep texts."""
    if text.count("[") + text.count("{") <= _C_PARSER_BRACKETS:
        try:
            return json.loads(text, parse_constant=_refuse_constant, parse_int=_number)
        except json.JSONDecodeError as exc:
            raise WireJSONError(f"{exc.msg} at offset {exc.pos}") from None
    return _Parser(text, max_depth).parse()


class _Parser:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.max_depth = max_depth
        self.pos = 0

    def fail(self, what: str) -> WireJSONError:
        if self.pos >= len(self.text):
            return WireJSONError("unexpected end of JSON input")
        return WireJSONError(f"invalid character {self.text[self.pos]!r} {what}")

    def ws(self) -> None:
        match = _WS.match(self.text, self.pos)
        assert match is not None
        self.pos = match.end()

    def string(self) -> str:
        match = _STRING.match(self.text, self.pos)
        if match is None:
            raise self.fail("in string literal")
        self.pos = match.end()
        value: str = json.loads(match.group())
        return value

    def key(self) -> str:
        self.ws()
        if not self.text.startswith('"', self.pos):
            raise self.fail("looking for beginning of object key string")
        key = self.string()
        self.ws()
        if not self.text.startswith(":", self.pos):
            raise self.fail("after object key")
        self.pos += 1
        return key

    def parse(self) -> Any:
        text = self.text
        stack: list[Any] = []
        keys: list[str] = []
        while True:
            self.ws()
            char = text[self.pos : self.pos + 1]
            if char in ("{", "["):
                if len(stack) >= self.max_depth:
                    raise WireJSONError("exceeded max depth")
                self.pos += 1
                self.ws()
                close = "}" if char == "{" else "]"
                if text.startswith(close, self.pos):
                    self.pos += 1
                    value: Any = {} if char == "{" else []
                else:
                    stack.append({} if char == "{" else [])
                    if char == "{":
                        keys.append(self.key())
                    continue
            elif char == '"':
                value = self.string()
            else:
                match = _NUMBER.match(text, self.pos)
                word = next((w for w in _LITERALS if text.startswith(w, self.pos)), None)
                if match is not None and match.end() > self.pos:
                    value = _number(match.group())
                    self.pos = match.end()
                elif word is not None:
                    value = _LITERALS[word]
                    self.pos += len(word)
                else:
                    raise self.fail("looking for beginning of value")
            # A complete value: add it to its container, then close as many as end here.
            while True:
                if not stack:
                    self.ws()
                    if self.pos != len(text):
                        raise self.fail("after top-level value")
                    return value
                top = stack[-1]
                if isinstance(top, dict):
                    top[keys[-1]] = value  # a duplicate key: the last wins, as in Go
                else:
                    top.append(value)
                self.ws()
                char = text[self.pos : self.pos + 1]
                if char == ",":
                    self.pos += 1
                    if isinstance(top, dict):
                        keys[-1] = self.key()
                    break
                if char == ("}" if isinstance(top, dict) else "]"):
                    self.pos += 1
                    value = stack.pop()
                    if isinstance(value, dict):
                        keys.pop()
                    continue
                raise self.fail("after array element or object key:value pair")


@dataclass(frozen=True)
class RawJSON:
    """JSON text to be written into a response as it is (a runSpec as it was pushed)."""

    text: str


def dumps(value: Any) -> str:
    """`json.dumps`, with every `RawJSON` written verbatim in its place."""
    nonce = secrets.token_hex(8)
    raws: list[str] = []

    def default(obj: Any) -> Any:
        if isinstance(obj, RawJSON):
            raws.append(obj.text)
            return f"raw-json:{nonce}:{len(raws) - 1}"
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    text = json.dumps(value, separators=(",", ":"), default=default)
    for index, raw in enumerate(raws):
        text = text.replace(f'"raw-json:{nonce}:{index}"', raw, 1)
    return text
