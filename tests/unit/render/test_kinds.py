"""One row per workload kind: pod templates, pod sets, suspend, names, env target, defaults."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.kinds import KINDS, lookup
from launch_agent.render.paths import find, parse_glob
from launch_agent.render.pipeline import is_suspended, pod_sets, render, suspend, unsuspend
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import load_queue_spec

from .helpers import EXAMPLES, make_item

SETTINGS = RenderSettings()

# file, pod templates, pod-set counts, suspend path, defaults (path → value), containers with
# the W&B env (by pod template order)
ROWS = [
    (
        "job.yaml",
        1,
        [1],
        ("spec", "suspend"),
        {
            "spec.backoffLimit": 0,
            "spec.ttlSecondsAfterFinished": 3600,
            "spec.activeDeadlineSeconds": 86400,
        },
        ["main"],
    ),
    (
        "job-wandb-form.yaml",
        1,
        [1],
        ("spec", "suspend"),
        {"spec.backoffLimit": 0, "spec.activeDeadlineSeconds": 604800},
        ["launch0"],
    ),
    (
        "jobset-gke.yaml",
        2,
        [1, 4],
        ("spec", "suspend"),
        {
            "spec.ttlSecondsAfterFinished": 3600,
            "spec.replicatedJobs[*].template.spec.backoffLimit": 0,
        },
        ["main", "main"],
    ),
    (
        "pytorchjob.yaml",
        2,
        [1, 2],
        ("spec", "runPolicy", "suspend"),
        {"spec.runPolicy.backoffLimit": 0, "spec.runPolicy.ttlSecondsAfterFinished": 3600},
        ["pytorch", "pytorch"],
    ),
    ("trainjob.yaml", 0, [2], ("spec", "suspend"), {"spec.activeDeadlineSeconds": 604800}, []),
    ("leaderworkerset.yaml", 2, [1, 3], None, {}, ["leader", "worker"]),
    (
        # The third template is KubeRay's default submitter pod, written out to be enforced.
        "rayjob.yaml",
        3,
        [1, 2, 1],
        ("spec", "suspend"),
        {
            "spec.shutdownAfterJobFinishes": True,
            "spec.ttlSecondsAfterFinished": 3600,
            "spec.backoffLimit": 0,
        },
        ["ray-head", "ray-worker"],
    ),
    (
        "volcano-job.yaml",
        2,
        [1, 2],
        None,
        {"spec.maxRetry": 0, "spec.ttlSecondsAfterFinished": 3600},
        ["main", "main"],
    ),
]


def _render(file: str) -> dict[str, Any]:
    spec, _ = load_queue_spec((EXAMPLES / file).read_text())
    return render(spec, make_item(), None, SETTINGS).workload


def _env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env", [])}


@pytest.mark.parametrize(
    ("file", "n_templates", "counts", "suspend_path", "defaults", "env_containers"),
    ROWS,
    ids=[r[0] for r in ROWS],
)
def test_kind_row(
    file: str,
    n_templates: int,
    counts: list[int],
    suspend_path: tuple[str, ...] | None,
    defaults: dict[str, Any],
    env_containers: list[str],
) -> None:
    obj = _render(file)
    info = lookup(obj["apiVersion"], obj["kind"])
    assert info is not None
    templates = info.pod_template_matches(obj)
    assert len(templates) == n_templates
    assert [c for c, _ in pod_sets(obj)] == counts
    assert info.suspend_path == suspend_path
    for path, value in defaults.items():
        found = [v for _p, v in find(obj, parse_glob(path))]
        assert found and all(v == value for v in found), path
    for index, ((_path, tmpl), name) in enumerate(zip(templates, env_containers, strict=False)):
        main = next(c for c in tmpl["spec"]["containers"] if c["name"] == name)
        names = _env_names(main)
        assert {"WANDB_API_KEY", "WANDB_PROJECT", "WANDB_LAUNCH_TRACE_ID"} <= names
        # Only the primary pod template reports as the run.
        assert ("WANDB_RUN_ID" in names) is (index == 0)
        assert tmpl["metadata"]["labels"][L.RUN_QUEUE_ITEM] == "UnVuUXVldWVJdGVtOjEyMzQ1Njc4OQ"
    assert len(obj["metadata"]["name"]) <= info.max_name
    assert obj["metadata"]["labels"][L.AGENT] == "launch-agent"


def test_trainjob_env_goes_to_the_trainer() -> None:
    obj = _render("trainjob.yaml")
    trainer = obj["spec"]["trainer"]
    assert trainer["image"] == "registry.example.com/img:1"
    assert {"WANDB_RUN_ID", "WANDB_API_KEY"} <= _env_names(trainer)


@pytest.mark.parametrize("file", [r[0] for r in ROWS if r[3] is not None])
def test_suspend_and_unsuspend(file: str) -> None:
    obj = _render(file)
    assert not is_suspended(obj)
    suspend(obj)
    assert is_suspended(obj)
    unsuspend(obj)
    assert not is_suspended(obj)


@pytest.mark.parametrize("file", ["leaderworkerset.yaml", "volcano-job.yaml"])
def test_kinds_without_suspend_say_so(file: str) -> None:
    obj = _render(file)
    with pytest.raises(InvalidInput, match="has no suspend field"):
        suspend(obj)


def test_rayjob_entrypoint_from_overrides() -> None:
    spec, _ = load_queue_spec((EXAMPLES / "rayjob.yaml").read_text())
    item = make_item(overrides={"entry_point": ["python", "main.py"], "args": ["--lr", "0.1 0.2"]})
    obj = render(spec, item, None, SETTINGS).workload
    assert obj["spec"]["entrypoint"] == "python main.py --lr '0.1 0.2'"
    args_only = render(spec, make_item(overrides={"args": ["--x"]}), None, SETTINGS).workload
    assert args_only["spec"]["entrypoint"] == "python train.py --x"


def test_every_kind_has_a_crd_name_and_install_hint() -> None:
    pytorch = lookup("kubeflow.org/v1", "PyTorchJob")
    assert pytorch is not None
    assert pytorch.crd_name == "pytorchjobs.kubeflow.org"
    assert pytorch.not_installed() == (
        "PyTorchJob (kubeflow.org/v1) is not installed in this cluster:"
        " install the Kubeflow training operator (v1)"
    )
    assert len({(k.api_version, k.kind) for k in KINDS}) == 7
