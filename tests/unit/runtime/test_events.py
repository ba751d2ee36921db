"""The Events book: Warning Events filed per run, deduplicated by reason, bounded."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from launch_agent.runtime.events import (
    MESSAGE_LIMIT,
    EventBook,
    event_view,
    file_event,
    owner_names,
)


def event(
    name: str,
    reason: str = "FailedCreate",
    *,
    kind: str = "Job",
    type_: str = "Warning",
    message: str = 'Error creating: pods "x" is forbidden: exceeded quota: q',
    count: int = 1,
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.1", "namespace": "default", "resourceVersion": "7"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "default", "uid": "u"},
        "type": type_,
        "reason": reason,
        "message": message,
        "count": count,
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }


def test_owner_names_are_every_dash_prefix_longest_first() -> None:
    assert owner_names("train-abc-worker-0-x7k2p") == [
        "train-abc-worker-0-x7k2p",
        "train-abc-worker-0",
        "train-abc-worker",
        "train-abc",
        "train",
    ]
    assert owner_names("job") == ["job"]


def test_events_are_filed_under_the_run_their_object_belongs_to() -> None:
    book = EventBook()
    runs = {("default", "basic-3"): "item-3"}

    def run_of(namespace: str, name: str) -> str | None:
        return runs.get((namespace, name))

    assert file_event(book, event("basic-3"), run_of) == "item-3"  # the Job itself
    pod = event("basic-3-x7k2p", "FailedMount", kind="Pod")
    assert file_event(book, pod, run_of) == "item-3"  # its pod
    assert file_event(book, event("other-1"), run_of) is None  # not the agent's
    assert file_event(book, event("basic-3", type_="Normal"), run_of) is None
    assert [e["reason"] for e in book.of("item-3")] == ["FailedCreate", "FailedMount"]


def test_one_event_per_object_and_reason_the_newest_wins() -> None:
    book = EventBook()
    book.add("r", event("j", message="first", count=1))
    book.add("r", event("j", message="second", count=5))
    [only] = book.of("r")
    assert (only["message"], only["count"]) == ("second", 5)
    assert len(book) == 1


def test_per_run_and_total_bounds_and_forget() -> None:
    book = EventBook(per_run=3, total=5)
    for i in range(10):
        book.add("a", event(f"j-{i}"))
    assert len(book.of("a")) == 3
    assert [e["involvedObject"]["name"] for e in book.of("a")] == ["j-7", "j-8", "j-9"]
    for i in range(3):
        book.add("b", event(f"k-{i}"))
    assert len(book) == 5, "the run updated longest ago loses its oldest Event"
    assert len(book.of("a")) == 2 and len(book.of("b")) == 3
    book.forget("b")
    assert book.of("b") == [] and len(book) == 2


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.integers(0, 30), st.sampled_from(["X", "Y"])),
        max_size=300,
    )
)
def test_the_book_never_exceeds_its_bounds(adds: list[tuple[str, int, str]]) -> None:
    book = EventBook(per_run=4, total=10)
    for run, obj, reason in adds:
        book.add(run, event(f"o-{obj}", reason))
        assert len(book) <= 10
        assert all(len(book.of(r)) <= 4 for r in book.runs())
        assert len(book) == sum(len(book.of(r)) for r in book.runs())


def test_event_view_keeps_what_the_diagnosis_reads_and_cuts_long_messages() -> None:
    raw = event("j", message="x" * (MESSAGE_LIMIT * 3))
    raw["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    raw["source"] = {"component": "job-controller"}
    view = event_view(raw)
    assert "managedFields" not in view["metadata"]
    assert len(view["message"]) == MESSAGE_LIMIT
    assert view["involvedObject"]["name"] == "j"
    assert (view["reason"], view["type"], view["count"]) == ("FailedCreate", "Warning", 1)
    assert view["source"] == {"component": "job-controller"}
