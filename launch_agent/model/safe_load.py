"""The one loader for every YAML and JSON text the agent reads: specs, configs, items, W&B answers.

Pure (text in, data or `InputError` out). The rules are the same everywhere, only the limits
differ (`Limits`):

- size: refused before parsing, so a huge text costs no parse;
- depth: YAML is bounded while composing (PyYAML's composer recurses, so a few thousand `[`
  would raise `RecursionError`); JSON is measured by an iterative scan of the raw text *before*
  `json.loads`, whose C scanner recurses too;
- duplicate mapping keys are refused at any depth (`security:` pasted twice must not silently
  grant the second block), with the line of the first one in YAML;
- YAML aliases are bounded by the nodes they expand to (`max_alias_nodes`), counted while
  composing, so a billion-laughs document fails after a few thousand nodes, in bounded time and
  memory; recursive aliases are refused (they make cyclic data nothing downstream can walk);
- YAML merge keys (`<<`) are refused: they add keys nobody wrote at that place, and an explicit
  key silently beats a merged one, which is how a duplicate would be smuggled back in;
- YAML tags: only the JSON-shaped core (str, int, float, bool, null, map, seq). Timestamps stay
  the text they were written as (Kubernetes does the same); `!!binary`, `!!set`, `!!omap`,
  `!!pairs` and every custom tag are refused;
- mapping keys must be strings (YAML `1:`, `yes:` or `null:` keys are refused: JSON and
  Kubernetes have no such keys);
- numbers must be finite: `.nan`, `.inf`, JSON `NaN`/`Infinity` and `1e999999` (which Python
  reads as infinity) are refused, and so are integers longer than Python will convert;
- JSON strings with a lone surrogate (`"\\ud800"`) are refused: they cannot be encoded as UTF-8,
  so they would fail much later, when the run is sent to Kubernetes.

W&B answers are read with `decode_response`, which is lenient *per value*: a value the rules
refuse becomes a `Refused` marker at its place instead of failing the whole answer, so a popped
item whose runSpec is hostile can still be identified and failed in W&B (`check_value`).
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

# Python refuses to convert longer integer literals (`sys.get_int_max_str_digits`); refusing
# them here turns its ValueError into a message with a path.
MAX_INT_DIGITS = 4300


@dataclass(frozen=True, slots=True)
class Limits:
    max_bytes: int = 1_000_000
    max_depth: int = 100
    max_alias_nodes: int = 10_000


# Queue specs and launch configs are admin-written files; items come from W&B or the CLI.
SPEC_LIMITS = Limits()
CONFIG_LIMITS = Limits()
ITEM_LIMITS = Limits(max_bytes=1_048_576, max_depth=100)


class InputError(ValueError):
    """A text the loader refuses: where (source, line, column or a data path) and why."""

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        line: int | None = None,
        column: int | None = None,
        path: str = "",
    ) -> None:
        self.reason = printable(reason)
        self.source = source
        self.line = line
        self.column = column
        self.path = printable(path)
        super().__init__(self.text())

    @property
    def where(self) -> str:
        """`line N, column M` (or the data path) without the source."""
        if self.line is not None:
            return f"line {self.line}, column {self.column}"
        return self.path

    def text(self) -> str:
        """`source:line:column: reason` (`line N, column M: reason` without a source)."""
        head = self.source
        if self.line is not None:
            head = f"{head}:{self.line}:{self.column}" if head else self.where
        if self.path:
            head = f"{head}: {self.path}" if head else self.path
        return f"{head}: {self.reason}" if head else self.reason


# --- YAML ----------------------------------------------------------------------------------

_SAFE_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")
)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"


class _YamlRefusal(yaml.MarkedYAMLError):
    path = ""


class _Loader(yaml.SafeLoader):
    """SafeLoader with the rules above; the pure-Python composer, whose depth can be bounded.

    (`CSafeLoader` composes in C, out of reach of the depth and alias counts.)
    """

    yaml_constructors: ClassVar[dict[Any, Any]] = {
        tag: fn for tag, fn in yaml.SafeLoader.yaml_constructors.items() if tag in _SAFE_TAGS
    }

    def __init__(self, text: str, limits: Limits) -> None:
        super().__init__(text)
        self.limits = limits
        self.depth = 0
        self.alias_nodes = 0
        self.sizes: dict[int, tuple[int, int]] = {}
        self.open_anchors: set[str] = set()
        self.path: list[str] = []

    def _refuse(self, mark: Any, reason: str, path: str = "") -> None:
        error = _YamlRefusal(problem=reason, problem_mark=mark)
        error.path = path
        raise error

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if event.anchor in self.open_anchors:
                self._refuse(event.start_mark, "recursive alias (the data would contain itself)")
            node = self.anchors.get(event.anchor)
            if node is not None:
                size, height = self._measure(node)
                self.alias_nodes += size
                if self.alias_nodes > self.limits.max_alias_nodes:
                    self._refuse(
                        event.start_mark,
                        f"aliases expand to more than {self.limits.max_alias_nodes:,} nodes",
                    )
                # Aliases inside anchors nest: the data is as deep as the expansion.
                if self.depth + height > self.limits.max_depth:
                    self._refuse(
                        event.start_mark,
                        f"nested deeper than {self.limits.max_depth} levels (through alias"
                        f" *{event.anchor})",
                    )
            return super().compose_node(parent, index)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        self.depth += 1
        if self.depth > self.limits.max_depth:
            self._refuse(event.start_mark, f"nested deeper than {self.limits.max_depth} levels")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self.open_anchors.add(anchor)
        # The composer passes a value's key node (or a list index): the path of what follows.
        if isinstance(index, yaml.ScalarNode):
            self.path.append(str(index.value))
        elif isinstance(index, int):
            self.path.append(f"[{index}]")
        else:
            self.path.append("")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(anchor)
            self.path.pop()

    def where(self, key: str = "") -> str:
        out = ""
        for part in [*self.path, key]:
            if part:
                out += part if part.startswith("[") or not out else f".{part}"
        return out

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        # Duplicates are found here, where the path is known; construction only checks types.
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                self._refuse(
                    key_node.start_mark,
                    f"duplicate key {key_node.value!r} (first at line {seen[key]})",
                    self.where(str(key_node.value)),
                )
            seen[key] = key_node.start_mark.line + 1
        return node

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        """(nodes, levels) `node` stands for with its aliases expanded.

        Memoised, so linear rather than exponential; the recursion is as deep as the node,
        which the depth checks keep within `max_depth`.
        """
        key = id(node)
        if key not in self.sizes:
            children: list[yaml.Node] = []
            if isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            measured = [self._measure(child) for child in children]
            self.sizes[key] = (
                1 + sum(size for size, _ in measured),
                1 + max((height for _, height in measured), default=0),
            )
        return self.sizes[key]

    def flatten_mapping(self, node: Any) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                self._refuse(
                    key_node.start_mark,
                    "merge keys ('<<') are not supported: write the keys out",
                )

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep)
        self.flatten_mapping(node)
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                self._refuse(
                    key_node.start_mark,
                    f"mapping key {key_node.value!r} is not a string: quote it",
                )
            if key in seen:  # `"a"` and `a`: different tags, same key
                self._refuse(
                    key_node.start_mark, f"duplicate key {key!r} (first at line {seen[key]})"
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_float(self, node: Any) -> Any:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            self._refuse(node.start_mark, f"{node.value!r} is not a finite number")
        return value

    def construct_yaml_int(self, node: Any) -> Any:
        digits = str(node.value)
        if len(digits) > MAX_INT_DIGITS:
            self._refuse(node.start_mark, f"integer of {len(digits):,} digits is too long")
        return super().construct_yaml_int(node)

    def construct_timestamp_text(self, node: Any) -> Any:
        return self.construct_scalar(node)

    def construct_refused(self, node: Any) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        self._refuse(
            node.start_mark,
            f"tag {tag} is not allowed (only strings, numbers, booleans, null, mappings and lists)",
        )


_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
# Unquoted dates and `=` stay the text written (a timestamp object is not JSON).
_Loader.add_constructor(_TIMESTAMP, _Loader.construct_timestamp_text)
_Loader.add_constructor("tag:yaml.org,2002:value", _Loader.construct_timestamp_text)
_Loader.add_constructor(None, _Loader.construct_refused)


def _size_error(size: int, limits: Limits, source: str) -> InputError:
    return InputError(f"is {size:,} bytes; the limit is {limits.max_bytes:,}", source=source)


def _yaml_error(exc: yaml.YAMLError, source: str, text: str = "") -> InputError:
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        line, column = _position(text, exc.position) if text else (None, None)
        return InputError(
            f"invalid YAML: the character U+{exc.character:04X} is not allowed in YAML",
            source=source,
            line=line,
            column=column,
        )
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    reason = getattr(exc, "problem", None) or str(exc)
    if not isinstance(exc, _YamlRefusal):
        reason = f"invalid YAML: {reason}"
    path = getattr(exc, "path", "")
    if mark is None:
        return InputError(reason, source=source, path=path)
    return InputError(reason, source=source, line=mark.line + 1, column=mark.column + 1, path=path)


def _is_empty(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and not node.value


def compose_yaml(
    text: str, *, source: str = "", limits: Limits = SPEC_LIMITS
) -> tuple[Any, yaml.Node | None]:
    """One YAML document → (data, its node tree for line numbers); `(None, None)` if empty.

    Empty documents (a stray `---`) are ignored; more than one non-empty one is refused.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise _size_error(size, limits, source)
    loader: _Loader | None = None
    try:
        # Inside the `try`: the reader refuses a control character (`\x1f`) as it is built.
        loader = _Loader(text, limits)
        nodes = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None and not _is_empty(node):
                nodes.append(node)
        if len(nodes) > 1:
            raise InputError(
                f"must hold exactly one YAML document, found {len(nodes)}", source=source
            )
        if not nodes:
            return None, None
        return loader.construct_document(nodes[0]), nodes[0]
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source, text) from None
    except RecursionError:  # the depth bound makes this unreachable; never let it escape
        raise InputError(f"nested deeper than {limits.max_depth} levels", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(text: str, *, source: str = "", limits: Limits = SPEC_LIMITS) -> Any:
    """One YAML document → data (None when empty), or `InputError`."""
    return compose_yaml(text, source=source, limits=limits)[0]


# --- JSON ----------------------------------------------------------------------------------


class Refused:
    """A JSON value the rules refuse, left in place by `decode_response` (never real data)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<refused: {self.reason}>"


# Strings (terminated or not: json.loads reports the syntax), brackets and the non-JSON
# constants Python's json accepts. Nothing else changes the depth.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]|NaN|-?Infinity', re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _position(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _scan(text: str, cut: int | None, limit: int, source: str) -> tuple[str, deque[str]]:
    """Iterative pass over the raw text, before anything recursive sees it.

    Strict (`cut` None): the first bracket deeper than `limit` or any NaN/Infinity raises.
    Lenient: every value opening deeper than `cut` is replaced by `NaN`, and so is kept each
    real NaN/Infinity; `reasons` says, in text order, what each `NaN` json.loads will meet
    stands for.
    """
    shallow = text.count("[") + text.count("{") <= (limit if cut is None else cut)
    if shallow and "NaN" not in text and "Infinity" not in text:
        return text, deque()
    reasons: deque[str] = deque()
    pieces: list[str] = []
    depth = 0
    start = 0  # where the text not yet copied to `pieces` begins
    cut_at: int | None = None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if cut is None and depth > limit:
                line, column = _position(text, match.start())
                raise InputError(
                    f"nested deeper than {limit} levels", source=source, line=line, column=column
                )
            if cut is not None and cut_at is None and depth > cut:
                cut_at = match.start()
        elif token in "]}":
            depth -= 1
            if cut_at is not None and depth == cut:
                pieces += [text[start:cut_at], "NaN"]
                reasons.append(f"nested deeper than {limit} levels")
                start, cut_at = match.end(), None
        elif cut_at is None:
            if cut is None:
                line, column = _position(text, match.start())
                raise InputError(f"{token} is not JSON", source=source, line=line, column=column)
            reasons.append(f"{token} is not JSON")
    if cut_at is not None:  # never closed: json.loads reports the syntax error at the end
        pieces += [text[start:cut_at], "NaN"]
        reasons.append(f"nested deeper than {limit} levels")
    else:
        pieces.append(text[start:])
    return "".join(pieces), reasons


def _decoder(reasons: deque[str]) -> json.JSONDecoder:
    """json.loads hooks that leave a `Refused` marker where the rules refuse a value."""
    refuse = Refused

    def constant(_: str) -> Any:
        return refuse(reasons.popleft() if reasons else "NaN is not JSON")

    def number(text: str) -> Any:
        value = float(text)
        return value if math.isfinite(value) else refuse(f"number {text[:40]} is out of range")

    def integer(text: str) -> Any:
        if len(text) > MAX_INT_DIGITS:
            return refuse(f"integer of {len(text):,} digits is too long")
        return int(text)

    def pairs(items: list[tuple[str, Any]]) -> Any:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                return refuse(f"duplicate key {key!r}")
            out[key] = value
        return out

    return json.JSONDecoder(
        parse_constant=constant, parse_float=number, parse_int=integer, object_pairs_hook=pairs
    )


def _decode_text(raw: str | bytes, source: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"is not UTF-8 text: {exc.reason} at byte {exc.start}", source=source
        ) from None


def _json_syntax(exc: json.JSONDecodeError, source: str) -> InputError:
    return InputError(f"invalid JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno)


def load_json(raw: str | bytes, *, source: str = "", limits: Limits = ITEM_LIMITS) -> Any:
    """A JSON text → data, or `InputError` (line and column, or the data path, and why)."""
    if len(raw) > limits.max_bytes:
        raise _size_error(len(raw), limits, source)
    text = _decode_text(raw, source)
    text, reasons = _scan(text, None, limits.max_depth, source)
    try:
        value = _decoder(reasons).decode(text)
    except json.JSONDecodeError as exc:
        raise _json_syntax(exc, source) from None
    except RecursionError:  # the scan makes this unreachable; never let it escape
        raise InputError(f"nested deeper than {limits.max_depth} levels", source=source) from None
    problem = check_value(value, limits.max_depth)
    if problem is not None:
        path, reason = problem
        raise InputError(reason, source=source, path=path)
    return value


def decode_response(raw: str | bytes, *, cut: int, limit: int) -> Any:
    """A W&B answer → data in which every refused value is a `Refused` marker.

    Values opening deeper than `cut` become markers saying they are nested deeper than
    `limit` (the item depth the caller enforces; `cut` adds the answer's own wrapping). Raises
    `InputError` only when the text as a whole cannot be read (not UTF-8, not JSON).
    """
    text = _decode_text(raw, "")
    text, reasons = _scan(text, cut, limit, "")
    try:
        return _decoder(reasons).decode(text)
    except json.JSONDecodeError as exc:
        raise _json_syntax(exc, "") from None
    except RecursionError:
        raise InputError(f"nested deeper than {cut} levels") from None


def _walk(value: Any, prefix: str) -> Iterator[tuple[str, int, Any]]:
    """(path, depth, value) of every value, iteratively, parents first."""
    stack: list[tuple[str, int, Any]] = [(prefix, 1, value)]
    while stack:
        path, depth, current = stack.pop()
        yield path, depth, current
        if isinstance(current, dict):
            for key, child in reversed(current.items()):
                yield _join(path, key), depth + 1, key  # keys are checked like strings
                stack.append((_join(path, key), depth + 1, child))
        elif isinstance(current, list):
            for index in range(len(current) - 1, -1, -1):
                stack.append((f"{path}[{index}]", depth + 1, current[index]))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def printable(text: str) -> str:
    """`text` with lone surrogates escaped, so a message about one can itself be written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _short_path(path: str, limit: int = 120) -> str:
    return printable(path if len(path) <= limit else path[:limit] + "...")


def check_value(value: Any, max_depth: int, prefix: str = "") -> tuple[str, str] | None:
    """The first (path, reason) the rules refuse in decoded JSON, or None.

    Depth counts containers: `{}` is 1, `{"a": []}` is 2.
    """
    for path, depth, current in _walk(value, prefix):
        if isinstance(current, dict | list) and depth > max_depth:
            return _short_path(path) or "(root)", f"nested deeper than {max_depth} levels"
        if isinstance(current, Refused):
            return _short_path(path) or "(root)", current.reason
        if isinstance(current, str) and _SURROGATE.search(current):
            char = _SURROGATE.search(current)
            assert char is not None
            return (
                _short_path(path) or "(root)",
                f"holds a lone surrogate \\u{ord(char.group()):04x} (not valid Unicode)",
            )
    return None
