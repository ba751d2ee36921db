"""`launch-agent migrate` reads queue configs from W&B (the sandbox, over HTTP, with the
documents wandb's public API sends) or from a pasted file, and writes specs `validate` accepts."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from launch_agent.cli import main
from launch_agent.sandbox.wandb import WandbServer

CONFIG: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {
        "kubernetes": {
            "namespace": "ml",
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "${image_uri}",
                                "resources": {"limits": {"cpu": "{{cpus}}"}},
                            }
                        ]
                    }
                }
            },
        }
    },
}


@pytest.fixture
def wandb_env(server: WandbServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("WANDB_API_KEY", server.api_key)
    monkeypatch.setenv("WANDB_ENTITY", "ent")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("queues: []\n")


async def test_migrate_reads_the_queue_config_from_wandb(
    server: WandbServer, wandb_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.state.add_queue(
        "cpu", config=CONFIG, template_variables={"cpus": {"type": "string", "default": "2"}}
    )
    out = tmp_path / "specs"
    code = await asyncio.to_thread(main, ["migrate", "--queue", "cpu", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "queue 'cpu' -> " in err and ": ok, Job (batch/v1)" in err
    # The two documents wandb's RunQueue.default_resource_config sends, in that order.
    assert server.log.count("GetRunQueueMetadata") == 1
    assert server.log.count("GetDefaultResourceConfig") == 1
    assert await asyncio.to_thread(main, ["validate", str(out / "cpu.yaml")]) == 0
    text = (out / "cpu.yaml").read_text()
    assert "spec.template.spec.containers[main].resources.limits.cpu" in text
    assert "namespace: ml" in text


async def test_migrate_refuses_a_queue_without_config(
    server: WandbServer, wandb_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await asyncio.to_thread(main, ["migrate", "--queue", "q1", "--dry-run"])
    assert code == 2
    assert "queue 'q1' has no config in W&B" in capsys.readouterr().err


async def test_migrate_names_a_missing_queue(
    server: WandbServer, wandb_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await asyncio.to_thread(main, ["migrate", "--queue", "nope", "--dry-run"])
    assert code == 2
    assert "no run queue 'nope'" in capsys.readouterr().err


def test_migrate_from_stdin_json_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = dict(CONFIG["resource_args"]["kubernetes"])
    pasted["spec"] = json.loads(json.dumps(pasted["spec"]).replace("{{cpus}}", "1"))
    pasted["spec"]["template"]["spec"]["hostIPC"] = True
    # A real stdin: the bounded reader reads its bytes (`sys.stdin.buffer`).
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(pasted).encode()), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    code = main(["migrate", "--from-file", "-", "--dry-run", "-o", "json"])
    records = json.loads(capsys.readouterr().out)
    assert code == 1  # hostIPC needs a decision
    (record,) = records
    assert record["queue"] == "q" and record["ok"] is False
    assert [r["grant"] for r in record["review"]] == ["hostIPC: true"]
    assert any("hostIPC" in p["path"] for p in record["problems"])
    assert "# security:" in record["text"]


def test_migrate_does_not_overwrite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = tmp_path / "pasted.json"
    pasted.write_text(json.dumps({"spec": {"template": {"spec": {"containers": [{"name": "m"}]}}}}))
    out = tmp_path / "out"
    assert main(["migrate", "--from-file", str(pasted), "--out", str(out)]) == 0
    assert main(["migrate", "--from-file", str(pasted), "--out", str(out)]) == 2
    assert "would overwrite" in capsys.readouterr().err
    assert main(["migrate", "--from-file", str(pasted), "--out", str(out), "--force"]) == 0


def test_migrate_from_a_file_with_template_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = tmp_path / "pasted.json"
    pasted.write_text(json.dumps(CONFIG["resource_args"]["kubernetes"]))
    variables = tmp_path / "vars.yaml"
    variables.write_text("cpus: {type: string, default: '4'}\n")
    argv = ["migrate", "--from-file", str(pasted), "--dry-run", "-o", "json"]
    assert main([*argv, "--template-variables", str(variables)]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    container = record["spec"]["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == "4"
    assert (
        main(["migrate", "--queue", "q", "--dry-run", "--template-variables", str(variables)]) == 2
    )
    assert "goes with --from-file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        # W&B's API: a list of {name, schema}, the schema as JSON text
        '- name: cpus\n  schema: \'{"type": "string", "default": "4"}\'\n',
        # the Terraform provider's map of name -> {name, schema}
        "cpus:\n  name: cpus\n  schema: {type: string, default: '4'}\n",
    ],
    ids=["wandb-api-list", "terraform-map"],
)
def test_migrate_reads_template_variables_in_wandbs_shapes(
    text: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = tmp_path / "pasted.json"
    pasted.write_text(json.dumps(CONFIG["resource_args"]["kubernetes"]))
    variables = tmp_path / "vars.yaml"
    variables.write_text(text)
    argv = ["migrate", "--from-file", str(pasted), "--dry-run", "-o", "json"]
    assert main([*argv, "--template-variables", str(variables)]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert not any("not used" in d for d in record["decisions"]), record["decisions"]
    container = record["spec"]["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == "4"


def test_migrate_names_the_line_of_a_bad_template_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = tmp_path / "pasted.json"
    pasted.write_text(json.dumps(CONFIG["resource_args"]["kubernetes"]))
    variables = tmp_path / "vars.yaml"
    variables.write_text("- name: cpus\n  schema: {type: string}\n- name: gpus\n  schema: '{'\n")
    argv = ["migrate", "--from-file", str(pasted), "--dry-run"]
    assert main([*argv, "--template-variables", str(variables)]) == 2
    err = capsys.readouterr().err
    assert f"{variables}:4:3: [1].schema: is not a JSON schema: not JSON" in err, err


def test_migrate_fix_misplaced_lists_each_move(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    monkeypatch.setenv("LAUNCH_AGENT_CONFIG", str(tmp_path / "c.yaml"))
    pasted = tmp_path / "pasted.yaml"
    # W&B's PyTorchJob example's `ttlSecondsAfterFinished`, at `spec` (the CRD: `runPolicy`).
    pasted.write_text(
        "kubernetes:\n  apiVersion: kubeflow.org/v1\n  kind: PyTorchJob\n  spec:\n"
        "    ttlSecondsAfterFinished: 600\n    pytorchReplicaSpecs:\n      Master:\n"
        "        replicas: 1\n        template:\n          spec:\n            containers:\n"
        "              - {name: pytorch, image: '${image_uri}'}\n"
    )
    argv = ["migrate", "--from-file", str(pasted), "--namespace", "ns", "--dry-run"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "spec.runPolicy.ttlSecondsAfterFinished" in err and "--fix-misplaced" in err, err
    assert main([*argv, "--fix-misplaced"]) == 0
    captured = capsys.readouterr()
    assert (
        "  moved: spec.template.spec.ttlSecondsAfterFinished ->"
        " spec.template.spec.runPolicy.ttlSecondsAfterFinished (review)" in captured.err
    ), captured.err
    assert "runPolicy:\n          ttlSecondsAfterFinished: 600" in captured.out, captured.out
