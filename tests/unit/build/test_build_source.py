"""The build-source checks (pure): refs, git URLs, paths, names; tables, plus git itself as the
oracle for the ref rules (`git check-ref-format --allow-onelevel`)."""

from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.model.build_source import (
    SourceError,
    check_artifact_name,
    check_build_arg,
    check_entrypoint,
    check_git_url,
    check_image,
    check_ref,
    check_relative_path,
    redact_url,
    ref_problem,
)
from launch_agent.model.config import GitSourceConfig
from launch_agent.model.config_resolve import ConfigError, resolve

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "ab" * 32


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (None, None),
        ("", None),
        ("main", "main"),
        ("release/2024.1", "release/2024.1"),
        ("refs/heads/main", "refs/heads/main"),
        ("v1.0.0", "v1.0.0"),
        ("HEAD", "HEAD"),
        (SHA1, SHA1),
        (SHA1.upper(), SHA1),
        (SHA256, SHA256),
        ("abc1234", "abc1234"),  # a short sha is a valid name; the fetch resolves it
        ("feature/ünïcode", "feature/ünïcode"),
    ],
)
def test_refs_accepted(ref: str | None, expected: str | None) -> None:
    assert check_ref(ref, "runSpec.git.version") == expected


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("--upload-pack=touch /tmp/x", "starts with '-'"),
        ("-q", "starts with '-'"),
        ("+refs/heads/*:refs/heads/*", "starts with '+'"),
        ("main:refs/heads/evil", "':'"),
        ("a..b", "'..'"),
        ("a b", "' '"),
        ("a\tb", "control character"),
        ("a\nb", "control character"),
        ("a\x00b", "control character"),
        ("a\x7fb", "control character"),
        ("a~1", "'~'"),
        ("a^{}", "'^'"),
        ("a?", "'?'"),
        ("a*", "'*'"),
        ("a[b", "'['"),
        ("a\\b", "'\\\\'"),
        ("a@{1}", "'@{'"),
        ("@", "is '@'"),
        ("main.lock", "'.lock'"),
        ("a/b.lock/c", "'.lock'"),
        ("main/", "empty path component"),
        ("/main", "empty path component"),
        ("a//b", "empty path component"),
        (".hidden", "starting with '.'"),
        ("a/.b", "starting with '.'"),
        ("main.", "ends with '.'"),
        ("x" * 256, "longer than 255"),
        ("a\u200bb", "control character"),  # zero-width space: a format character
    ],
)
def test_refs_refused(ref: str, reason: str) -> None:
    with pytest.raises(SourceError) as caught:
        check_ref(ref, "runSpec.git.version")
    assert str(caught.value).startswith("runSpec.git.version: ")
    assert reason in str(caught.value)


def test_a_ref_that_is_not_a_string_names_its_type() -> None:
    with pytest.raises(SourceError, match=r"source\.git\.commit: must be a string, not int"):
        check_ref(12, "job artifact e/p/j:v0: source.git.commit")


REF_TEXT = st.text(alphabet="ab/.-@{}~^:?*[\\ +lock\x01", min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(REF_TEXT)
def test_every_accepted_ref_is_one_git_accepts(ref: str) -> None:
    """git itself is the oracle: what the check accepts (a name, not a sha), git accepts too.
    The check is stricter than git (a leading '+', format characters), never looser."""
    if ref_problem(ref) is None:
        done = subprocess.run(
            ["git", "check-ref-format", "--allow-onelevel", ref], capture_output=True, check=False
        )
        assert done.returncode == 0, ref


@pytest.mark.parametrize(
    ("url", "allowed", "normalised", "scheme"),
    [
        ("https://github.com/org/repo.git", None, "https://github.com/org/repo.git", "https"),
        ("HTTPS://GitHub.com/org/repo", None, "https://github.com/org/repo", "https"),
        ("https://x-access-token:ghp_secret@github.com/o/r", None, "https://github.com/o/r",
         "https"),
        ("https://oauth2@gitlab.example.com/o/r.git", None, "https://gitlab.example.com/o/r.git",
         "https"),
        ("https://git.example.com:8443/o/r.git", None, "https://git.example.com:8443/o/r.git",
         "https"),
        ("git@github.com:org/repo.git", None, "git@github.com:org/repo.git", "ssh"),
        ("github.com:org/repo.git", None, "github.com:org/repo.git", "ssh"),
        ("ssh://git@github.com/org/repo.git", None, "ssh://git@github.com/org/repo.git", "ssh"),
        ("ssh://git:pw@github.com/org/repo.git", None, "ssh://git@github.com/org/repo.git",
         "ssh"),
        ("git+ssh://git@h.example/o/r", None, "ssh://git@h.example/o/r", "ssh"),
        ("http://127.0.0.1:8080/repo.git", ["http"], "http://127.0.0.1:8080/repo.git", "http"),
        ("git://mirror.internal/repo.git", ["git"], "git://mirror.internal/repo.git", "git"),
    ],
)  # fmt: skip
def test_urls_accepted(url: str, allowed: list[str] | None, normalised: str, scheme: str) -> None:
    got = check_git_url(url, "runSpec.git.repo", *([allowed] if allowed else []))
    assert (got.url, got.scheme) == (normalised, scheme)
    assert "secret" not in got.url and "pw" not in got.url


@pytest.mark.parametrize(
    ("url", "allowed", "reason"),
    [
        ("/srv/repos/agent.git", None, "local path"),
        ("./repo", None, "local path"),
        ("../../etc", None, "local path"),
        ("~/repo", None, "local path"),
        ("repo", None, "local path"),
        ("C:\\repo", None, "local path"),
        ("file:///srv/repo.git", None, "file:// URLs"),
        ("FILE:///srv/repo.git", None, "file:// URLs"),
        ("file:///srv/repo.git", ["https", "ssh", "git", "http"], "file:// URLs"),
        ("ext::sh -c touch% /tmp/x", None, "whitespace"),
        ("ext::sh", None, "remote helper (ext::)"),
        ("fd::3", None, "remote helper (fd::)"),
        ("rsync::x", None, "remote helper"),
        ("-oProxyCommand=touch", None, "starts with '-'"),
        ("--upload-pack=touch", None, "starts with '-'"),
        ("ssh://-oProxyCommand=x/r", None, "no valid host name"),
        ("-host:repo", None, "starts with '-'"),
        ("git@-oProxyCommand=x:repo", None, "no valid host name"),
        ("-l@host:repo", None, "starts with '-'"),
        ("x@host:-repo", None, "no repository path"),
        ("https://github.com/o/r\n", None, "whitespace or a control character"),
        ("https://github.com/o r", None, "whitespace or a control character"),
        ("https://github.com/o%0ar", None, "encoded whitespace or control"),
        ("https://github.com/o%00r", None, "encoded whitespace or control"),
        ("http://github.com/o/r", None, "the http scheme is not allowed"),
        ("git://github.com/o/r", None, "the git scheme is not allowed"),
        ("git@github.com:o/r", ["https"], "ssh scheme (user@host:path) is not allowed"),
        ("ftp://h.example/r", None, "the ftp scheme is not allowed"),
        ("https://github.com", None, "no repository path"),
        ("https://[::1]/r", None, "no valid host name"),
        ("https://h.example:99999/r", None, "not a URL"),
        ("https://h.example/r#frag", None, "'#' fragment"),
        ("", None, "is empty"),
        ("https://h.example/" + "a" * 2048, None, "longer than 2048"),
    ],
)
def test_urls_refused(url: str, allowed: list[str] | None, reason: str) -> None:
    with pytest.raises(SourceError) as caught:
        check_git_url(url, "runSpec.git.repo", *([allowed] if allowed else []))
    assert str(caught.value).startswith("runSpec.git.repo: ")
    assert reason in str(caught.value)


def test_a_refused_url_never_shows_its_password() -> None:
    with pytest.raises(SourceError) as caught:
        check_git_url("http://bot:hunter2@h.example/r", "runSpec.git.repo")
    assert "hunter2" not in str(caught.value)
    assert (
        redact_url("see https://u:p@h/x and ssh://git@h/y")
        == "see https://***@h/x and ssh://git@h/y"
    )
    assert redact_url("https://ghp_token@github.com/o/r") == "https://***@github.com/o/r"
    assert redact_url("ssh://git:pw@h/x") == "ssh://***@h/x"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("Dockerfile", "Dockerfile"),
        ("docker/Dockerfile.train", "docker/Dockerfile.train"),
        ("./a//b/./Dockerfile", "a/b/Dockerfile"),
    ],
)
def test_paths_accepted(path: str, expected: str) -> None:
    assert check_relative_path(path, "runSpec.overrides.dockerfile") == expected


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../Dockerfile", "no '..'"),
        ("a/../../etc/passwd", "no '..'"),
        ("/etc/passwd", "relative path"),
        ("C:/x", "relative path"),
        ("a\\..\\b", "backslash"),
        ("a\x00b", "control character"),
        (".git/config", "points into .git"),
        ("-Dockerfile", "starts with '-'"),
        (".", "the source tree itself"),
        ("", "is empty"),
        ("a/" * 600, "longer than 1024"),
    ],
)
def test_paths_refused(path: str, reason: str) -> None:
    with pytest.raises(SourceError) as caught:
        check_relative_path(path, "runSpec.overrides.dockerfile")
    assert str(caught.value).startswith("runSpec.overrides.dockerfile: ")
    assert reason in str(caught.value)


def test_a_build_context_may_be_the_root() -> None:
    assert check_relative_path(".", "source.build_context", allow_dot=True) == "."


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("ent/proj/job:latest", True),
        ("wandb-artifact://ent/proj/code-train.py:v3", True),
        ("ent/proj/job", True),
        ("ent/proj/../job:v0", False),
        ("ent/../../job", False),
        ("ent/proj/job:v0:extra", False),
        ("ent/proj/job name:v0", False),
        ("ent/proj", False),
        ("-ent/proj/job", False),
    ],
)
def test_artifact_names(name: str, ok: bool) -> None:
    if ok:
        assert check_artifact_name(name, "runSpec.job") == name
    else:
        with pytest.raises(SourceError, match=r"^runSpec\.job: .*is not an artifact name"):
            check_artifact_name(name, "runSpec.job")


def test_entrypoints_images_and_build_args() -> None:
    assert check_entrypoint(["python", "train.py"], "e") == ("python", "train.py")
    with pytest.raises(SourceError, match=r"e\[1\]: contains a NUL"):
        check_entrypoint(["python", "a\x00b"], "e")
    with pytest.raises(SourceError, match="must be a list of strings"):
        check_entrypoint("python train.py", "e")
    with pytest.raises(SourceError, match="more than 256 arguments"):
        check_entrypoint(["x"] * 257, "e")
    assert check_image("python:3.11-slim", "i") == "python:3.11-slim"
    for bad in ("--privileged", "a b", "a\nb", ""):
        with pytest.raises(SourceError, match=r"^i: "):
            check_image(bad, "i")
    assert check_build_arg("PIP_INDEX", "https://x --y", "b") == ("PIP_INDEX", "https://x --y")
    for key, value in (("X --destination=evil", "v"), ("1X", "v"), ("X", "a\nb"), ("X", 1)):
        with pytest.raises(SourceError, match=r"^b"):
            check_build_arg(key, value, "b")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("builder:\n  type: kaniko\n  git:\n    allowed_schemes: [https, file]\n",
         "launch-config.yaml:4: builder.git.allowed_schemes[1]: expected one of"),
        ("builder:\n  git:\n    allowed_schemes: [ext]\n", "builder.git.allowed_schemes[0]"),
        ("builder:\n  git:\n    allowed_schemes: []\n", "builder.git.allowed_schemes: List"),
    ],
)  # fmt: skip
def test_the_allow_list_takes_only_network_schemes(text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(reason)):
        resolve(file_text=text)


def test_git_settings_default_and_from_the_chart_environment() -> None:
    assert resolve(file_text="queues: [q]\n").config.builder is None
    assert GitSourceConfig().allowed_schemes == ["https", "ssh"]
    env = {
        "LAUNCH_AGENT_GIT_CREDENTIALS_FILE": "/etc/launch-agent/git/.git-credentials",
        "LAUNCH_AGENT_GIT_SSH_COMMAND": "ssh -F /etc/launch-agent/ssh/config/config",
    }
    resolved = resolve(file_text="queues: [q]\n", env=env)
    git = resolved.config.builder.git if resolved.config.builder else None
    assert git is not None
    assert git.credentials_file == "/etc/launch-agent/git/.git-credentials"
    assert git.ssh_command == "ssh -F /etc/launch-agent/ssh/config/config"
    assert str(resolved.sources["builder.git.credentials_file"]) == (
        "env LAUNCH_AGENT_GIT_CREDENTIALS_FILE"
    )
