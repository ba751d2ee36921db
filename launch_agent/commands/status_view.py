"""`launch-agent status -o table`: the `/api/status` document, checked, then printed for a person.

The document comes over the network from whatever answers at the URL (the agent, or a proxy,
or something pretending to be either), so it is checked against the shape docs/operations.md
documents (the keys `runtime/status/snapshot.py` writes and the table reads) before any of it
is printed: a missing key, a value of the wrong type, a count that is not a count, a quota
node deeper than any tree the agent loads, each is one `BadStatus` naming the key's path. Keys
the table does not read are not checked (a newer agent may add some).

What is printed is bounded whatever the document holds: every value goes through the one
sanitizer (`model.display`) and is clipped to `CELL` characters, each section shows at most
`MAX_ROWS` rows (and says how many it left out), and a quota node's indent is its checked
depth, at most `MAX_DEPTH`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launch_agent.model.display import one_line, quoted
from launch_agent.runtime.status.page import quantity

CELL = 80
MAX_ROWS = 1_000
# The loaders nest at most 100 levels (`safe_load.Limits.max_depth`), so no quota tree the agent
# loaded is deeper.
MAX_DEPTH = 100
# Beyond this a number is no count, duration or quantity the agent reports (and an integer
# this large cannot even be formatted as a float).
MAX_NUMBER = 1e30
# Levels indented in the QUOTA table (real trees have a handful; deeper ones still show their
# names).
MAX_INDENT = 16


class BadStatus(ValueError):
    """The document is not the agent's status: where (a dotted path) and why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


Check = Callable[[Any, str], None]


def _what(value: Any) -> str:
    kind = "null" if value is None else type(value).__name__
    return f"{kind} {quoted(value, 40)}" if value is not None else kind


def _type(name: str, test: Callable[[Any], bool]) -> Check:
    def check(value: Any, path: str) -> None:
        if not test(value):
            raise BadStatus(path, f"expected {name}, got {_what(value)}")

    return check


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        # Compared before `isfinite`, which converts to float (and raises for huge ints).
        and -MAX_NUMBER <= value <= MAX_NUMBER
        and math.isfinite(value)
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER


STR = _type("a string", lambda v: isinstance(v, str))
BOOL = _type("a boolean", lambda v: isinstance(v, bool))
NUMBER = _type("a number", _is_number)
COUNT = _type("a count (an integer >= 0)", _is_count)
DEPTH = _type(
    f"a depth (an integer from 0 to {MAX_DEPTH})",
    lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DEPTH,
)


def nullable(inner: Check) -> Check:
    def check(value: Any, path: str) -> None:
        if value is not None:
            inner(value, path)

    return check


def list_of(inner: Check) -> Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise BadStatus(path, f"expected a list, got {_what(value)}")
        for i, entry in enumerate(value):
            inner(entry, f"{path}[{i}]")

    return check


@dataclass(frozen=True)
class MaybeMissing:
    """A key that may be missing (an older agent, a section the agent does not have)."""

    check: Check


def mapping(fields: Mapping[str, Check | MaybeMissing]) -> Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise BadStatus(path or "(document)", f"expected a mapping, got {_what(value)}")
        for key, spec in fields.items():
            where = f"{path}.{key}" if path else key
            if key not in value:
                if isinstance(spec, MaybeMissing):
                    continue
                raise BadStatus(where, "missing")
            (spec.check if isinstance(spec, MaybeMissing) else spec)(value[key], where)

    return check


_HEALTH = mapping({"ok": nullable(BOOL)})
_RESOURCE = mapping(
    {"resource": STR, "used": NUMBER, "min": NUMBER, "max": nullable(NUMBER), "borrowed": NUMBER}
)
STATUS = mapping(
    {
        "agent": mapping(
            {
                "name": STR,
                "version": STR,
                "role": STR,
                "leader": STR,
                "uptime_seconds": NUMBER,
                "ready": BOOL,
                "problems": list_of(STR),
                "wandb": mapping({"url": STR}),
                "apis": MaybeMissing(
                    mapping({"wandb": MaybeMissing(_HEALTH), "kubernetes": MaybeMissing(_HEALTH)})
                ),
                "last_poll": nullable(STR),
            }
        ),
        "queues": list_of(
            mapping(
                {
                    "name": STR,
                    "popped_last_hour": COUNT,
                    "running": COUNT,
                    "tracked": COUNT,
                    "failed_last_hour": COUNT,
                    "last_pop": nullable(STR),
                }
            )
        ),
        "runs": mapping(
            {
                "total": COUNT,
                "past_start_deadline": COUNT,
                "items": list_of(
                    mapping(
                        {
                            "item": STR,
                            "queue": STR,
                            "state": STR,
                            "age_seconds": NUMBER,
                            "workload": STR,
                            "reason": STR,
                            # MultiKueue (an older agent has neither).
                            "worker": MaybeMissing(nullable(STR)),
                            "placements": MaybeMissing(list_of(STR)),
                        }
                    )
                ),
            }
        ),
        "quota": MaybeMissing(
            nullable(
                mapping(
                    {
                        "nodes": list_of(
                            mapping(
                                {
                                    "name": STR,
                                    "depth": DEPTH,
                                    "leaf": BOOL,
                                    "pending": COUNT,
                                    "resources": list_of(_RESOURCE),
                                }
                            )
                        )
                    }
                )
            )
        ),
        "builds": mapping(
            {"builder": STR, "recent": mapping({"built": COUNT, "cached": COUNT, "failed": COUNT})}
        ),
        "failures": MaybeMissing(
            list_of(
                mapping(
                    {
                        "at": STR,
                        "item": STR,
                        "queue": STR,
                        "stage": STR,
                        "reason": STR,
                        "message": STR,
                    }
                )
            )
        ),
    }
)


def check(status: Any) -> Mapping[str, Any]:
    """`status` if it has the documented shape; else `BadStatus` with the first wrong key."""
    STATUS(status, "")
    return status  # type: ignore[no-any-return]


def cell(value: object) -> str:
    """One value for a person: `-` for nothing, one line, escaped, at most `CELL` characters."""
    text = "-" if value is None or value == "" else str(value)
    text = one_line(text)
    return text if len(text) <= CELL else text[: CELL - 3] + "..."


def rows(headers: Sequence[str], body: Sequence[Sequence[object]]) -> list[str]:
    """Aligned rows, at most `MAX_ROWS` of them (the rest counted on one more line)."""
    cells = [list(headers)] + [[cell(c) for c in row] for row in body[:MAX_ROWS]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    if len(body) > MAX_ROWS:
        out.append(f"... {len(body) - MAX_ROWS:,} more not shown (-o json has them all)")
    return out


def _ok(value: object) -> str:
    return "not yet" if value is None else ("ok" if value else "failing")


def _agent(agent: Mapping[str, Any]) -> list[str]:
    apis = agent.get("apis", {})
    ready = "yes" if agent["ready"] else "no: " + "; ".join(agent["problems"])
    return [
        f"AGENT {cell(agent['name'])} v{cell(agent['version'])}  role {cell(agent['role'])}"
        f" (leader {cell(agent['leader'])})  uptime {agent['uptime_seconds']:.0f}s",
        f"  ready: {cell(ready)}",
        f"  W&B {cell(agent['wandb']['url'])}: {_ok(apis.get('wandb', {}).get('ok'))}"
        f"  Kubernetes: {_ok(apis.get('kubernetes', {}).get('ok'))}"
        f"  last poll {cell(agent['last_poll'] or 'never')}",
    ]


def _quota(quota: Mapping[str, Any]) -> list[str]:
    return rows(
        ("NODE", "RESOURCE", "USED", "MIN", "MAX", "BORROWED", "PENDING"),
        [
            (
                "  " * min(node["depth"], MAX_INDENT) + one_line(node["name"]),
                res["resource"],
                quantity(res["resource"], res["used"]),
                quantity(res["resource"], res["min"]),
                quantity(res["resource"], res["max"]),
                quantity(res["resource"], res["borrowed"]),
                node["pending"] if node["leaf"] else "",
            )
            for node in quota["nodes"]
            for res in node["resources"]
        ],
    )


def table(status: Mapping[str, Any]) -> str:
    """The table of a `check`ed status document."""
    out = [*_agent(status["agent"]), "", "QUEUES"]
    out += rows(
        ("NAME", "POPPED(1h)", "RUNNING", "TRACKED", "FAILED(1h)", "LAST POP"),
        [
            (
                q["name"],
                q["popped_last_hour"],
                q["running"],
                q["tracked"],
                q["failed_last_hour"],
                q["last_pop"],
            )
            for q in status["queues"]
        ],
    )
    runs = status["runs"]
    out += ["", f"RUNS ({runs['total']} tracked, {runs['past_start_deadline']} past deadline)"]
    # MultiKueue: a WORKER column, only when a run was placed on one.
    multi = any(r.get("placements") for r in runs["items"])
    out += rows(
        ("ITEM", "QUEUE", "STATE", "AGE", "WORKLOAD", *(["WORKER"] if multi else []), "REASON"),
        [
            (
                r["item"],
                r["queue"],
                r["state"],
                f"{r['age_seconds']:.0f}s",
                r["workload"],
                *([r.get("worker") or "-"] if multi else []),
                r["reason"],
            )
            for r in runs["items"]
        ],
    )
    quota = status.get("quota")
    if quota is not None:
        out += ["", "QUOTA", *_quota(quota)]
    builds = status["builds"]
    recent = builds["recent"]
    out += [
        "",
        f"BUILDS ({cell(builds['builder'])}): {recent['built']} built, {recent['cached']} cached,"
        f" {recent['failed']} failed recently",
    ]
    failures = status.get("failures", [])
    out += ["", "LAST FAILURES"]
    out += rows(
        ("AT", "ITEM", "QUEUE", "STAGE", "REASON", "MESSAGE"),
        [
            (f["at"], f["item"], f["queue"], f["stage"], f["reason"], f["message"])
            for f in failures[:20]
        ],
    )
    return "\n".join(out)
