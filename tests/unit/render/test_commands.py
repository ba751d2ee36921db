"""`launch-agent render`, `validate` and `bench render` through `launch_agent.cli.main`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch_agent.cli import main
from launch_agent.model.config import AgentConfig
from launch_agent.render.settings import RenderSettings

from .helpers import EXAMPLES, RQI

ITEM = {
    "runQueueItemId": RQI,
    "runSpec": {
        "entity": "ent",
        "project": "proj",
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example.com/img:1"},
        "overrides": {"args": ["--lr", "0.1"]},
    },
}


@pytest.fixture
def item_file(tmp_path: Path) -> Path:
    path = tmp_path / "item.json"
    path.write_text(json.dumps(ITEM))
    return path


def test_render_yaml(item_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["render", "--spec", str(EXAMPLES / "pytorchjob.yaml"), "--item", str(item_file)]) == 0
    )
    out = capsys.readouterr()
    (obj,) = yaml.safe_load_all(out.out)
    assert obj["kind"] == "PyTorchJob"
    assert obj["metadata"]["name"] == "pytorch-ddp-123456789"
    assert "&id" not in out.out  # no YAML anchors: kubectl users read this
    assert out.err == ""


def test_render_json_with_image_and_queue(
    item_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "render",
        "--spec",
        str(EXAMPLES / "job.yaml"),
        "--item",
        str(item_file),
        "-o",
        "json",
        "--image",
        "built.example.com/x:2",
        "--queue",
        "gpu-job",
    ]
    assert main(argv) == 0
    (obj,) = json.loads(capsys.readouterr().out)
    assert obj["spec"]["template"]["spec"]["containers"][0]["image"] == "built.example.com/x:2"


def test_render_forbidden_override_exits_2_with_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = json.loads(json.dumps(ITEM))
    bad["runSpec"]["overrides"]["entry_point"] = ["sh"]
    bad["runSpec"]["resource_args"] = {
        "kubernetes": {"spec": {"template": {"spec": {"hostNetwork": True}}}}
    }
    item = tmp_path / "bad.yaml"
    item.write_text(yaml.safe_dump(bad))
    assert main(["render", "--spec", str(EXAMPLES / "job.yaml"), "--item", str(item)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"error: {item}: runSpec.resource_args.kubernetes.spec.template.spec.hostNetwork: may not be overridden:"
        " queue spec 'gpu-job' lets submitters set only **.containers[*].resources, **.containers[*].env,"
        " overrides.args, overrides.run_config",
        f"error: {item}: runSpec.overrides.entry_point: may not be overridden: queue spec 'gpu-job' lets"
        " submitters set only **.containers[*].resources, **.containers[*].env, overrides.args, overrides.run_config",
    ]


def test_render_bad_spec_and_missing_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "apiVersion: launch-agent/v1\nkind: QueueSpec\nmetadata: {name: x}\nspec:\n  queues: [a\n"
    )
    assert main(["render", "--spec", str(spec), "--item", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {spec}: line 6, column 1: invalid YAML")
    assert (
        err[1] == f"error: {tmp_path / 'nope.json'}: (root): cannot read: No such file or directory"
    )


def test_validate_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(list(EXAMPLES.glob("*.yaml")))
    assert all(line.startswith("ok: ") for line in out)


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(EXAMPLES / "job.yaml", tmp_path / "a.yaml")
    shutil.copy(EXAMPLES / "job.yaml", tmp_path / "b.yaml")  # serves the same queue
    bad = yaml.safe_load((EXAMPLES / "jobset-gke.yaml").read_text())
    bad["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]["imagee"] = "x"
    bad["spec"]["kueue"] = {"queueName": "Not_Valid"}
    (tmp_path / "c.yml").write_text(yaml.safe_dump(bad))
    (tmp_path / "d.yaml").write_text(
        yaml.safe_dump(
            {**bad, "spec": {**bad["spec"], "kueue": {"queueName": "ok"}, "queues": ["other"]}}
        )
    )
    assert main(["validate", str(tmp_path), str(tmp_path / "missing.yaml")]) == 1
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert f"error: {tmp_path / 'missing.yaml'}: (root): no such file or directory" in err
    assert any(
        line.startswith(
            f"error: {tmp_path / 'b.yaml'}: spec.queues: queue 'gpu-job' is also served by"
        )
        for line in err
    )
    # Problems found at load carry `file:line:column`; the template is checked against the
    # JobSet CRD's schema there, before any render.
    assert any(
        re.match(
            rf"error: {re.escape(str(tmp_path / 'c.yml'))}:\d+:\d+: spec.kueue.queueName:", line
        )
        for line in err
    )
    assert any(
        re.match(rf"error: {re.escape(str(tmp_path / 'd.yaml'))}:\d+:\d+: spec.template\.", line)
        and "unknown key 'imagee'; did you mean 'image'?" in line
        for line in err
    )
    assert f"ok: {tmp_path / 'a.yaml'}" in captured.out


def test_bench_render_prints_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "bench.json"
    assert main(["bench", "render", "--seconds", "0.05", "--json", str(target)]) == 0
    assert "renders/s" in capsys.readouterr().out
    result = json.loads(target.read_text())
    assert result["workload"] == "PyTorchJob, 1 master + 8 workers"
    assert result["renders"] > 0


@pytest.mark.parametrize("command", ["render", "validate"])
def test_help_explains(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "error: <file>: <path>: <reason>" in out


def test_validate_says_how_to_install_the_validator_when_missing() -> None:
    # A fresh interpreter in which `import kubernetes_validate` fails, as without the extra.
    code = (
        "import sys; sys.modules['kubernetes_validate'] = None\n"
        "from launch_agent.cli import main\n"
        f"raise SystemExit(main(['validate', {str(EXAMPLES / 'job.yaml')!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2
    assert "pip install 'launch-agent[validate]'" in proc.stderr


def test_render_settings_from_agent_config() -> None:
    config = AgentConfig(agent_name="prod-agent", base_url="https://w.example.com/", entity="team")
    settings = RenderSettings.from_config(config, ttl_seconds_after_finished=60)
    assert (settings.agent_name, settings.base_url, settings.queue_entity) == (
        "prod-agent",
        "https://w.example.com",
        "team",
    )
    assert settings.ttl_seconds_after_finished == 60
    assert settings.backoff_limit == 0


def test_render_takes_names_from_the_agent_configuration(
    item_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "launch-config.yaml"
    config.write_text("agent_name: team-a\napi_key_secret: shared-key\nbase_url: http://wb.local\n")
    argv = ["render", "--spec", str(EXAMPLES / "job.yaml"), "--item", str(item_file)]
    assert main([*argv, "-c", str(config), "-o", "json"]) == 0
    job = json.loads(capsys.readouterr().out)[0]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "shared-key"
    assert env["WANDB_BASE_URL"]["value"] == "http://wb.local"
    assert job["metadata"]["labels"]["launch-agent.io/agent"] == "team-a"
    # A flag beats the file, as for every agent command.
    assert main([*argv, "-c", str(config), "-o", "json", "--agent-name", "team-b"]) == 0
    job = json.loads(capsys.readouterr().out)[0]
    assert job["metadata"]["labels"]["launch-agent.io/agent"] == "team-b"


def test_render_reports_a_bad_configuration(
    item_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "launch-config.yaml"
    config.write_text("agent_nam: x\n")
    argv = ["render", "--spec", str(EXAMPLES / "job.yaml"), "--item", str(item_file)]
    assert main([*argv, "-c", str(config)]) == 2
    assert (
        "agent_nam: unknown key 'agent_nam'; did you mean 'agent_name'?" in capsys.readouterr().err
    )
