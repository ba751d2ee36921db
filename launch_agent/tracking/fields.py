"""Safe reads from API objects that may be partial, stale or plain wrong.

Everything the tracking layer knows arrives as JSON from the API server or from a controller
we do not own: a field can be missing, `null`, or of another type than its schema says (a CRD
without `status` validation, an older controller). These helpers never raise: a missing or
mistyped value reads as "absent", so the tracker falls back to a weaker signal instead of
crashing the informer that called it.

These are the primitives; the typed views of whole objects (TypedDicts and the `Meta` reader of
`metadata`, used by tracking, the runtime and the adapters) are built on them in `views.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def dig(obj: object, *path: str) -> object:
    """`obj[path[0]][path[1]]...`, or None as soon as a step is not a mapping or key."""
    cur = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def text(obj: object, *path: str) -> str | None:
    value = dig(obj, *path)
    return value if isinstance(value, str) and value else None


def integer(obj: object, *path: str) -> int:
    """A count field; absent or mistyped counts as 0 (bool is not a count)."""
    value = dig(obj, *path)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def optional_int(obj: object, *path: str) -> int | None:
    value = dig(obj, *path)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def flag(obj: object, *path: str) -> bool:
    return dig(obj, *path) is True


def mappings(obj: object, *path: str) -> Iterator[Mapping[str, Any]]:
    """The mapping items of a list field, skipping anything else in it."""
    value = dig(obj, *path)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for item in value:
            if isinstance(item, Mapping):
                yield item


def condition(obj: object, ctype: str) -> Mapping[str, Any] | None:
    """The `status.conditions` entry of type `ctype` whose status is "True", if any."""
    for cond in mappings(obj, "status", "conditions"):
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def timestamp(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it ("2026-01-02T03:04:05Z"), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # Normalising here surfaces an offset that overflows near year 1 or 9999 now,
        # instead of in a later subtraction.
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def name_of(obj: object) -> str:
    return text(obj, "metadata", "name") or "?"


# A registry's token URL carries its whole scope as a query string (containerd
# `remotes/docker/auth/fetch.go`): noise that pushes the status out of a message.
_QUERY = re.compile(r'(https?://[^\s?"]+)\?[^\s":]*')


def one_line(value: str, limit: int) -> str:
    """`value` on one line in at most `limit` characters. Controllers and runtimes chain their
    errors ("failed to pull ...: failed to resolve ...: unexpected status ...: 401
    Unauthorized"), so the cause is at the end: a long message keeps its head and its tail."""
    flat = _QUERY.sub(r"\1", " ".join(value.split()))
    if len(flat) <= limit:
        return flat
    head = limit * 2 // 5
    tail = limit - head - 3
    return f"{flat[:head].rstrip()} … {flat[-tail:].lstrip()}"
