"""`launch-agent quota simulate|check` and `launch-agent bench quota` through the real entry
point: output format, exit status 2 with `error: FILE: PATH: REASON` for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from tests.unit.quota.helpers import ack_tree, run, submit


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_simulate_prints_one_json_object_per_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = write(tmp_path, "tree.yaml", ack_tree())
    events = write(
        tmp_path,
        "events.yaml",
        [submit(run("z", "q1"), run("a", "q1")), {"advance": {"seconds": 5}}],
    )
    status, out, err = cli(capsys, "quota", "simulate", "--tree", tree, "--events", events)
    assert (status, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    assert list(lines[0]) == [
        "event",
        "running",
        "pending",
        "evicting",
        "inadmissible",
        "evicted",
        "usage",
    ]
    assert [line["event"] for line in lines] == [0, 1]
    assert lines[0]["running"] == ["a", "z"]  # sorted by name
    assert lines[0]["usage"]["a.1"] == {"cpu": "10"}
    assert lines[0]["usage"]["root.b"] == {"cpu": "0"}


def test_quantities_are_printed_in_kubernetes_notation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = ack_tree()
    tree["root"]["min"]["memory"] = tree["root"]["max"]["memory"] = "64Gi"
    tree_file = write(tmp_path, "tree.yaml", tree)
    pods = [{"count": 3, "requests": {"cpu": "500m", "memory": "512Mi"}}]
    events = write(tmp_path, "events.yaml", [submit({"run": "r", "queue": "q2", "pods": pods})])
    _, out, _ = cli(capsys, "quota", "simulate", "--tree", tree_file, "--events", events)
    assert json.loads(out)["usage"]["a.2"] == {"cpu": "1500m", "memory": "1536Mi"}


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (
            [
                {
                    "submit": {
                        "run": "r",
                        "queue": "nope",
                        "pods": [{"count": 1, "requests": {"cpu": 1}}],
                    }
                }
            ],
            "events.yaml: [0].submit.run: queue 'nope' is not mapped to a leaf (queues: q1, q2, q3, q4)",
        ),
        (
            [
                {
                    "submit": {
                        "run": "r",
                        "queue": "q1",
                        "pods": [{"count": 0, "requests": {"cpu": 1}}],
                    }
                }
            ],
            "events.yaml: [0].submit.pods[0].count: must be a whole number >= 1, got 0",
        ),
        (
            [
                {
                    "submit": {
                        "run": "r",
                        "queue": "q1",
                        "pods": [{"count": 1, "requests": {"cpu": "1 core"}}],
                    }
                }
            ],
            "events.yaml: [0].submit.pods[0].requests.cpu: unknown unit 'core'",
        ),
        (
            [{"submit": {"runs": [run("a", "q1"), {"run": "b", "queue": "q1"}]}}],
            "events.yaml: [0].submit.runs[1].pods: required",
        ),
        (
            [
                {
                    "submit": {
                        "run": "r",
                        "queue": "q1",
                        "pods": [{"count": 1, "requests": {"runs": 1}}],
                    }
                }
            ],
            "events.yaml: [0].submit.pods[0].requests.runs: runs is counted by the engine",
        ),
        (
            [{"finish": {"run": "ghost"}}],
            "events.yaml: [0].finish.run: no run named 'ghost' was submitted",
        ),
        (
            [submit(run("r", "q1")), {"terminated": {"run": "r"}}],
            "events.yaml: [1].terminated.run: run 'r' is ready, not evicting",
        ),
        (
            [submit(run("r", "q1")), submit(run("r", "q1"))],
            "events.yaml: [1].submit.run: run 'r' was already submitted",
        ),
        (
            [{"advance": {"seconds": -1}}],
            "events.yaml: [0].advance.seconds: time only moves forward",
        ),
        ([{"advance": {"minutes": 1}}], "events.yaml: [0].advance: expected {seconds: N}"),
        ([{"explode": {}}], "events.yaml: [0].explode: unknown event"),
        (
            [{"finish": {"run": "a"}, "ready": {"run": "a"}}],
            "events.yaml: [0]: each event is a mapping with exactly one of",
        ),
        ({"submit": {}}, "events.yaml: (document): must be a list of events"),
        ("- [unclosed", "events.yaml: line 1 column 12: invalid YAML: expected ',' or ']'"),
    ],
)
def test_bad_events_exit_2_with_file_path_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], events: Any, message: str
) -> None:
    tree = write(tmp_path, "tree.yaml", ack_tree())
    events_file = write(tmp_path, "events.yaml", events)
    status, out, err = cli(capsys, "quota", "simulate", "--tree", tree, "--events", events_file)
    assert status == 2
    assert out == ""
    assert f"error: {tmp_path}/{message}" in err, err


def test_every_problem_in_a_tree_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = ack_tree()
    tree["root"]["children"][0]["children"][0]["min"]["cpu"] = 30
    tree["root"]["children"][1]["children"][1]["queues"] = ["q1"]
    tree_file = write(tmp_path, "tree.yaml", tree)
    events = write(tmp_path, "events.yaml", [])
    status, out, err = cli(capsys, "quota", "simulate", "--tree", tree_file, "--events", events)
    assert (status, out) == (2, "")
    lines = err.splitlines()
    assert (
        f"error: {tree_file}: root.children[0].children[0].min.cpu: min 30 is greater than max 20 on node 'a.1'"
        in lines
    )
    assert any(
        line.startswith(f"error: {tree_file}: root.children[1].children[1].queues[0]:")
        for line in lines
    )


def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(capsys, "quota", "check", "--tree", str(tmp_path / "missing.yaml"))
    assert status == 2
    assert f"error: {tmp_path}/missing.yaml: (file): cannot read: No such file or directory" in err


def test_check_summarises_a_valid_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = write(tmp_path, "tree.yaml", ack_tree())
    status, out, _ = cli(capsys, "quota", "check", "--tree", tree)
    assert status == 0
    assert "valid: 7 nodes, 4 leaves" in out
    assert "  b.2: q4" in out


def test_help_explains_the_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["quota", "simulate", "--help"])
    out = capsys.readouterr().out
    for text in (
        "EVENTS.yaml",
        "instantTermination",
        "evicted",
        "advance: {seconds: 60}",
        "docs/quota.md",
    ):
        assert text in out


def test_simulate_as_a_process(tmp_path: Path) -> None:
    tree = write(tmp_path, "tree.yaml", ack_tree())
    events = write(tmp_path, "events.yaml", [submit(run("r", "q1"))])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch_agent",
            "quota",
            "simulate",
            "--tree",
            tree,
            "--events",
            events,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["running"] == ["r"]


def test_bench_quota_prints_numbers_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "bench.json"
    status, out, _ = cli(
        capsys,
        "bench",
        "quota",
        "--leaves",
        "20",
        "--runs",
        "200",
        "--churn",
        "20",
        "--json",
        str(out_file),
    )
    assert status == 0
    assert "decisions/s" in out and "p99" in out
    result = json.loads(out_file.read_text())
    assert result["leaves"] == 20
    assert set(result["phases"]) == {"borrow", "reclaim", "churn"}
    # The workload exercises both plain admissions and reclaim.
    assert result["phases"]["borrow"]["decisions"] > 0
    assert result["phases"]["reclaim"]["preemptions"] > 0
    assert result["decisions"] == sum(p["decisions"] for p in result["phases"].values())
    # Every fixpoint ends with one check that admits nothing, counted apart from decisions.
    assert "fixpoint checks" in out
    phases = result["phases"].values()
    assert result["fixpoint_checks"] == sum(p["fixpoint_checks"] for p in phases)
    assert (
        result["phases"]["churn"]["fixpoint_checks"] == result["phases"]["churn"]["finish_events"]
    )
    assert all(p["fixpoint_checks"] >= 1 for p in phases)
