"""The `launch-agent` command: --help, --version and `config show` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch_agent import __version__
from launch_agent.cli import main

KEY = "0123456789abcdef0123456789abcdef01234567"


ROOT = Path(__file__).resolve().parents[2]


def _cli(
    *args: str, env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launch_agent", *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(ROOT), **env},
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"launch-agent {__version__}"


def test_help_explains_precedence_and_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "W&B Launch" in out
    assert "config" in out
    assert "precedence" in out


def test_config_show_prints_values_sources_and_redacts_the_key(tmp_path: Path) -> None:
    (tmp_path / "launch-config.yaml").write_text("queues: [q1]\nentity: team\nmax_jobs: 4\n")
    result = _cli(
        "config",
        "show",
        "--config",
        "launch-config.yaml",
        "--max-jobs",
        "7",
        env={"WANDB_API_KEY": KEY, "WANDB_ENTITY": "env-team"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert lines["queues"].endswith("# file launch-config.yaml:1")
    assert '"env-team"' in lines["entity"] and lines["entity"].endswith("# env WANDB_ENTITY")
    assert " 7 " in lines["max_jobs"] and lines["max_jobs"].endswith("# flag --max-jobs")
    assert '"********"' in lines["api_key"] and lines["api_key"].endswith("# env WANDB_API_KEY")
    assert lines["poll.idle_interval_seconds"].endswith("# default")
    assert KEY not in result.stdout + result.stderr


def test_config_show_json_is_the_resolved_tree(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q1]\nbuilder: {type: noop}\n")
    result = _cli(
        "config", "show", "-c", "c.yaml", "-o", "json", env={"WANDB_API_KEY": KEY}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    tree = json.loads(result.stdout)
    assert tree["queues"] == ["q1"]
    assert tree["builder"]["type"] == "noop"
    assert tree["api_key"] == "********"


def test_config_show_reports_every_problem_with_exit_status_2(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("queues: [q1]\nmax_job: 2\nverbosity: loud\n")
    result = _cli("config", "show", "-c", "c.yaml", env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: c.yaml:2: max_job: unknown key 'max_job'; did you mean 'max_jobs'?",
        "error: c.yaml:3: verbosity: expected an integer, got 'loud' (str)",
    ]
    assert result.stdout == ""


def test_config_show_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    result = _cli("config", "show", "-c", "nope.yaml", env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: nope.yaml: (file): cannot read: No such file")


def test_default_wandb_config_path_is_read_when_present(tmp_path: Path) -> None:
    wandb_dir = tmp_path / ".config" / "wandb"
    wandb_dir.mkdir(parents=True)
    (wandb_dir / "launch-config.yaml").write_text("queues: [from-home]\n")
    result = _cli("config", "show", "-o", "json", env={}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queues"] == ["from-home"]


# --- did you mean -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["rnu"], "did you mean 'run'?"),
        (["valdiate"], "did you mean 'validate'?"),
        (["sand"], "did you mean 'sandbox'?"),
        (["config", "shwo"], "did you mean 'show'?"),
        (["completion", "bsh"], "did you mean 'bash' or 'zsh'?"),
    ],
)
def test_a_mistyped_command_gets_a_suggestion(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: {argv[-1]!r}" in err and err.rstrip().endswith(hint)


def test_nothing_close_gets_no_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["xyzzy"])
    err = capsys.readouterr().err
    assert "invalid choice: 'xyzzy'" in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "2"], "--workers and --dir need --cluster real"),
        (["--dir", "x"], "--workers and --dir need --cluster real"),
        (["--cluster", "real", "--workers", "1"], "--workers 1 cannot show runs spread over"),
        (["--cluster", "real", "--workers", "21"], "--workers must be between 0 and 20, got 21"),
        (["--cluster", "real", "--workers", "2", "--specs", "."], "--specs does not apply"),
        (["--cluster", "real", "--crds", "packaged"], "--crds applies to the sandbox"),
        (["--timeout", "0"], "--timeout must be positive, got 0.0"),
    ],
)
def test_demo_refuses_options_that_do_not_go_together(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # Refused before anything starts, so no cluster binaries are needed.
    assert main(["demo", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--client-in-flight", "8,x"], "--client-in-flight must be positive integers"),
        (["--client-in-flight", "0"], "--client-in-flight must be positive integers"),
        (["--cluster", "real", "--runs", "0"], "--runs must be at least 1, got 0"),
    ],
)
def test_bench_dispatch_refuses_bad_numbers(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # Refused before anything starts, so no cluster binaries are needed.
    assert main(["bench", "dispatch", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")


def test_bench_dispatch_help_describes_the_real_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "dispatch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--cluster {sandbox,real}" in out
    assert "plain client" in out and "etcd and kube-apiserver only" in out


# --- completion -------------------------------------------------------------------------------


def _complete_bash(script: str, words: list[str]) -> list[str]:
    """What bash offers after `words` (the last is the word being completed)."""
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}"
        '\n_launch_agent; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if line]


def _script(shell: str, tmp_path: Path) -> str:
    result = _cli("completion", shell, env={}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bash_completion_completes_commands_subcommands_and_options(tmp_path: Path) -> None:
    script = _script("bash", tmp_path)
    assert _complete_bash(script, ["launch-agent", "val"]) == ["validate"]
    assert _complete_bash(script, ["launch-agent", "ver"]) == ["version"]
    assert _complete_bash(script, ["launch-agent", "sandbox", ""]) == ["up", "submit", "--help"]
    assert _complete_bash(script, ["launch-agent", "run", "--con"]) == ["--config", "--context"]
    # Options of `config show`, after an option and its value.
    assert _complete_bash(script, ["launch-agent", "config", "show", "-q", "a", "--ou"]) == [
        "--output"
    ]
    assert _complete_bash(script, ["launch-agent", "completion", "z"]) == ["zsh"]


def test_zsh_and_fish_scripts_cover_every_command(tmp_path: Path) -> None:
    # zsh and fish are not installed here: the scripts are checked for the tree they carry.
    from launch_agent.cli import build_parser
    from launch_agent.commands.completion_cmd import command_tree

    tree = command_tree(build_parser())
    zsh, fish = _script("zsh", tmp_path), _script("fish", tmp_path)
    assert zsh.startswith("#compdef launch-agent\n") and "compdef _launch_agent launch-agent" in zsh
    for path, node in tree.items():
        key = " ".join(("launch-agent", *path))
        assert f"  '{key}' '{' '.join(node.words)}'" in zsh, key
    assert "complete -c launch-agent -n '__fish_use_subcommand' -a 'config run" in fish
    assert (
        "complete -c launch-agent -n '__fish_seen_subcommand_from sandbox; and"
        " not __fish_seen_subcommand_from up submit' -a 'up submit'"
    ) in fish
    assert (
        "complete -c launch-agent -n '__fish_seen_subcommand_from sandbox; and"
        " __fish_seen_subcommand_from up' -l kube-port"
    ) in fish


# --- `-` reads standard input -----------------------------------------------------------------


def test_config_from_stdin(tmp_path: Path) -> None:
    result = _cli(
        "config", "show", "--config", "-", env={}, cwd=tmp_path, stdin="queues: [piped]\n"
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert '"piped"' in lines["queues"] and lines["queues"].endswith("# file <stdin>:1")


def test_config_errors_from_stdin_name_stdin(tmp_path: Path) -> None:
    result = _cli("config", "show", "-c", "-", env={}, cwd=tmp_path, stdin="max_job: 2\n")
    assert result.returncode == 2
    assert result.stderr.startswith("error: <stdin>:1: max_job: unknown key")


def test_validate_a_spec_from_stdin(tmp_path: Path) -> None:
    spec = (ROOT / "queue-specs" / "job.yaml").read_text()
    result = _cli("validate", "-", env={}, cwd=tmp_path, stdin=spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: <stdin>: Job")
    broken = _cli("validate", "-", env={}, cwd=tmp_path, stdin="apiVersion: launch-agent/v1\n")
    assert broken.returncode == 1 and "error: <stdin>:" in broken.stderr


def test_sandbox_submit_resource_args_from_stdin(tmp_path: Path) -> None:
    # Read (and refused) before any request: a list is not a Kubernetes object.
    result = _cli(
        "sandbox", "submit", "--queue", "q", "--image", "busybox", "--resource-args", "-",
        "--base-url", "http://127.0.0.1:9", "--api-key", KEY,
        env={}, cwd=tmp_path, stdin="[1, 2]\n",
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "<stdin>: must hold a mapping (a Kubernetes object), got list" in result.stderr


# --- --context --------------------------------------------------------------------------------


def test_run_takes_a_kubeconfig_context(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    (tmp_path / "c.yaml").write_text("queues: [q]\n")
    result = _cli(
        "run", "-c", "c.yaml", "--kubeconfig", str(kubeconfig), "--context", "elsewhere",
        env={"WANDB_API_KEY": KEY, "WANDB_BASE_URL": "http://127.0.0.1:9"}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot load the Kubernetes configuration" in result.stderr
    assert "elsewhere" in result.stderr


# --- -o json|yaml -----------------------------------------------------------------------------


def test_validate_prints_records_as_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("apiVersion: launch-agent/v1\n")
    good = str(ROOT / "queue-specs" / "job.yaml")
    result = _cli("validate", "-o", "json", good, "bad.yaml", env={}, cwd=tmp_path)
    assert result.returncode == 1 and result.stderr == ""
    records = json.loads(result.stdout)
    assert [(r["file"], r["ok"]) for r in records] == [(good, True), ("bad.yaml", False)]
    assert records[0]["summary"].startswith("Job (batch/v1)") and records[0]["problems"] == []
    assert all(set(p) == {"path", "reason"} for p in records[1]["problems"])
    assert records[1]["problems"]
    as_yaml = _cli("validate", "-o", "yaml", good, "bad.yaml", env={}, cwd=tmp_path)
    assert yaml.safe_load(as_yaml.stdout) == records
