"""CLI conventions: `-o json|yaml|table` wherever a command prints data, `-` for stdin."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from tests.unit.quota.helpers import ack_tree, run, submit
from tests.unit.render.test_commands import ITEM

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "queue-specs"


def cli(
    capsys: pytest.CaptureFixture[str], *argv: str, stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8"))
            code = main(list(argv))
    else:
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def header(out: str) -> list[str]:
    return out.splitlines()[0].split()


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    (tmp_path / "c.yaml").write_text("queues: [gpu-job]\n")
    item = tmp_path / "item.json"
    item.write_text(json.dumps(ITEM))
    tree = tmp_path / "tree.yaml"
    tree.write_text(yaml.safe_dump(ack_tree()))
    events = tmp_path / "events.yaml"
    events.write_text(yaml.safe_dump([submit(run("a", "q1"))]))
    return {"item": item, "tree": tree, "events": events, "config": tmp_path / "c.yaml"}


@pytest.mark.parametrize(
    ("argv", "columns"),
    [
        (["version"], ["VERSION", "PYTHON"]),
        (["config", "show"], ["KEY", "VALUE", "SOURCE"]),
        (["validate", str(EXAMPLES / "job.yaml")], ["FILE", "OK", "SUMMARY", "PROBLEMS"]),
        (
            ["render", "--spec", str(EXAMPLES / "job.yaml"), "--item", "{item}"],
            ["KIND", "NAME", "NAMESPACE"],
        ),
        (["quota", "check", "--tree", "{tree}"], ["LEAF", "QUEUES"]),
        (
            ["quota", "simulate", "--tree", "{tree}", "--events", "{events}"],
            ["EVENT", "RUNNING", "PENDING", "EVICTING", "INADMISSIBLE", "EVICTED"],
        ),
    ],
)
def test_table_output(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], columns: list[str]
) -> None:
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    code, out, err = cli(capsys, *argv, "-o", "table")
    assert code == 0, err
    assert header(out) == columns
    assert len(out.splitlines()) >= 2


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_quota_structured_output(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    code, out, err = cli(capsys, "quota", "check", "--tree", str(files["tree"]), "-o", fmt)
    assert code == 0, err
    data: Any = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert data["nodes"] > 0 and {"leaf": "a.1", "queues": ["q1"]} in data["leaves"]
    code, out, err = cli(
        capsys,
        "quota",
        "simulate",
        "--tree",
        str(files["tree"]),
        "--events",
        str(files["events"]),
        "-o",
        fmt,
    )
    assert code == 0, err
    reports = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert [r["event"] for r in reports] == [0]


def test_render_reads_the_spec_or_the_item_from_stdin(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = (EXAMPLES / "job.yaml").read_text()
    code, out, err = cli(
        capsys, "render", "--spec", "-", "--item", str(files["item"]), "-o", "json", stdin=spec
    )
    assert code == 0, err
    assert json.loads(out)[0]["kind"] == "Job"
    item = json.dumps(ITEM)
    code, out, err = cli(
        capsys, "render", "--spec", str(EXAMPLES / "job.yaml"), "--item", "-", stdin=item
    )
    assert code == 0, err
    bad = spec.replace("  overridable:", "  overridabel:")
    code, out, err = cli(capsys, "render", "--spec", "-", "--item", str(files["item"]), stdin=bad)
    assert code == 2
    assert "error: <stdin>:" in err and "did you mean 'overridable'?" in err
    code, out, err = cli(capsys, "render", "--spec", "-", "--item", "-", stdin=spec)
    assert code == 2 and "cannot both be `-`" in err


def test_quota_reads_a_file_from_stdin(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree = files["tree"].read_text()
    code, out, err = cli(capsys, "quota", "check", "--tree", "-", stdin=tree)
    assert code == 0, err
    assert out.startswith("<stdin>: valid:")
    code, out, err = cli(
        capsys, "quota", "simulate", "--tree", "-", "--events", str(files["events"]), stdin=tree
    )
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["event"] == 0
    code, out, err = cli(capsys, "quota", "check", "--tree", "-", stdin="root: [\n")
    assert code == 2 and err.startswith("error: <stdin>: line")
