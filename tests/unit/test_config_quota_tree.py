"""`quota.tree` is checked (R1) when the configuration is loaded, each problem at its line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from launch_agent.cli import main
from launch_agent.commands.config_cmd import load_config
from launch_agent.model.config_resolve import ConfigError

TREE_HEAD = """\
entity: e
queues: [q]
quota:
  mode: {mode}
  tree:
    root:
      name: root
      min: {{cpu: 4}}
      max: {{cpu: 4}}
      children:
"""

CASES = [
    # (mode, children lines, expected problems as "LINE: path: reason")
    ("agent", "        - {name: a, min: {cpu: 2}, max: {cpu: 4}, queues: [q]}\n", []),
    (
        "agent",
        "        - {name: a, min: {cpu: 8}, max: {cpu: 4}, queues: [q]}\n",
        [
            "8: quota.tree.root.min.cpu: the children of 'root' guarantee 8 cpu in total, more"
            " than its own min 4",
            "11: quota.tree.root.children[0].min.cpu: min 8 is greater than max 4 on node 'a'",
        ],
    ),
    (
        # A tree is checked in every mode: switching to `agent` later must not surprise anyone.
        "'off'",
        "        - {name: a, min: {cpu: 1}, max: {cpu: 4}, queues: [q]}\n"
        "        - name: b\n"
        "          min: {cpu: 1}\n"
        "          max: {gpu: 1}\n"
        "          queues: [q2]\n",
        ["14: quota.tree.root.children[1].max.gpu: resource 'gpu' is not declared in the root's"],
    ),
]


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "launch-config.yaml"
    path.write_text(text)
    load_config(argparse.Namespace(config=str(path)), {})


@pytest.mark.parametrize(("mode", "children", "expected"), CASES)
def test_tree_problems_name_file_line_path_and_reason(
    tmp_path: Path, mode: str, children: str, expected: list[str]
) -> None:
    text = TREE_HEAD.format(mode=mode) + children
    if not expected:
        _load(tmp_path, text)
        return
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    prefix = f"{tmp_path / 'launch-config.yaml'}:"
    got = [str(p).removeprefix(prefix) for p in info.value.problems]
    assert len(got) == len(expected), got
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want), (line, want)


def test_agent_mode_without_a_tree_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "entity: e\nqueues: [q]\nquota:\n  mode: agent\n")
    (problem,) = info.value.problems
    assert str(problem) == (
        f"{tmp_path / 'launch-config.yaml'}:4: quota.tree: quota.mode is agent but no tree is set"
    )


def test_config_show_exits_2_on_a_bad_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "launch-config.yaml"
    path.write_text(
        TREE_HEAD.format(mode="agent")
        + "        - {name: a, min: {cpu: 8}, max: {cpu: 4}, queues: [q]}\n"
    )
    assert main(["config", "show", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}:11: quota.tree.root.children[0].min.cpu: min 8" in err
