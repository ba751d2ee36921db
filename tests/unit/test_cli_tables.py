"""Every command with `-o table`, fed hostile text wherever its input holds text: what reaches
the terminal (stdout and stderr) holds no control character but `\\n` and `\\t`, whatever the
command then says (a table, a refusal). `launch-agent status` reads a URL:
tests/integration/test_status_answers.py does the same for it over HTTP."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from launch_agent.cli import main
from tests.terminal import hostile_text, unsafe_characters
from tests.unit.quota.helpers import ack_tree, run, submit

ROOT = Path(__file__).resolve().parents[2]
JOB_SPEC = yaml.safe_load((ROOT / "queue-specs" / "job.yaml").read_text())
FIXTURE = ROOT / "tests" / "fixtures" / "upstream" / "job" / "exit-codes-compare-as-numbers.json"


def _write(directory: Path, name: str, data: Any) -> str:
    path = directory / name
    path.write_text(json.dumps(data))  # JSON is YAML: every loader of the CLI reads it
    return str(path)


def config_show(d: Path, text: str) -> list[str]:
    config = {"entity": text, "queues": [text, "q"], "agent_name": text, "max_jobs": 2}
    return ["config", "show", "-c", _write(d, "c.json", config), "-o", "table"]


def validate(d: Path, text: str) -> list[str]:
    spec = copy.deepcopy(JOB_SPEC)
    spec["metadata"]["name"] = text
    spec["spec"]["queues"] = [text]
    container = spec["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]
    container["name"] = text
    container["securityContext"] = {"capabilities": {"add": [text]}}
    spec["spec"]["overridable"].append(text)
    return ["validate", _write(d, "spec.json", spec), "-o", "table"]


def render(d: Path, text: str) -> list[str]:
    item = {
        "runQueueItemId": "UnVuUXVldWVJdGVtOjE=",
        "runSpec": {
            "entity": "ent",
            "project": "proj",
            "name": text,
            "docker": {"docker_image": "registry.example.com/x:1"},
            "resource_args": {"kubernetes": {"metadata": {"labels": {"a": text}}}},
            "overrides": {"args": [text]},
        },
    }
    spec = _write(d, "spec.json", JOB_SPEC)
    item_file = _write(d, "item.json", item)
    return ["render", "--spec", spec, "--item", item_file, "--queue", "gpu-job", "-o", "table"]


def quota_check(d: Path, text: str) -> list[str]:
    tree = ack_tree()
    tree["root"]["children"][0]["children"][0]["queues"] = [text]
    tree["root"]["children"][1]["name"] = text
    return ["quota", "check", "--tree", _write(d, "tree.json", tree), "-o", "table"]


def quota_simulate(d: Path, text: str) -> list[str]:
    events = [submit(run(text, "q1"), run("b", text)), {"advance": {"seconds": 5}}]
    return [
        "quota",
        "simulate",
        "--tree",
        _write(d, "tree.json", ack_tree()),
        "--events",
        _write(d, "events.json", events),
        "-o",
        "table",
    ]


def diagnose(d: Path, text: str) -> list[str]:
    # The termination message is what the submitter's code wrote to /dev/termination-log.
    dump = json.loads(FIXTURE.read_text())
    now = dump["_now"]
    for item in dump["items"]:
        if item["kind"] == "Pod":
            item["metadata"]["name"] = f"pod-{text}"
            for status in item["status"].get("containerStatuses", []):
                terminated = status.get("state", {}).get("terminated")
                if terminated is not None:
                    terminated["message"] = text
                    terminated["reason"] = text
    return ["diagnose", "-f", _write(d, "dump.json", dump), "--now", now, "-o", "table"]


def migrate(d: Path, text: str) -> list[str]:
    pod = {
        "serviceAccountName": text,
        "containers": [
            {
                "name": text,
                "image": "x",
                "securityContext": {"capabilities": {"add": [text]}},
                "envFrom": [{"secretRef": {"name": text}}],
            }
        ],
        "volumes": [{"name": text, "hostPath": {"path": f"/{text}"}}],
        "imagePullSecrets": [{"name": text}],
    }
    config = _write(d, "config.json", {"spec": {"template": {"spec": pod}}})
    variables = _write(d, "vars.json", {text: {"type": "string", "default": text}})
    argv = ["migrate", "--queue", "q", "--from-file", config, "--template-variables", variables]
    return [*argv, "--dry-run", "-o", "table"]


def version(d: Path, text: str) -> list[str]:
    return ["version", "-o", "table"]


COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "config show": config_show,
    "validate": validate,
    "render": render,
    "quota check": quota_check,
    "quota simulate": quota_simulate,
    "diagnose": diagnose,
    "migrate": migrate,
    "version": version,
}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", list(COMMANDS))
@settings(max_examples=40, deadline=None)
@given(text=hostile_text(min_size=1))
def test_no_control_character_but_newline_and_tab_gets_out(command: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err = run_cli(COMMANDS[command](Path(tmp), text))
    assert code in (0, 1, 2), (code, err)
    assert unsafe_characters(out) == [], out
    assert unsafe_characters(err) == [], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["diagnose", "validate"])
def test_an_osc_52_clipboard_write_is_shown_escaped(command: str, tmp_path: Path) -> None:
    code, out, err = run_cli(COMMANDS[command](tmp_path, "ok\x1b]52;c;aGFja2Vk\x07\u202e"))
    assert "\x1b" not in out + err and "\u202e" not in out + err
    assert "\\x1b]52;c;aGFja2Vk\\x07" in out + err, (code, out, err)
