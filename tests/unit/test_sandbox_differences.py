"""docs/sandbox.md's "What still differs from the real cluster" is the list the comparison
test accepts (tests/cluster/differences.py), so neither can change without the other."""

from __future__ import annotations

from tests.cluster.compare import Difference
from tests.cluster.differences import DOC, FOOTER, HEADER, KNOWN, render, stale, unexplained


def test_the_docs_list_is_the_known_differences() -> None:
    text = DOC.read_text()
    assert "### What still differs from the real cluster" in text
    start, end = text.index(HEADER), text.index(FOOTER) + len(FOOTER) + 1
    assert text[start:end] == render(), (
        "docs/sandbox.md's list is not tests/cluster/differences.py's: run"
        " `python -m tests.cluster.differences` to rewrite it"
    )


def test_every_known_difference_says_why() -> None:
    for known in KNOWN:
        assert known.what and len(known.why) > 40, known


def test_a_listed_path_is_explained_and_others_are_not() -> None:
    volume = "pod/train-POD1.spec.volumes[kube-api-access-GENERATED].name"
    other = "pod/train-POD1.spec.volumes[data].name"
    found = [Difference("job-succeeds", p, "<absent>", "x") for p in (volume, other)]
    assert unexplained(found) == [found[1]]


def test_an_entry_that_explains_nothing_is_stale() -> None:
    volume = "pod/train-POD1.spec.volumes[kube-api-access-GENERATED].name"
    assert stale(["job-succeeds"], [Difference("job-succeeds", volume, "<absent>", "x")]) == []
    assert stale(["job-succeeds"], []) == KNOWN
