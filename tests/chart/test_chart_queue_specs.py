"""Queue specs shipped through the chart load with the agent's own queue-spec loader.

Two sources: the inline specs of the CI values files, and every example spec in `queue-specs/`
passed to the chart the way an admin would (as strings, so comments survive). The chart's own
render-time check (the spec's kind must be enabled in `workloads`) is held to the loader's idea
of the kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launch_agent.render.spec_load import load_queue_spec
from tests.chart.helm import CI_VALUES, ROOT, Helm, HelmError, Manifest, find, one

EXAMPLES = sorted((ROOT / "queue-specs").glob("*.yaml"))
# The chart's workloads toggle for each (apiVersion group, kind) the loader reports.
TOGGLES = {
    ("batch", "Job"): "job",
    ("jobset.x-k8s.io", "JobSet"): "jobset",
    ("kubeflow.org", "PyTorchJob"): "pytorchjob",
    ("trainer.kubeflow.org", "TrainJob"): "trainjob",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkerset",
    ("ray.io", "RayJob"): "rayjob",
    ("batch.volcano.sh", "Job"): "volcanojob",
}


def mounted_specs(manifests: list[Manifest]) -> dict[str, str]:
    """File name -> text of the ConfigMap the Deployment mounts as the queue-specs directory."""
    volumes = one(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"]
    name = next(v["configMap"]["name"] for v in volumes if v["name"] == "queue-specs")
    config_map = next(m for m in find(manifests, "ConfigMap") if m["metadata"]["name"] == name)
    return dict(config_map.get("data") or {})


def toggle_of(text: str) -> str:
    spec, _warnings = load_queue_spec(text)
    group = spec.api_version.split("/")[0] if "/" in spec.api_version else ""
    return TOGGLES[(group, spec.kind)]


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_ci_queue_specs_load_with_the_agent_loader(
    rendered: dict[str, list[Manifest]], values: Path
) -> None:
    data = yaml.safe_load(values.read_text())
    given = data.get("queueSpecs") or {}
    specs = mounted_specs(rendered[values.name])
    assert set(specs) == set(given)
    # The chart's default is `workloads.job: true`; a values file may change any toggle.
    toggles = {"job": True, **(data.get("workloads") or {})}
    enabled = {key for key, on in toggles.items() if on}
    for name, text in specs.items():
        assert toggle_of(text) in enabled, f"{name}: its kind is not enabled, yet it rendered"


@pytest.fixture(scope="module")
def example_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A values file carrying every example queue spec, with every kind and namespace enabled."""
    assert EXAMPLES, "queue-specs/ holds the example specs"
    namespaces = sorted({yaml.safe_load(p.read_text())["spec"]["namespace"] for p in EXAMPLES})
    values = {
        "agent": {"apiKey": "k" * 40},
        "additionalTargetNamespaces": namespaces,
        "workloads": dict.fromkeys(TOGGLES.values(), True),
        "queueSpecs": {p.name: p.read_text() for p in EXAMPLES},
    }
    path = tmp_path_factory.mktemp("values") / "examples.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_example_specs_render_verbatim_and_load(helm: Helm, example_values: Path) -> None:
    specs = mounted_specs(helm.template([example_values]))
    assert set(specs) == {p.name for p in EXAMPLES}
    for path in EXAMPLES:
        assert specs[path.name] == path.read_text(), f"{path.name} changed on the way"
        load_queue_spec(specs[path.name])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_a_spec_needs_its_kind_enabled(helm: Helm, example_values: Path, example: Path) -> None:
    toggle = toggle_of(example.read_text())
    with pytest.raises(HelmError, match=f"needs workloads.{toggle}: true"):
        helm.template([example_values], {f"workloads.{toggle}": False})


def test_a_configured_queue_without_an_inline_spec_fails_the_render(
    helm: Helm, tmp_path: Path
) -> None:
    job = (ROOT / "queue-specs" / "job.yaml").read_text()
    values = {
        "agent": {"apiKey": "k" * 40},
        "launchConfig": "queues: [gpu-job, cpu, gpus]\nqueue: single\n",
        "queueSpecs": {"job.yaml": job},
        "additionalTargetNamespaces": [yaml.safe_load(job)["spec"]["namespace"]],
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    with pytest.raises(HelmError) as caught:
        helm.template([path])
    message = str(caught.value)
    assert "no inline queue spec serves queue(s)" in message, message
    assert '"cpu", "gpus", "single"' in message, message
    assert "launch-agent migrate" in message, message
    # Served (here as a mapping, not a string), it renders.
    served = yaml.safe_load(job)
    served["spec"]["queues"] = ["gpu-job", "cpu", "gpus", "single"]
    values["queueSpecs"] = {"job.yaml": served}
    path.write_text(yaml.safe_dump(values))
    assert mounted_specs(helm.template([path])) != {}
