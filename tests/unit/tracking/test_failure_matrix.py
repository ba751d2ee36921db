"""Issue 14's matrix, kind x failure mode, must be covered by `tests/fixtures/upstream/`.

Each cell is found, not listed: a fixture belongs to a failure mode when its verdict (and, for
the variants of one mode, the upstream words it carries) says so. A new fixture therefore
joins the matrix by itself, and a cell the issue asks for without a fixture fails here with
the cell's name. `docs/agent.md`'s failure-mode table is checked against the same fixtures:
every `state / reason` a row promises is what some fixture's `diagnose` prints, and every
verdict a fixture prints has its row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
AGENT_MD = ROOT / "docs" / "agent.md"

KINDS = ("job", "jobset", "pytorchjob", "trainjob", "leaderworkerset", "rayjob", "volcano")
# Kueue manages every kind but the Volcano Job (docs/workload-kinds.md).
KUEUE = tuple(k for k in KINDS if k != "volcano")
STATES = ("queued", "starting", "running", "succeeded", "failed", "preempted", "stopped")


@dataclass(frozen=True)
class Case:
    kind: str
    stem: str
    text: str  # the dump as written, for the upstream words it carries
    state: str
    reason: str | None
    message: str

    @property
    def verdict(self) -> tuple[str, str | None]:
        return self.state, self.reason


def _cases() -> list[Case]:
    found = []
    for path in sorted(UPSTREAM.glob("*/*.json")):
        if path.name.endswith(".expected.json"):
            continue
        expected = json.loads(path.with_name(path.stem + ".expected.json").read_text())
        found.append(
            Case(
                path.parent.name,
                path.stem,
                path.read_text(),
                expected["state"],
                expected["reason"],
                expected["message"] or "",
            )
        )
    return found


CASES = _cases()

Predicate = Callable[[Case], bool]


def verdict(state: str, *reasons: str | None) -> Predicate:
    return lambda c: c.state == state and (not reasons or c.reason in reasons)


def words(*needles: str) -> Predicate:
    """The dump carries every one of these upstream strings."""
    return lambda c: all(n in c.text for n in needles)


def both(*preds: Predicate) -> Predicate:
    return lambda c: all(p(c) for p in preds)


PULL = ("ImagePullBackOff", "InvalidImageName")

# failure mode -> (what identifies its fixtures, the kinds that must have one).
MATRIX: dict[str, tuple[Predicate, tuple[str, ...]]] = {
    # Baselines.
    "succeeded": (verdict("succeeded"), tuple(k for k in KINDS if k != "leaderworkerset")),
    "running": (verdict("running", None), KINDS),
    "queued": (verdict("queued"), KINDS),
    # Pods that cannot be created: a warning, then failed at the start deadline.
    "FailedCreate Events, before the deadline": (
        verdict("starting", "FailedCreate"),
        ("job", "volcano"),
    ),
    "FailedCreate Events": (
        verdict("failed", "FailedCreate"),
        ("job", "jobset", "pytorchjob", "leaderworkerset", "rayjob", "volcano"),
    ),
    "JobSet JobCreationFailed": (verdict("failed", "JobCreationFailed"), ("jobset",)),
    "Trainer TrainJobResourcesCreationFailed": (
        verdict("failed", "TrainJobResourcesCreationFailed"),
        ("trainjob",),
    ),
    "FailedMount, pods in ContainerCreating": (
        both(verdict("failed", "FailedMount"), words("ContainerCreating")),
        KINDS,
    ),
    "nothing starts, no Event: the start deadline": (verdict("failed", "StartTimeout"), KUEUE),
    "queued in Kueue is not late": (
        both(verdict("queued"), lambda c: "kueue" in c.stem),
        KUEUE,
    ),
    # Controllers that retry.
    "retrying is not final": (verdict("running", "Restarting"), ("pytorchjob", "rayjob")),
    "the controller's own failure": (
        verdict("failed", "DeadlineExceeded", "BackoffLimitExceeded", "WorkloadFailed"),
        ("job", "rayjob"),
    ),
    # Kueue.
    "Kueue deactivated the Workload": (verdict("failed", "Deactivated"), KUEUE),
    "Kueue cannot admit yet": (verdict("queued", "Pending", "Inadmissible"), KUEUE),
    "Kueue preempted it (Requeued=True)": (verdict("queued", "Preempted"), ("job", "jobset")),
    # Pods.
    "a container's exit code or OOMKilled": (
        verdict("failed", "ExitCode", "OOMKilled"),
        ("job", "jobset", "pytorchjob", "trainjob", "volcano"),
    ),
    "disruptions requeue": (
        verdict("preempted"),
        ("job", "jobset", "pytorchjob", "trainjob", "volcano"),
    ),
    "kubelet admission refusal": (
        both(lambda c: c.reason == "AdmissionRefused", words("Pod was rejected")),
        KINDS,
    ),
    "permanent image pull error fails fast": (
        both(verdict("failed", *PULL), lambda c: "grace" not in c.stem),
        KINDS,
    ),
    "transient image pull error within its grace": (
        verdict("starting", "ImagePullBackOff"),
        KINDS,
    ),
    "CreateContainerConfigError past its grace": (
        verdict("failed", "CreateContainerConfigError"),
        KINDS,
    ),
    "unschedulable": (
        lambda c: c.reason == "Unschedulable",
        KINDS,
    ),
    "deleted before it finished (deletionTimestamp)": (
        both(verdict("stopped"), words("deletionTimestamp")),
        KINDS,
    ),
    "stopped by its controller (Volcano Aborted)": (
        both(verdict("stopped"), lambda c: "deletionTimestamp" not in c.text),
        ("volcano",),
    ),
}

# The variants the issue names, each with the upstream words it must carry (any kind).
VARIANTS: dict[str, Predicate] = {
    "FailedCreate: ResourceQuota exceeded": both(
        lambda c: c.reason == "FailedCreate", words("exceeded quota: ")
    ),
    "FailedCreate: missing ServiceAccount": both(
        lambda c: c.reason == "FailedCreate", words("error looking up service account")
    ),
    "FailedCreate: PodSecurity": both(
        lambda c: c.reason == "FailedCreate", words("violates PodSecurity")
    ),
    "FailedCreate: LimitRange": both(
        lambda c: c.reason == "FailedCreate", words("usage per Container is")
    ),
    "FailedMount: missing Secret": both(
        verdict("failed", "FailedMount"), words("MountVolume.SetUp failed", "not found")
    ),
    "FailedMount: before the start deadline": verdict("starting", "FailedMount"),
    "Kueue: RequeuingLimitExceeded": both(
        verdict("failed", "Deactivated"), words("RequeuingLimitExceeded")
    ),
    "Kueue: MaximumExecutionTimeExceeded": both(
        verdict("failed", "Deactivated"), words("MaximumExecutionTimeExceeded")
    ),
    "Kueue: deactivated by an admin": both(
        verdict("failed", "Deactivated"), words('"active": false', '"reason": "Deactivated"')
    ),
    "Kueue: Workload v1beta2": both(
        verdict("failed", "Deactivated"), words("kueue.x-k8s.io/v1beta2")
    ),
    "Kueue: Misconfigured": both(verdict("queued", "Inadmissible"), words("Misconfigured")),
    "Kueue: LocalQueue missing": both(verdict("queued", "Inadmissible"), words("doesn't exist")),
    "Kueue: pods gated by kueue.x-k8s.io/admission": both(
        verdict("queued"), words("kueue.x-k8s.io/admission")
    ),
    "RayJob: Retrying": both(verdict("running", "Restarting"), words('"Retrying"')),
    "RayJob: New after a retry": both(
        verdict("running", "Restarting"), words('"jobStatus": "FAILED"')
    ),
    "PyTorchJob: Restarting": both(verdict("running", "Restarting"), words('"Restarting"')),
    "PyTorchJob: backoff limit": both(
        lambda c: c.kind == "pytorchjob" and c.state == "failed",
        words("reached the specified backoff limit"),
    ),
    "Job: BackoffLimitExceeded with no pod left to explain it": verdict(
        "failed", "BackoffLimitExceeded"
    ),
    "Job: PodFailurePolicy with no pod left to explain it": verdict("failed", "PodFailurePolicy"),
    "Job: a disruption recorded by its podFailurePolicy, the pod gone": both(
        verdict("preempted", "Preempted"),
        words("has condition DisruptionTarget matching FailJob rule at index"),
        lambda c: '"kind": "Pod"' not in c.text,
    ),
    "TrainJob: FailedJobs copied from the JobSet": both(
        lambda c: c.kind == "trainjob" and c.state == "failed", words('"FailedJobs"')
    ),
    "blame: main over an istio sidecar killed with 137": both(
        verdict("failed", "ExitCode"), words("istio-proxy", '"exitCode": 137')
    ),
    "blame: main over a native sidecar killed with 143": both(
        verdict("failed", "ExitCode"), words('"restartPolicy": "Always"', '"exitCode": 143')
    ),
    "blame: exit codes compared as numbers": lambda c: c.stem == "exit-codes-compare-as-numbers",
    "graceful deletion: deletionTimestamp": both(verdict("stopped"), words("deletionTimestamp")),
    "graceful deletion: pods 137/143 while suspended": both(
        verdict("queued", None), words('"Suspended"', '"exitCode": 143')
    ),
    "Jobs 1.31+: FailureTarget before Failed": both(
        verdict("failed"), words('"FailureTarget"'), lambda c: '"type": "Failed"' not in c.text
    ),
    "Jobs 1.31+: SuccessCriteriaMet before Complete": both(
        verdict("succeeded"), words('"SuccessCriteriaMet"')
    ),
    "disruption: TerminationByKubelet": both(verdict("preempted"), words("TerminationByKubelet")),
    "disruption: EvictionByEvictionAPI": both(verdict("preempted"), words("EvictionByEvictionAPI")),
    "disruption: DeletionByTaintManager": both(
        verdict("preempted"), words("DeletionByTaintManager")
    ),
    "disruption: DeletionByPodGC": both(verdict("preempted"), words("DeletionByPodGC")),
    "disruption: graceful node shutdown (pod reason Terminated)": both(
        verdict("preempted"), words('"reason": "Terminated"')
    ),
    "disruption: PreemptionByScheduler": both(verdict("preempted"), words("PreemptionByScheduler")),
    "kubelet admission: OutOfnvidia.com/gpu": both(
        lambda c: c.reason == "AdmissionRefused", words("OutOfnvidia.com/gpu")
    ),
    "kubelet admission: UnexpectedAdmissionError": both(
        lambda c: c.reason == "AdmissionRefused", words("UnexpectedAdmissionError")
    ),
    "Volcano: finished only when succeeded+failed reach replicas": both(
        lambda c: c.kind == "volcano" and c.state == "running", words('"failed": 1')
    ),
    "pull: ErrImagePull/ImagePullBackOff alternating, within grace": both(
        verdict("starting", "ImagePullBackOff"), words("ErrImagePull")
    ),
    "pull: manifest unknown / not found": both(verdict("failed", *PULL), words(": not found")),
    "pull: 401 Unauthorized": both(verdict("failed", *PULL), words("401 Unauthorized")),
    "pull: 429 Too Many Requests within grace": both(
        verdict("starting", "ImagePullBackOff"), words("429 Too Many Requests")
    ),
    "pull: 403 Forbidden fails fast": both(verdict("failed", *PULL), words("403 Forbidden")),
    "pull: invalid reference": verdict("failed", "InvalidImageName"),
    "CreateContainerConfigError within grace": verdict("starting", "CreateContainerConfigError"),
    "events.k8s.io/v1 Events": both(
        lambda c: c.reason is not None, words('"apiVersion": "events.k8s.io/v1"', '"series"')
    ),
}


# The registry's status at the end of containerd's error chain, which the message must keep.
STATUSES = (
    "401 Unauthorized",
    "403 Forbidden",
    "429 Too Many Requests",
    "503 Service Unavailable",
)


@pytest.mark.parametrize("status", STATUSES)
def test_the_registrys_status_reaches_the_message(status: str) -> None:
    pulls = [c for c in CASES if c.reason == "ImagePullBackOff" and status in c.text]
    assert pulls, status
    for case in pulls:
        assert status in case.message, f"{case.kind}/{case.stem}: {case.message}"


def _covering(pred: Predicate, kind: str | None = None) -> list[str]:
    return [f"{c.kind}/{c.stem}" for c in CASES if (kind is None or c.kind == kind) and pred(c)]


@pytest.mark.parametrize("mode", MATRIX)
def test_every_kind_the_issue_names_has_a_fixture_of_each_failure_mode(mode: str) -> None:
    pred, kinds = MATRIX[mode]
    missing = [k for k in kinds if not _covering(pred, k)]
    assert not missing, f"{mode!r}: no fixture for {missing}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_has_a_fixture_with_the_upstream_words(variant: str) -> None:
    assert _covering(VARIANTS[variant]), f"{variant!r}: no fixture"


def test_the_matrix_sees_every_kind_and_state() -> None:
    assert {c.kind for c in CASES} == set(KINDS)
    assert {c.state for c in CASES} == set(STATES)
    for kind in KINDS:
        assert len([c for c in CASES if c.kind == kind]) >= 10, kind


# --- docs/agent.md's failure-mode table ------------------------------------------------------


def _table_rows() -> list[tuple[str, set[tuple[str, str | None]]]]:
    """(failure mode, the `state` / `reason` pairs its diagnose column promises) per row."""
    text = AGENT_MD.read_text()
    start = text.index("## Every failure mode, in W&B and in `diagnose`")
    section = text[start : text.index("\n## ", start + 1)]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| failure mode") or "---" in line:
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        pairs: set[tuple[str, str | None]] = set()
        state: str | None = None
        for token in re.findall(r"`([^`]+)`", cells[-1]):
            if token in STATES:
                if state is not None and not any(s == state for s, _ in pairs):
                    pairs.add((state, None))
                state = token
            elif state is not None:
                pairs.add((state, token))
        if state is not None and not any(s == state for s, _ in pairs):
            pairs.add((state, None))
        rows.append((cells[0], pairs))
    return rows


def test_the_docs_table_is_read() -> None:
    rows = _table_rows()
    assert len(rows) >= 20
    assert all(pairs for _, pairs in rows), [mode for mode, pairs in rows if not pairs]


@pytest.mark.parametrize("row", [mode for mode, _ in _table_rows()])
def test_every_docs_table_row_has_a_fixture_for_each_verdict_it_names(row: str) -> None:
    pairs = dict(_table_rows())[row]
    seen = {c.verdict for c in CASES}
    missing = sorted((p for p in pairs if p not in seen), key=str)
    assert not missing, f"docs/agent.md row {row[:60]!r}: no fixture prints {missing}"


def test_every_verdict_a_fixture_prints_has_a_docs_table_row() -> None:
    promised = set().union(*(pairs for _, pairs in _table_rows()))
    unlisted = sorted({f"{c.state} / {c.reason}" for c in CASES if c.verdict not in promised})
    assert not unlisted, f"docs/agent.md's table names no row for {unlisted}"
