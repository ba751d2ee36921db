"""The run's main container, as render records it, is the one the judgement blames first.

Render writes the main container of each pod template (the kind's primary container, e.g.
PyTorchJob's `pytorch`, else the first) and the run's image on the workload; the tracker and
`diagnose` read them back with `main_container_of`. Without them the judgement falls back to the
first container that is not a known sidecar, which blames a helper listed before the trainer.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import yaml

from launch_agent.model import labels as L
from launch_agent.render.pipeline import render
from launch_agent.render.settings import RenderSettings
from launch_agent.render.spec_load import build_queue_spec
from launch_agent.tracking import TrackingPolicy, assess, main_container_of
from launch_agent.tracking.pods import NO_MAIN
from tests.unit.render.helpers import EXAMPLES, make_item
from tests.unit.tracking.shapes import cond, container_status, job, pod

IMAGE = "ghcr.io/acme/train:1.2"


def _rendered_with_helper_first() -> dict[str, Any]:
    # PyTorchJob's primary container is `pytorch`; here a helper is listed before it.
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text())
    for replica in data["spec"]["template"]["kubernetes"]["spec"]["pytorchReplicaSpecs"].values():
        containers = replica["template"]["spec"]["containers"]
        containers.insert(0, {"name": "metrics-exporter", "image": "exporter:1"})
    spec = build_queue_spec(data)[0]
    out = render(spec, make_item(None), IMAGE, RenderSettings())
    return out.workload


def test_render_records_the_main_container_and_image_and_they_read_back() -> None:
    workload = _rendered_with_helper_first()
    annotations = workload["metadata"]["annotations"]
    assert annotations[L.MAIN_CONTAINERS] == "pytorch"
    assert annotations[L.RUN_IMAGE] == IMAGE
    main = main_container_of(workload)
    assert main.names == frozenset({"pytorch"}) and main.image == IMAGE
    assert main_container_of({"metadata": {"name": "other"}}) is NO_MAIN


def test_the_recorded_main_container_is_blamed_before_a_helper_listed_first() -> None:
    rendered = _rendered_with_helper_first()
    failed = job(cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the limit"))
    failed["metadata"]["annotations"] = rendered["metadata"]["annotations"]
    p = pod(
        "run-abc-x7k2p",
        "Failed",
        container_status("metrics-exporter", "exporter:1", terminated=("Error", 2)),
        container_status("pytorch", IMAGE, terminated=("Error", 1)),
    )
    # The pod lists the helper first, as its template does.
    p["spec"]["containers"] = [
        {"name": "metrics-exporter", "image": "exporter:1"},
        {"name": "pytorch", "image": IMAGE},
    ]
    now = datetime.now(UTC)
    recorded = assess(failed, [p], now, TrackingPolicy(), main=main_container_of(failed))
    assert recorded.diagnosis is not None
    assert recorded.diagnosis.container == "pytorch"
    assert "exited with code 1" in recorded.diagnosis.message
    # Without the record the first container that is not a known sidecar is taken as main.
    bare = copy.deepcopy(failed)
    bare["metadata"].pop("annotations")
    guessed = assess(bare, [p], now, TrackingPolicy(), main=main_container_of(bare))
    assert guessed.diagnosis is not None and guessed.diagnosis.container == "metrics-exporter"
