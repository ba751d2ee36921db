"""`runtime/builds.py`, the pure part: a job's `wandb-job.json` + the run → what to build."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.adapters.builder import BuildFailed, BuildSpec
from launch_agent.model.build import SourceKind
from launch_agent.model.run_item import parse_run_item
from launch_agent.runtime.builds import (
    JobSpecError,
    base_image_for,
    build_failure_message,
    spec_for,
)

JOB = "ent/proj/train:latest"
SHA = "a" * 40


def run(**spec: Any) -> Any:
    body = {"entity": "ent", "project": "proj", "job": JOB, "run_id": "r1", **spec}
    return parse_run_item({"runQueueItemId": "rqi-1", "runSpec": body})


def repo(**source: Any) -> dict[str, Any]:
    base = {"git": {"remote": "https://git.example/ml.git", "commit": SHA},
            "entrypoint": ["python", "train.py"]}  # fmt: skip
    return {"source_type": "repo", "source": {**base, **source}, "runtime": "3.10"}


def artifact(**source: Any) -> dict[str, Any]:
    base = {"artifact": "wandb-artifact://ent/proj/code:v3", "entrypoint": ["python", "a.py"]}
    return {"source_type": "artifact", "source": {**base, **source}}


@pytest.mark.parametrize(
    ("info", "run_spec", "expected"),
    [
        pytest.param(
            repo(), {},
            BuildSpec("r1", SourceKind.GIT, "https://git.example/ml.git", SHA,
                      base_image="python:3.10-slim", entrypoint=("python", "train.py"),
                      run_queue_item="rqi-1"),
            id="git",
        ),
        pytest.param(
            repo(dockerfile="docker/Dockerfile", build_context="."),
            {"overrides": {"dockerfile": "Dockerfile.gpu", "entry_point": ["bash", "run.sh"]}},
            BuildSpec("r1", SourceKind.GIT, "https://git.example/ml.git", SHA,
                      dockerfile="docker/Dockerfile", override_dockerfile="Dockerfile.gpu",
                      base_image="python:3.10-slim", entrypoint=("bash", "run.sh"),
                      run_queue_item="rqi-1"),
            id="git-dockerfiles-and-entry-point-override",
        ),
        pytest.param(
            repo(), {"git": {"repo": "https://git.example/fork.git", "version": "dev"}},
            BuildSpec("r1", SourceKind.GIT, "https://git.example/fork.git", "dev",
                      base_image="python:3.10-slim", entrypoint=("python", "train.py"),
                      run_queue_item="rqi-1"),
            id="git-overridden-by-runSpec.git",
        ),
        pytest.param(
            artifact(), {},
            BuildSpec("r1", SourceKind.ARTIFACT, "wandb-artifact://ent/proj/code:v3",
                      base_image="python:3.11-slim", entrypoint=("python", "a.py"),
                      run_queue_item="rqi-1"),
            id="code-artifact",
        ),
        pytest.param(
            {"source_type": "image", "source": {"image": "reg.example/train:1"}}, {},
            BuildSpec("r1", SourceKind.IMAGE, "reg.example/train:1"),
            id="image-job",
        ),
    ],
)  # fmt: skip
def test_spec_for(info: dict[str, Any], run_spec: dict[str, Any], expected: BuildSpec) -> None:
    assert spec_for(run(**run_spec), info, JOB) == expected


def test_a_run_without_run_id_gets_the_derived_one() -> None:
    item = parse_run_item(
        {"runQueueItemId": "rqi-9", "runSpec": {"entity": "e", "project": "p", "job": JOB}}
    )
    spec = spec_for(item, repo(), JOB)
    assert spec.run_id and spec.run_id != "rqi-9"
    assert spec_for(item, repo(), JOB).run_id == spec.run_id  # deterministic


@pytest.mark.parametrize(
    ("info", "run_spec", "message"),
    [
        ({"source_type": "repo"}, {}, "has no `source` object"),
        ({"source_type": "repo", "source": {}}, {}, "source.git is missing"),
        ({"source_type": "repo", "source": {"git": {"commit": SHA}}}, {},
         "source.git.remote is missing"),
        ({"source_type": "artifact", "source": {}}, {}, "source.artifact is missing"),
        ({"source_type": "image", "source": {}}, {}, "source.image is missing"),
        ({"source_type": "notebook", "source": {}}, {},
         "source_type 'notebook' is not one of repo, artifact, image"),
        (repo(entrypoint="python train.py"), {}, "source.entrypoint: must be a list of strings"),
        (repo(dockerfile=3), {}, "source.dockerfile: must be a string, not int"),
        (repo(build_context="sub/"), {}, "source.build_context: 'sub' is not supported"),
        (repo(), {"git": {"version": "--upload-pack=id"}}, "runSpec.git.version: '--upload-pack=id'"),
        (repo(), {"git": {"repo": "/srv/x.git"}}, "runSpec.git.repo: '/srv/x.git' is a local path"),
        (repo(), {"git": "main"}, "runSpec.git: must be a mapping, not str"),
        (repo(), {"overrides": {"dockerfile": ["x"]}},
         "runSpec.overrides.dockerfile: must be a string, not list"),
        (repo(), {"git": {"version": 7}}, "runSpec.git.version: must be a string, not int"),
    ],
)  # fmt: skip
def test_what_cannot_be_built_is_named(
    info: dict[str, Any], run_spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(JobSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_for(run(**run_spec), info, JOB)


@pytest.mark.parametrize(
    ("runtime", "image"),
    [("3.12", "python:3.12-slim"), ("3.9.18", "python:3.9-slim"), (None, "python:3.11-slim"),
     ("cpython", "python:3.11-slim"), (3.1, "python:3.11-slim")],
)  # fmt: skip
def test_base_image_for(runtime: Any, image: str) -> None:
    assert base_image_for({"runtime": runtime}) == image


@pytest.mark.parametrize(
    ("failure", "advice"),
    [
        (BuildFailed("building x: Job k/j failed: BackoffLimitExceeded", "RUN pip: exit 1"),
         "check the job's Dockerfile and dependencies in the build log below"),
        (BuildFailed("preparing the build context: git fetch failed: not found"),
         "check the job's source"),
        (BuildFailed("building x: Job k/j was deleted"), "events in the Kaniko namespace"),
    ],
)  # fmt: skip
def test_build_failure_message(failure: BuildFailed, advice: str) -> None:
    text = build_failure_message(JOB, failure)
    assert text.startswith(f"building the image for job {JOB} failed: {failure.reason} (")
    assert advice in text
    assert ("--- build log (tail) ---" in text) == bool(failure.log_tail)


@given(reason=st.text(min_size=1, max_size=200), tail=st.text(max_size=2000))
def test_the_reason_and_the_whole_log_tail_are_always_in_the_message(
    reason: str, tail: str
) -> None:
    text = build_failure_message(JOB, BuildFailed(reason, tail))
    assert reason in text
    assert text.endswith(tail)
