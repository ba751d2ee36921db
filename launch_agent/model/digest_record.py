"""The agent's record of the image digests it built, per context hash (pure).

Why: Kaniko runs a submitter's `RUN` steps in the container that holds the push credential,
so any build can push any tag of the destination repository, another context's included. A
registry tag therefore proves nothing about who built it; the digest the agent read from its
own Kaniko Job does. The record maps each content-addressed tag (the context hash) to the
digests the agent's builds of it pushed, and a registry tag is a cache hit only when its
digest is on that record (`adapters/digest_record.py` keeps it in a ConfigMap builds cannot
write; `adapters/builder.py` decides).

The ConfigMap's data, one key per tag:

    "3f0c9a61d2e84b7a90c1": "1718000000 sha256:<64 hex> sha256:<64 hex>"

the time of the last build (Unix seconds) and up to `PER_TAG` digests, newest first. Bounded:
at most `max_entries` tags, the most recently built kept; a tag pruned from it is built again
when a run needs it (the safe side). Anything malformed in the data (a key that is not a tag,
a value that does not parse, a digest that is not `sha256:` + 64 hex) is ignored, never
trusted: someone who could write the ConfigMap could only make the agent build again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Tags are `image_tag`'s 20 hex digits; a little latitude for another length later.
TAG = re.compile(r"^[0-9a-f]{8,64}$")
# Digests kept per tag: a rebuild after a poisoned tag (or a leftover build) adds one, and the
# older ones stay trusted (they are still the agent's own builds of that content).
PER_TAG = 3
MAX_TIME_DIGITS = 15


@dataclass(frozen=True, slots=True)
class Entry:
    built_at: int
    digests: tuple[str, ...]


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST.match(value) is not None


def parse_record(data: Mapping[Any, Any] | None) -> dict[str, Entry]:
    """The record in a ConfigMap's `data`; malformed entries are left out."""
    out: dict[str, Entry] = {}
    for tag, value in (data or {}).items():
        if not isinstance(tag, str) or not TAG.match(tag) or not isinstance(value, str):
            continue
        parts = value.split()
        if not parts or not parts[0].isdigit() or len(parts[0]) > MAX_TIME_DIGITS:
            continue
        when, *digests = parts
        kept = tuple(dict.fromkeys(d for d in digests if DIGEST.match(d)))[:PER_TAG]
        if kept:
            out[tag] = Entry(int(when), kept)
    return out


def encode_record(entries: Mapping[str, Entry]) -> dict[str, str]:
    """The ConfigMap `data` for `entries` (sorted, so the same record is the same object)."""
    return {
        tag: " ".join((str(entry.built_at), *entry.digests))
        for tag, entry in sorted(entries.items())
    }


def with_build(
    entries: Mapping[str, Entry], tag: str, digest: str, now: int, max_entries: int
) -> dict[str, Entry]:
    """`entries` plus `digest` built for `tag` at `now`, pruned to `max_entries` tags."""
    if not TAG.match(tag) or not DIGEST.match(digest):
        raise ValueError(f"not a tag and digest: {tag!r}, {digest!r}")
    old = entries.get(tag)
    digests = (digest, *(d for d in (old.digests if old else ()) if d != digest))[:PER_TAG]
    updated = {**entries, tag: Entry(max(now, old.built_at if old else 0), digests)}
    if len(updated) <= max_entries:
        return updated
    # The tag just built stays whatever the clocks say; of the others, the newest.
    others = sorted((t for t in updated if t != tag), key=lambda t: (updated[t].built_at, t))
    kept = [tag, *reversed(others[len(others) - (max_entries - 1) :])]
    return {t: updated[t] for t in kept}


def trusted(entries: Mapping[str, Entry], tag: str, digest: str) -> bool:
    entry = entries.get(tag)
    return entry is not None and digest in entry.digests
