"""The hostile build-source corpus: every case through the checks the agent's build path uses.

Each `build_sources/NNN-*.yaml` case names one submitter value of the build path and what must
happen to it (see `build_sources/README.md` for the `input:` shapes). The runner calls the real
functions, never a copy: `check_ref` / `check_git_url` (what `spec_for` and `fetch_git` call),
`spec_for` on a parsed run queue item (what `BuildService` calls), `artifact_problems` (what
`fetch_artifact` checks before any download), `choose_dockerfile` on a real tree, and
`kaniko_job` (the build Job manifest).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from launch_agent.adapters.build_context import ContextError, artifact_problems, choose_dockerfile
from launch_agent.model.build import BuildRequest, BuildSource, SourceKind, parse_destination
from launch_agent.model.build_source import DEFAULT_SCHEMES, SourceError, check_git_url, check_ref
from launch_agent.model.config import BuilderConfig
from launch_agent.model.run_item import parse_run_item
from launch_agent.render.kaniko import KanikoSettings, kaniko_job
from launch_agent.runtime.builds import JobSpecError, spec_for

CASES = sorted((Path(__file__).parent / "build_sources").glob("[0-9][0-9][0-9]-*.yaml"))
DESTINATION = "registry.example.com/ml/train"
CONTEXT = "s3://contexts/ctx/0123.tgz"


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(case) == {"description", "input", "expect"}, path.name
    assert isinstance(case["description"], str) and case["description"], path.name
    return case


def run_case(inp: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The agent's function for this kind of input; what came out (raises on refusal)."""
    kind = inp["kind"]
    allowed = inp.get("allowed", DEFAULT_SCHEMES)
    if kind == "ref":
        return {"value": check_ref(inp["value"], inp["where"])}
    if kind == "url":
        url = check_git_url(inp["value"], inp["where"], allowed)
        return {"url": url.url, "scheme": url.scheme}
    if kind == "job":
        run_spec = {"entity": "ent", "project": "proj", "resource": "kubernetes"}
        run_spec.update({"job": inp["job"], **inp["run_spec"]})
        run = parse_run_item({"runQueueItemId": "item-1", "runSpec": run_spec})
        spec = spec_for(run, inp["wandb_job"], inp["job"], allowed)
        return {
            "source": str(spec.source),
            "uri": spec.uri,
            "ref": spec.ref,
            "dockerfile": spec.dockerfile,
            "override_dockerfile": spec.override_dockerfile,
            "base_image": spec.base_image,
            "entrypoint": list(spec.entrypoint),
        }
    if kind == "code_artifact":
        entries = {
            name: SimpleNamespace(size=meta.get("size"), ref=meta.get("ref"))
            for name, meta in inp["files"].items()
        }
        problems = artifact_problems(inp["name"], entries)
        if problems:
            raise ContextError("; ".join(problems))
        return {"problems": problems}
    if kind == "dockerfile":
        root = tmp_path / "src"
        for base, files in (
            (root, inp.get("tree", {})),
            (tmp_path / "outside", inp.get("outside", {})),
        ):
            for rel, content in files.items():
                path = base / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, dict):
                    path.symlink_to(content["symlink"])
                else:
                    path.write_text(content)
        root.mkdir(exist_ok=True)
        text = choose_dockerfile(
            root,
            override=inp.get("override"),
            job_dockerfile=inp.get("job_dockerfile"),
            base_image=inp.get("base_image"),
            entrypoint=inp.get("entrypoint"),
        )
        return {"text": text}
    if kind == "kaniko":
        request = BuildRequest(
            inp.get("run_id", "run-1"),
            BuildSource(SourceKind.GIT, "https://github.com/o/r", "0" * 40),
            inp.get("dockerfile", "FROM python:3.11-slim\n"),
            DESTINATION,
            build_args=tuple((k, v) for k, v in inp.get("build_args", [])),
        )
        builder = BuilderConfig.model_validate({"type": "kaniko"})
        job = kaniko_job(
            request, parse_destination(DESTINATION), CONTEXT, KanikoSettings(builder, "kaniko")
        )
        return {"job": job, "image": request.image}
    raise AssertionError(f"unknown input kind {kind!r}")


def check_safe(inp: dict[str, Any], got: dict[str, Any], safe: dict[str, Any]) -> None:
    kind = inp["kind"]
    if kind == "dockerfile":
        text = got["text"]
        assert safe["contains"] in text, text
        if "lines" in safe:
            # One Dockerfile instruction per line: a submitter's value never adds one.
            assert len(text.splitlines()) == safe["lines"], text
        return
    if kind == "kaniko":
        job = got["job"]
        container = job["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        for arg in safe.get("args_contain", []):
            assert arg in args, args
        if safe.get("one_destination"):
            destinations = [a for a in args if a.startswith("--destination=")]
            assert destinations == [f"--destination={got['image']}"], args
            assert re.fullmatch(rf"{re.escape(DESTINATION)}:[0-9a-f]{{20}}", got["image"])
            assert [a for a in args if a.startswith("--context=")] == [f"--context={CONTEXT}"]
            assert [a for a in args if a.startswith("--dockerfile=")] == ["--dockerfile=Dockerfile"]
            assert re.fullmatch(r"[a-z0-9-]{1,63}", job["metadata"]["name"])
        if "no_label_value" in safe:
            text = json.dumps([job["metadata"]["labels"], job["metadata"]["name"]])
            assert safe["no_label_value"] not in text
        return
    for key, value in safe.items():
        assert got[key] == value, (key, got)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_build_source_case(path: Path, tmp_path: Path) -> None:
    case = load(path)
    inp, expect = case["input"], case["expect"]
    if "error" in expect:
        with pytest.raises((SourceError, JobSpecError, ContextError)) as caught:
            run_case(inp, tmp_path)
        message = str(caught.value)
        if inp["kind"] == "job":
            message = f"cannot build this run: {message}"  # what BuildService reports
        for text in expect["error"]:
            assert text in message, (text, message)
        for text in expect.get("not_in_error", []):
            assert text not in message, (text, message)
    else:
        check_safe(inp, run_case(inp, tmp_path), expect["safe"])


def test_the_corpus_is_big_enough_and_numbered_once() -> None:
    assert len(CASES) >= 50
    numbers = [p.name[:3] for p in CASES]
    assert len(numbers) == len(set(numbers))
