"""Issue 26: a key the kind's schema has nearby is refused with the place it belongs, and
`migrate --fix-misplaced` moves it there when that place is one and free, listing each move."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.render.migrate import migrate
from launch_agent.render.spec_load import load_queue_spec

from .helpers import EXAMPLES


def refusal(file: str, edit: Any, path: str) -> str:
    """The reason `validate` gives at `path` for the example spec `file` after `edit`."""
    data = yaml.safe_load((EXAMPLES / file).read_text())
    template = data["spec"]["template"]
    edit(template.get("kubernetes", template))
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(yaml.safe_dump(data))
    found = {p.path: p.reason for p in exc.value.problems}
    assert path in found, found
    return found[path]


def pytorch_ttl(t: dict[str, Any]) -> None:
    t["spec"]["ttlSecondsAfterFinished"] = 600  # W&B's PyTorchJob example


def job_backoff_in_pod_template(t: dict[str, Any]) -> None:
    t["spec"]["template"]["backOffLimit"] = 2  # W&B's examples


def mounts_in_resources(t: dict[str, Any]) -> None:
    container = t["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"volumeMounts": [{"name": "d", "mountPath": "/d"}]}


def probe_field_in_container(t: dict[str, Any]) -> None:
    t["spec"]["template"]["spec"]["containers"][0]["periodSeconds"] = 5


@pytest.mark.parametrize(
    ("file", "edit", "path", "hint"),
    [
        (
            "pytorchjob.yaml",
            pytorch_ttl,
            "spec.template.spec.ttlSecondsAfterFinished",
            "the kind's schema has it at spec.template.spec.runPolicy.ttlSecondsAfterFinished",
        ),
        (
            "job.yaml",
            job_backoff_in_pod_template,
            "spec.template.spec.template.backOffLimit",
            "the kind's schema has it at spec.template.spec.backoffLimit",
        ),
        (
            "job.yaml",
            mounts_in_resources,
            "spec.template.spec.template.spec.containers[0].resources.volumeMounts",
            "the kind's schema has it at spec.template.spec.template.spec.containers[0].volumeMounts",
        ),
        (
            "job.yaml",
            probe_field_in_container,
            "spec.template.spec.template.spec.containers[0].periodSeconds",
            "the kind's schema has it at spec.template.spec.template.spec.containers[0]"
            ".livenessProbe.periodSeconds or",
        ),
    ],
    ids=["pytorchjob-ttl", "job-backOffLimit", "volumeMounts-in-resources", "ambiguous"],
)
def test_a_misplaced_key_is_refused_with_where_it_belongs(
    file: str, edit: Any, path: str, hint: str
) -> None:
    pytest.importorskip("kubernetes_validate")  # the Job's schema
    reason = refusal(file, edit, path)
    assert reason.startswith(f"unknown key {path.rsplit('.', 1)[1]!r}; ")
    assert hint in reason, reason


def test_a_typo_keeps_its_did_you_mean() -> None:
    def typo(t: dict[str, Any]) -> None:
        t["spec"]["runPolicy"] = {"ttlSecondsAfterFinishd": 1}

    reason = refusal("pytorchjob.yaml", typo, "spec.template.spec.runPolicy.ttlSecondsAfterFinishd")
    assert reason.endswith("did you mean 'ttlSecondsAfterFinished'?")


# W&B's PyTorchJob example, in short: `ttlSecondsAfterFinished` at `spec`, `volumeMounts` in
# `resources`, `backOffLimit` in both pod templates.
PYTORCHJOB: dict[str, Any] = {
    "kubernetes": {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {
            "ttlSecondsAfterFinished": "{{ttl}}",
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": 1,
                    "template": {
                        "backOffLimit": 0,
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "${image_uri}",
                                    "resources": {
                                        "limits": {"cpu": "1"},
                                        "volumeMounts": [{"name": "d", "mountPath": "/d"}],
                                    },
                                }
                            ],
                            "volumes": [{"name": "d", "emptyDir": {}}],
                        },
                    },
                }
                for role in ("Master", "Worker")
            },
        },
    }
}
TTL = {"ttl": {"type": "integer", "default": 600}}
P = "spec.template.spec.pytorchReplicaSpecs"


def test_without_the_flag_nothing_moves_and_migrate_says_so() -> None:
    m = migrate("q", copy.deepcopy(PYTORCHJOB), TTL, namespace="ns")
    assert m.moves == ()
    assert any("--fix-misplaced" in d for d in m.decisions), m.decisions
    assert m.document["spec"]["template"] == {
        "kubernetes": {
            **PYTORCHJOB["kubernetes"],
            "spec": {**PYTORCHJOB["kubernetes"]["spec"], "ttlSecondsAfterFinished": 600},
        }
    }


def test_fix_misplaced_moves_each_key_with_one_free_place_and_lists_it() -> None:
    m = migrate("q", copy.deepcopy(PYTORCHJOB), TTL, namespace="ns", fix_misplaced_keys=True)
    assert m.moves == (
        (
            "spec.template.spec.ttlSecondsAfterFinished",
            "spec.template.spec.runPolicy.ttlSecondsAfterFinished",
        ),
        (f"{P}.Master.template.backOffLimit", "spec.template.spec.runPolicy.backoffLimit"),
        (
            f"{P}.Master.template.spec.containers[0].resources.volumeMounts",
            f"{P}.Master.template.spec.containers[0].volumeMounts",
        ),
        (
            f"{P}.Worker.template.spec.containers[0].resources.volumeMounts",
            f"{P}.Worker.template.spec.containers[0].volumeMounts",
        ),
    )
    # The Worker's backOffLimit has the same one place, which the Master's now holds.
    assert (
        f"{P}.Worker.template.backOffLimit was not moved: spec.template.spec.runPolicy"
        ".backoffLimit already holds a value" in m.decisions
    )
    text = m.text("test")
    assert "#   - moved spec.template.spec.ttlSecondsAfterFinished to" in text
    # The variable is granted where it landed.
    assert "spec.runPolicy.ttlSecondsAfterFinished" in m.document["spec"]["overridable"]
    spec = m.document["spec"]["template"]["kubernetes"]["spec"]
    assert spec["runPolicy"] == {"ttlSecondsAfterFinished": 600, "backoffLimit": 0}
    with pytest.raises(InvalidInput) as exc:
        load_queue_spec(text)
    assert [p.path for p in exc.value.problems] == [f"{P}.Worker.template.backOffLimit"]


def test_fix_misplaced_leaves_an_ambiguous_key() -> None:
    pytest.importorskip("kubernetes_validate")
    container = {"name": "main", "image": "x", "periodSeconds": 5}
    config = {"spec": {"template": {"spec": {"containers": [container]}}}}
    m = migrate("q", config, namespace="ns", fix_misplaced_keys=True)
    assert m.moves == ()
    (decision,) = [d for d in m.decisions if "was not moved" in d]
    assert "livenessProbe.periodSeconds" in decision and "startupProbe" in decision
