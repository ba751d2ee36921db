"""`spec.kueue.multiKueue`: each kind rendered in the form Kueue's MultiKueue adapter for it
checks (kueue `pkg/controller/jobs/*/*_multikueue_adapter.go`, `IsJobManagedByKueue`), and the
kinds and templates it cannot take refused in `validate` with why."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.kinds import KINDS, MULTIKUEUE_CONTROLLER, lookup
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

from .helpers import EXAMPLES, make_item

# example file -> where its kind keeps managedBy (the field its MultiKueue adapter reads)
DISPATCHED = {
    "job.yaml": ("spec", "managedBy"),  # job_multikueue_adapter.go: Spec.ManagedBy
    "jobset-gke.yaml": ("spec", "managedBy"),  # jobset_multikueue_adapter.go
    "pytorchjob.yaml": ("spec", "runPolicy", "managedBy"),  # kubeflowjob: RunPolicy().ManagedBy
    "rayjob.yaml": ("spec", "managedBy"),  # rayjob_multikueue_adapter.go: getManagedBy
    "trainjob.yaml": ("spec", "managedBy"),  # trainjob_multikueue_adapter.go
}
REFUSED = {
    "leaderworkerset.yaml": "never mirrors its status back",
    "volcano-job.yaml": "Kueue has no integration for Volcano Jobs",
}


def multikueue_spec(name: str, **kueue: Any) -> str:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    data["spec"]["kueue"] = {"queueName": "lq", "multiKueue": True, **kueue}
    return yaml.safe_dump(data)


def dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


@pytest.mark.parametrize("name", sorted(DISPATCHED))
def test_each_kind_is_rendered_for_multikueue(name: str) -> None:
    spec, _ = load_queue_spec(multikueue_spec(name, priorityClass="high"))
    workload = render(spec, make_item(), None, RenderSettings()).workload
    assert dig(workload, DISPATCHED[name]) == MULTIKUEUE_CONTROLLER
    labels = workload["metadata"]["labels"]
    assert labels[L.KUEUE_QUEUE_NAME] == "lq"
    assert labels[L.KUEUE_PRIORITY_CLASS] == "high"
    # Suspended: the manager's Kueue unsuspends it once a worker admitted it.
    info = lookup(workload["apiVersion"], workload["kind"])
    assert info is not None and info.is_suspended(workload)


@pytest.mark.parametrize("name", sorted(DISPATCHED))
def test_without_multikueue_nothing_is_handed_over(name: str) -> None:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    data["spec"]["kueue"] = {"queueName": "lq"}
    spec, _ = load_queue_spec(yaml.safe_dump(data))
    workload = render(spec, make_item(), None, RenderSettings()).workload
    assert dig(workload, DISPATCHED[name]) is None
    assert L.KUEUE_PRIORITY_CLASS not in workload["metadata"]["labels"]


def test_every_kind_either_names_its_managed_by_field_or_says_why_not() -> None:
    for info in KINDS:
        if info.managed_by is None:
            assert info.multikueue_problem, info.label
            assert "spec.kueue.multiKueue" in info.multikueue_problem
        else:
            assert info.multikueue_problem is None
            assert info.managed_by[-1] == "managedBy"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_kinds_multikueue_cannot_take_are_refused_with_why(name: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(multikueue_spec(name))
    reasons = {p.path: p.reason for p in exc.value.problems}
    assert REFUSED[name] in reasons["spec.kueue.multiKueue"]


def test_a_custom_kind_is_refused_with_why() -> None:
    text = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata: {name: custom}
spec:
  queues: [q]
  namespace: ns
  kueue: {queueName: lq, multiKueue: true}
  podTemplatePaths: [spec.template]
  suspendPath: spec.suspend
  template:
    apiVersion: example.com/v1
    kind: Trainer
    spec:
      template:
        spec:
          containers: [{name: main, image: "${image_uri}"}]
"""
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(text)
    reasons = {p.path: p.reason for p in exc.value.problems}
    assert "MultiKueueAdaptersForCustomJobs" in reasons["spec.kueue.multiKueue"]


def _with_template_managed_by(value: Any, *, multi: bool) -> str:
    data = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    data["spec"]["template"]["spec"]["managedBy"] = value
    data["spec"]["kueue"] = {"queueName": "lq", "multiKueue": multi}
    return yaml.safe_dump(data)


def test_a_template_handing_runs_to_multikueue_must_say_so_in_the_spec() -> None:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(_with_template_managed_by(MULTIKUEUE_CONTROLLER, multi=False))
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.managedBy"
    assert "set spec.kueue.multiKueue: true" in problem.reason
    spec, _ = load_queue_spec(_with_template_managed_by(MULTIKUEUE_CONTROLLER, multi=True))
    assert spec.multi_kueue


def test_a_template_handing_runs_to_another_controller_conflicts_with_multikueue() -> None:
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(_with_template_managed_by("example.com/other", multi=True))
    (problem,) = exc.value.problems
    assert problem.path == "spec.template.spec.managedBy"
    assert "another controller" in problem.reason


@pytest.mark.parametrize(
    ("kueue", "path"),
    [
        ({"queueName": "lq", "multiKueue": "yes"}, "spec.kueue.multiKueue"),
        ({"queueName": "lq", "priorityClass": "Not_A_Name"}, "spec.kueue.priorityClass"),
        ({"queueName": "lq", "priorityClass": "p" * 64}, "spec.kueue.priorityClass"),
        ({"multiKueue": True}, "spec.kueue"),  # a LocalQueue is needed on the manager
    ],
)
def test_bad_kueue_fields_are_refused_by_the_schema(kueue: dict[str, Any], path: str) -> None:
    data = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    data["spec"]["kueue"] = kueue
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(yaml.safe_dump(data))
    assert any(p.path.startswith(path) for p in exc.value.problems), exc.value.problems


values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["kueue.x-k8s.io/multikueue", "batch.kubernetes.io/job-controller", ""]),
    st.none(),
    st.integers(),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(value=values, grant=st.booleans())
def test_no_submitter_value_moves_a_multikueue_run_off_multikueue(value: Any, grant: bool) -> None:
    """Whatever a submitter writes into managedBy (with or without a grant on the whole
    spec), the run is either refused or rendered with MultiKueue's value."""
    data = yaml.safe_load(multikueue_spec("job.yaml"))
    if grant:
        data["spec"]["overridable"] = ["**"]
    spec, _ = load_queue_spec(yaml.safe_dump(data))
    item = make_item({"spec": {"managedBy": copy.deepcopy(value)}})
    try:
        workload = render(spec, item, None, RenderSettings()).workload
    except InvalidInput:
        return
    assert workload["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER
