"""Status documents for the tests of `launch-agent status` and the status page: a real one
(`snapshot.build`) with chosen text in every value others write, and documents near it (one to
three places deleted or replaced by any JSON value)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from launch_agent.runtime.status.activity import Activity
from launch_agent.runtime.status.snapshot import NANO, AgentInfo, QuotaRow, RunRow, build
from tests.terminal import hostile_text

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
# The table's bound: 4 sections of at most 1,000 rows and a few header lines, each row at most
# 7 cells of 80 characters and their gaps.
MAX_OUTPUT = 4 * 1_002 * 7 * 82 + 4_000


def snapshot(text: str = "x") -> dict[str, Any]:
    """A real status document (`snapshot.build`) with `text` in every value a submitter, W&B
    or the configuration writes."""
    activity = Activity(lambda: T0)
    activity.popped(text, f"item-{text}")
    activity.failed(f"item-{text}", "run", text, f"the run failed: {text}")
    activity.built("failed", 3.0, f"registry/{text}")
    info = AgentInfo(
        name=text,
        version=text,
        role="leader",
        leader=text,
        hostname=text,
        started_at=T0 - timedelta(seconds=30),
        wandb_base_url="https://api.wandb.ai",
        entity=text,
        namespaces=[text],
        quota_mode="agent",
        builder=text,
        problems=[text],
        last_poll=T0,
    )
    run = RunRow(text, text, "ent", "proj", "r1", "running", text, 3.0, text)
    quota = [
        QuotaRow("root", 0, False, {"cpu": 8 * NANO}, {"cpu": 8 * NANO}, {"cpu": NANO}),
        QuotaRow(text, 1, True, {text: NANO}, {text: 2 * NANO}, {text: NANO}, 2, (text,)),
    ]
    return build(
        info,
        queues=[text],
        runs=[run],
        activity=activity.view(),
        quota=quota,
        start_deadline_seconds=60,
    )


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, (*prefix, i))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | hostile_text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text(), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def near_documents(draw: st.DrawFn) -> Any:
    """A real document with one to three places deleted or replaced by any JSON value: the
    shapes a broken or hostile server answers, close enough to the real one to reach every
    check (random JSON alone rarely gets past the first key)."""
    doc: Any = snapshot(draw(hostile_text()))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(list(paths(doc))))
        if not where:
            doc = draw(json_values)
            continue
        parent = doc
        try:
            for step in where[:-1]:
                parent = parent[step]
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[where[-1]]
            else:
                parent[where[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change removed this place
    return doc
