"""Paths into manifests: one syntax for override globs, pod-template locations and errors.

A path is dot-separated keys with list selectors:

| form | matches |
| --- | --- |
| `spec.template` | the key `template` under `spec` |
| `containers[main]` | the list item whose `name` is `main` (or index `main` if unnamed) |
| `containers[0]` | the list item at index 0 (items without a name) |
| `containers[*]` | any list item |
| `*` | any one key |
| `**` | any number of keys and items, including none |
| `["example.com/x"]` | a key containing dots or brackets |

Concrete paths (from walking data) are tuples of `str` (a key) and `Item` (a list item); glob
patterns compile to tuples of the segment classes below. Matching is segment-wise, so a key
that happens to contain a dot can never be confused with two keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True, slots=True)
class Item:
    """A list item in a concrete path: its `name`, or its index as a string."""

    label: str


PathSeg = str | Item
Path = tuple[PathSeg, ...]


@dataclass(frozen=True, slots=True)
class AnyKey:
    pass


@dataclass(frozen=True, slots=True)
class AnyItem:
    pass


@dataclass(frozen=True, slots=True)
class Deep:
    pass


GlobSeg = str | Item | AnyKey | AnyItem | Deep
Glob = tuple[GlobSeg, ...]

_TOKEN = re.compile(
    r"""\s*(?:
        \["(?P<quoted>[^"]*)"\]      # ["dotted.key"]
      | \[(?P<sel>[^\]"]*)\]         # [name] [0] [*]
      | (?P<deep>\*\*)
      | (?P<key>[^.\[\]"]+)          # plain key or *
      | (?P<dot>\.)
    )""",
    re.VERBOSE,
)


class PathSyntaxError(ValueError):
    pass


@lru_cache(maxsize=4096)
def parse_glob(text: str) -> Glob:
    """Parse a path pattern; raises `PathSyntaxError` with the offending position."""
    segs: list[GlobSeg] = []
    pos = 0
    expect_key = True  # after a dot (or at the start) a key is required
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise PathSyntaxError(f"unexpected {text[pos:]!r} at position {pos}")
        pos = m.end()
        if m.group("dot") is not None:
            if expect_key:
                raise PathSyntaxError(f"empty key before position {pos}")
            expect_key = True
            continue
        if m.group("deep") is not None:
            segs.append(Deep())
        elif m.group("key") is not None:
            key = m.group("key").strip()
            if not expect_key:
                raise PathSyntaxError(f"missing '.' before {key!r}")
            segs.append(AnyKey() if key == "*" else key)
        elif m.group("quoted") is not None:
            segs.append(m.group("quoted"))
        else:
            sel = m.group("sel").strip()
            if not sel:
                raise PathSyntaxError(f"empty [] at position {m.start()}")
            segs.append(AnyItem() if sel == "*" else Item(sel))
        expect_key = False
    if not segs or expect_key:
        raise PathSyntaxError("path is empty or ends with '.'")
    return tuple(segs)


def _seg_matches(g: GlobSeg, s: PathSeg) -> bool:
    if isinstance(g, AnyKey):
        return isinstance(s, str)
    if isinstance(g, AnyItem):
        return isinstance(s, Item)
    return g == s


@lru_cache(maxsize=65536)
def glob_matches_prefix(glob: Glob, path: Path) -> bool:
    """True if `glob` matches `path` or any prefix of it.

    Granting `**.containers[*].resources` grants everything below `resources` too. The glob
    runs as a small automaton over the path (the set of glob positions still alive), so a
    layer with 20,000 distinct paths costs 20,000 short loops. Results are cached: the same
    few globs meet the same few paths render after render.
    """
    if not path:
        return False
    end = len(glob)
    states = _skip_deep(glob, {0})
    for seg in path:
        if end in states:
            return True  # the glob is used up: it matched a prefix
        nxt = set()
        for gi in states:
            g = glob[gi]
            if isinstance(g, Deep):
                nxt.add(gi)  # `**` takes this segment and may take more
            elif _seg_matches(g, seg):
                nxt.add(gi + 1)
        if not nxt:
            return False
        states = _skip_deep(glob, nxt)
    return end in states


def _skip_deep(glob: Glob, states: set[int]) -> set[int]:
    """`states` plus the positions reached by letting each `**` match nothing."""
    out = set(states)
    for start in states:
        gi = start
        while gi < len(glob) and isinstance(glob[gi], Deep):
            gi += 1
            out.add(gi)
    return out


class PrefixMatcher:
    """`glob_matches_prefix` for one set of globs over many paths that share prefixes.

    A layer's changes are siblings (20,000 env entries of one container): the automaton states
    after each prefix are kept, so each path costs one step from its parent's states instead of
    a walk from the root per glob.
    """

    def __init__(self, globs: Sequence[Glob]) -> None:
        self.globs = tuple(globs)
        start = tuple(_skip_deep(g, {0}) for g in self.globs)
        alive = any(len(g) in s for g, s in zip(self.globs, start, strict=True))
        # After a prefix: True (some glob is used up, so every longer path matches), False (no
        # glob can match any longer path), or each glob's live positions.
        self._after: dict[Path, bool | tuple[set[int], ...]] = {(): True if alive else start}

    def allows(self, path: Path) -> bool:
        """True if some glob matches `path` or a prefix of it (never for the empty path)."""
        return bool(path) and self._state(path) is True

    def _state(self, path: Path) -> bool | tuple[set[int], ...]:
        known = self._after.get(path)
        if known is not None:
            return known
        parent = self._state(path[:-1])
        if isinstance(parent, bool):
            state: bool | tuple[set[int], ...] = parent
        else:
            seg = path[-1]
            nxt = tuple(_step(g, s, seg) for g, s in zip(self.globs, parent, strict=True))
            if any(len(g) in s for g, s in zip(self.globs, nxt, strict=True)):
                state = True
            elif not any(nxt):
                state = False
            else:
                state = nxt
        self._after[path] = state
        return state


def _step(glob: Glob, states: set[int], seg: PathSeg) -> set[int]:
    nxt = set()
    for gi in states:
        if gi == len(glob):
            continue
        g = glob[gi]
        if isinstance(g, Deep):
            nxt.add(gi)
        elif _seg_matches(g, seg):
            nxt.add(gi + 1)
    return _skip_deep(glob, nxt) if nxt else nxt


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_$-]+$")


def format_path(path: Path, prefix: str = "") -> str:
    """`("spec", "containers", Item("main"), "env")` → `spec.containers[main].env`."""
    out = prefix
    for seg in path:
        if isinstance(seg, Item):
            out += f"[{seg.label}]"
        elif _PLAIN_KEY.match(seg):
            out += f".{seg}" if out else seg
        else:
            out += f'["{seg}"]'
    return out


def find(obj: Any, glob: Glob) -> Iterator[tuple[Path, Any]]:
    """Every value in `obj` at a path matching `glob` (no `**`), with its concrete path."""

    def walk(node: Any, gi: int, path: Path) -> Iterator[tuple[Path, Any]]:
        if gi == len(glob):
            yield path, node
            return
        g = glob[gi]
        if isinstance(g, str):
            if isinstance(node, dict) and g in node:
                yield from walk(node[g], gi + 1, (*path, g))
        elif isinstance(g, AnyKey):
            if isinstance(node, dict):
                for k, v in node.items():
                    yield from walk(v, gi + 1, (*path, k))
        elif isinstance(g, AnyItem | Item):
            if isinstance(node, list):
                for i, v in enumerate(node):
                    label = item_label(v, i)
                    if isinstance(g, AnyItem) or g.label == label:
                        yield from walk(v, gi + 1, (*path, Item(label)))
        else:
            raise PathSyntaxError("'**' is not allowed in a location path")

    yield from walk(obj, 0, ())


def item_label(value: Any, index: int) -> str:
    """How a list item is named in paths: its `name` (or Ray's `groupName`), else its index."""
    if isinstance(value, dict):
        name = value.get("name", value.get("groupName"))
        if isinstance(name, str):
            return name
    return str(index)


def resolve(obj: Any, path: Path) -> Any:
    """The value at a concrete path (as produced by `find`), or None."""
    node = obj
    for seg in path:
        if isinstance(seg, Item):
            if not isinstance(node, list):
                return None
            node = next((v for i, v in enumerate(node) if item_label(v, i) == seg.label), None)
        elif isinstance(node, dict):
            node = node.get(seg)
        else:
            return None
    return node


def get(obj: Any, path: tuple[str, ...], default: Any = None) -> Any:
    """The value at a path of plain keys, or `default`."""
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def ensure_map(obj: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The mapping at `path`, created (and replacing non-mappings) as needed."""
    node = obj
    for key in path:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    return node
