"""The red-team audit: every value a submitter controls in a run queue item, to every sink.

Each case (`audit-items/NNN-name.yaml`, format in that directory's README) is rendered through
`launch-agent render` in process, from temporary files, against one of the example queue specs
in `queue-specs/` (by default granting `**`, the widest a queue admin can). A refused case must
exit 2, name the runSpec path and the reason, and keep the error short (a 1 MB value is not
echoed back to W&B or the log). An accepted case must render to objects the API server would
store: every name, label and annotation valid and within budget by the sandbox's copy of
kube-apiserver's validation (`launch_agent/sandbox/kube/objectmeta.py`, which imports nothing
it tests), the object under etcd's 1.5 MiB, and no container able to read the API key outside
`WANDB_API_KEY` once the kubelet has expanded its env, command and args
(`tests/kubelet_expansion.py`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from launch_agent.sandbox.kube.objectmeta import validate_meta
from tests.kubelet_expansion import container_view

HERE = Path(__file__).parent / "audit-items"
SPECS = Path(__file__).resolve().parents[2] / "queue-specs"
CASES = sorted(p for p in HERE.glob("[0-9][0-9][0-9]-*.yaml") if ".input." not in p.name)
SECRET = "wandb-api-key-audit"
KEY = "sk-audit-THE-API-KEY"
CONFIG = f"agent_name: audit-agent\napi_key_secret: {SECRET}\nbase_url: http://wandb.test\n"
ETCD_MAX_REQUEST_BYTES = 1024 * 1024 * 3 // 2  # etcd embed/config.go DefaultMaxRequestBytes
MAX_ERROR_CHARS = 4000  # a refusal says what and where; it does not echo a 1 MB value
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
CASE_KEYS = {"description", "input", "input_file", "expect"}


def expand(value: Any) -> Any:
    """The case's value with `{repeat: R, times: N}` made into what it stands for: R repeated
    N times if R is a string or a list, else a list of N copies of R. Huge inputs without huge
    files."""
    if isinstance(value, dict):
        if set(value) == {"repeat", "times"}:
            item, times = value["repeat"], int(value["times"])
            if isinstance(item, str | list):
                return copy.deepcopy(item * times)  # a string, or the list's items repeated
            return [copy.deepcopy(item) for _ in range(times)]
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def queue_spec(case_input: dict[str, Any]) -> dict[str, Any]:
    spec = case_input.get("spec", "job")
    if isinstance(spec, dict):
        return spec
    raw: dict[str, Any] = yaml.safe_load((SPECS / f"{spec}.yaml").read_text())
    raw["spec"]["overridable"] = case_input.get("overridable", ["**"])
    return raw


def _metadata(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict):
            found.append((path, node["metadata"]))
        for key, value in node.items():
            found += _metadata(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _metadata(value, f"{path}[{i}]")
    return found


def _containers(node: Any) -> list[dict[str, Any]]:
    """Every container of every pod spec, found by shape (not by the product's kind table)."""
    found = []
    if isinstance(node, dict):
        for key in CONTAINER_LISTS:
            if isinstance(node.get(key), list):
                found += [c for c in node[key] if isinstance(c, dict) and "name" in c]
        for value in node.values():
            found += _containers(value)
    elif isinstance(node, list):
        for value in node:
            found += _containers(value)
    return found


def _run(
    path: Path, case: dict[str, Any], tmp: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    spec, config = tmp / "spec.yaml", tmp / "launch-config.yaml"
    case_input = case.get("input") or {}
    spec.write_text(yaml.safe_dump(queue_spec(case_input), sort_keys=False))
    config.write_text(CONFIG)
    if "input_file" in case:
        item = path.parent / str(case["input_file"])
    else:
        item = tmp / "item.json"
        item.write_text(json.dumps(expand(case_input["item"])))
    argv = ["render", "--spec", str(spec), "--item", str(item), "-c", str(config), "-o", "json"]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _main_env(obj: dict[str, Any]) -> dict[str, str]:
    """The kubelet's view of the env of the first container that has the W&B variables."""
    secrets = {(SECRET, "password"): KEY}
    for c in _containers(obj):
        env: dict[str, str] = container_view(c, secrets)["env"]
        if "WANDB_RUN_ID" in env:
            return env
    return {}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_audit_case(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(case) <= CASE_KEYS and {"description", "expect"} <= set(case), path.name
    code, out, err = _run(path, case, tmp_path, capsys)
    expect = case["expect"]
    if "error" in expect:
        assert code == 2, f"expected a refusal, got exit {code}:\n{out[:2000]}"
        assert err.startswith("error: "), err[:2000]
        for text in expect["error"]:
            assert text in err, f"{text!r} not in:\n{err[:4000]}"
        assert len(err) <= MAX_ERROR_CHARS, f"{len(err):,}-character error:\n{err[:2000]}"
        return
    assert code == 0, err[:4000]
    (obj,) = json.loads(out)
    safe = expect["safe"] or {}
    assert obj["kind"] == safe.get("kind", "Job")
    # What the API server would say about it, by the sandbox's copy of its validation.
    causes = []
    for where, meta in _metadata(obj):
        causes += [(where, *c) for c in validate_meta(obj["kind"], meta, check_name=not where)]
    assert causes == []
    size = len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= ETCD_MAX_REQUEST_BYTES, size
    secrets = {(SECRET, "password"): KEY}
    for c in _containers(obj):
        view = container_view(c, secrets)
        leaked = [n for n, v in view["env"].items() if KEY in v and n != "WANDB_API_KEY"]
        leaked += [a for a in view["command"] + view["args"] if KEY in a]
        assert leaked == [], f"{c['name']}: {leaked}"
    env = _main_env(obj)
    for name, value in (safe.get("env") or {}).items():
        assert env.get(name) == value, (name, env.get(name))
    labels = obj["metadata"].get("labels") or {}
    for key, value in (safe.get("labels") or {}).items():
        assert labels.get(key) == value, (key, labels.get(key))
    for key in safe.get("labels_absent", ()):
        assert key not in labels, (key, labels[key])
    annotations = obj["metadata"].get("annotations") or {}
    for key, value in (safe.get("annotations") or {}).items():
        assert annotations.get(key) == value, (key, annotations.get(key))
    text = json.dumps(obj)
    for fragment in safe.get("absent_text", ()):
        assert fragment not in text, fragment
