"""Build sources, the pure checks: every submitter value that reaches git, a path or Kaniko.

A run's build source comes from the submitter (`runSpec.git`, the job artifact's
`wandb-job.json`, the code artifact's file names), and the agent runs `git` and writes files
with it, holding the W&B API key and a service account that creates workloads. So each value
is checked here before any subprocess or file system call, and the worst value of each is
refused with a message that names where it came from (`runSpec.git.version`,
`job artifact E/P/N:v0: source.git.commit`), which the agent puts on the failed run queue item.

- **Refs** are a commit sha (40 or 64 hex digits) or a name `git check-ref-format
  --allow-onelevel` accepts; never one starting with `-` (an option) or `+` (a forced refspec).
- **URLs** are `scheme://host/path` or scp-like `[user@]host:path`, with the scheme on the
  admin's allow-list (`builder.git.allowed_schemes`, default https and ssh). Local paths,
  `file://`, `ext::`/`fd::` and other `transport::` helpers are never accepted from a submitter.
  Credentials embedded in a URL are stripped (see `check_git_url`).
- **Paths** (Dockerfile, build context, code artifact file names) are relative, normalised,
  inside the source tree: no `..`, no absolute or drive names, no control characters.

The git call itself (`--end-of-options`, the minimal environment) is in
`launch_agent.adapters.build_context`; it calls these checks again, so nothing reaches git
unchecked whichever way it was called.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

# The default of `builder.git.allowed_schemes`; the admin may add `git` and `http`
# (`model.config.GitScheme`); `file`, `ext`, `fd` and remote helpers are not selectable at all.
DEFAULT_SCHEMES = ("https", "ssh")
# git's own spellings of ssh.
_SSH_ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}

MAX_REF = 255
MAX_URL = 2048
MAX_PATH = 1024
MAX_COMPONENT = 255
MAX_ENTRYPOINT_ARGS = 256
MAX_ENTRYPOINT_ARG = 4096
MAX_ARTIFACT_NAME = 512
MAX_IMAGE = 1024

_SHA = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
# check-ref-format: no ASCII control characters, space, ~ ^ : ? * [ or backslash anywhere.
_REF_FORBIDDEN = frozenset("~^:?*[\\ ")
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# W&B entity, project, artifact and alias names.
_WANDB_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_BUILD_ARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class SourceError(ValueError):
    """A submitter value the build path refuses; the message starts with where it came from."""


def _control(text: str) -> bool:
    """Any control, format, separator-other-than-space or non-character code point."""
    return any(unicodedata.category(c)[0] in "CZ" and c != " " for c in text)


def _shown(value: str, limit: int = 80) -> str:
    text = value if len(value) <= limit else value[:limit] + "..."
    return repr(text)


# --- refs --------------------------------------------------------------------------------------


def ref_problem(ref: str) -> str | None:
    """Why `ref` is not a sha or a refname git accepts (`None` when it is fine)."""
    if not ref:
        return "is empty"
    if len(ref) > MAX_REF:
        return f"is longer than {MAX_REF} characters"
    if _SHA.match(ref):
        return None
    if ref.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    if ref.startswith("+"):
        return "starts with '+' (a forced refspec, not a ref)"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in ref) or _control(ref):
        return "contains a control character"
    bad = sorted(set(ref) & _REF_FORBIDDEN)
    if bad:
        return "contains " + ", ".join(repr(c) for c in bad)
    if ".." in ref:
        return "contains '..'"
    if "@{" in ref:
        return "contains '@{'"
    if ref == "@":
        return "is '@'"
    if ref.endswith("."):
        return "ends with '.'"
    if ref.startswith("/") or ref.endswith("/") or "//" in ref:
        return "has an empty path component ('/' at an end, or '//')"
    for part in ref.split("/"):
        if part.startswith("."):
            return f"has a component starting with '.' ({part!r})"
        if part.endswith(".lock"):
            return f"has a component ending with '.lock' ({part!r})"
    return None


def check_ref(value: object, where: str) -> str | None:
    """A commit sha (lower-cased) or a ref name; `None` for no ref (the default branch)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SourceError(f"{where}: must be a string, not {type(value).__name__}")
    problem = ref_problem(value)
    if problem:
        raise SourceError(
            f"{where}: {_shown(value)} is not a commit sha or a branch or tag name: it {problem}"
        )
    return value.lower() if _SHA.match(value) else value


# --- URLs --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GitUrl:
    """A checked git URL: `url` is what git is given (credentials stripped)."""

    scheme: str
    host: str
    port: int | None
    url: str

    @property
    def origin(self) -> tuple[str, str, int | None]:
        """(scheme, host, port): what a git-credentials line is matched on."""
        return self.scheme, self.host.lower(), self.port


def redact_url(text: str) -> str:
    """`text` with a URL's `user:password@` (any user info of an http(s) URL: a token alone is
    a valid GitHub user name) replaced, for messages and logs."""
    text = re.sub(r"(?i)(?<=https://)[^/@\s]+@|(?<=http://)[^/@\s]+@", "***@", text)
    return re.sub(r"(?<=://)[^/@\s]*:[^/@\s]*@", "***@", text)


def _host_ok(host: str) -> bool:
    return bool(host) and len(host) <= 253 and bool(_HOST.match(host))


def check_git_url(value: object, where: str, allowed: Iterable[str] = DEFAULT_SCHEMES) -> GitUrl:
    """A git remote a submitter gave, checked and normalised; `SourceError` otherwise.

    Credentials in the URL (`https://user:token@host/...`, common in remotes W&B recorded from
    a CI checkout) are stripped rather than refused: the agent fetches with the admin's
    credentials for that host only, never with a submitter's, and the token must not reach
    git's argv, error messages or logs. An ssh user name (`git@host`) is kept: it is not a
    secret, and ssh needs it.
    """
    allowed = tuple(allowed)
    if not isinstance(value, str):
        raise SourceError(f"{where}: must be a string, not {type(value).__name__}")
    shown = _shown(redact_url(value))
    if not value:
        raise SourceError(f"{where}: is empty")
    if len(value) > MAX_URL:
        raise SourceError(f"{where}: is longer than {MAX_URL} characters")
    if value.startswith("-"):
        raise SourceError(f"{where}: {shown} starts with '-' (git would read it as an option)")
    if any(c.isspace() for c in value) or _control(value):
        raise SourceError(f"{where}: {shown} contains whitespace or a control character")
    if _control(unquote(value)) or any(c.isspace() for c in unquote(value)):
        raise SourceError(f"{where}: {shown} contains an encoded whitespace or control character")
    scheme_end = value.find("://")
    helper = value.find("::")
    if helper != -1 and (scheme_end == -1 or helper < scheme_end):
        raise SourceError(
            f"{where}: {shown} uses a git remote helper ({value[:helper]}::); only"
            f" {', '.join(allowed)} URLs are accepted"
        )
    if scheme_end == -1:
        return _scp_like(value, where, shown, allowed)
    scheme = value[:scheme_end].lower()
    scheme = _SSH_ALIASES.get(scheme, scheme)
    if scheme == "file":
        raise SourceError(f"{where}: {shown}: file:// URLs (the agent's own disk) are not accepted")
    if not re.match(r"^[a-z][a-z0-9+.-]*$", scheme):
        raise SourceError(f"{where}: {shown} has no URL scheme git knows")
    if scheme not in allowed:
        raise SourceError(
            f"{where}: {shown}: the {scheme} scheme is not allowed here (allowed:"
            f" {', '.join(allowed)}; an admin may add git or http in builder.git.allowed_schemes)"
        )
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise SourceError(f"{where}: {shown} is not a URL: {exc}") from None
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    host = parts.hostname or ""
    if "[" in hostport or not _host_ok(host):
        raise SourceError(f"{where}: {shown} has no valid host name")
    user = ""
    if at and scheme == "ssh":
        user = userinfo.partition(":")[0]
        if not _USER.match(user):
            raise SourceError(f"{where}: {shown} has an invalid ssh user name")
    path = parts.path
    if not path or path == "/":
        raise SourceError(f"{where}: {shown} names no repository path")
    if parts.fragment:
        raise SourceError(f"{where}: {shown} has a '#' fragment")
    hostpart = host + (f":{port}" if port is not None else "")
    netloc = f"{user}@{hostpart}" if user else hostpart
    query = f"?{parts.query}" if parts.query else ""
    return GitUrl(scheme, host, port, f"{scheme}://{netloc}{path}{query}")


def _scp_like(value: str, where: str, shown: str, allowed: tuple[str, ...]) -> GitUrl:
    head, colon, path = value.partition(":")
    drive = re.match(r"^[A-Za-z]:[/\\]", value)  # `C:/repo`: a Windows path, local
    if not colon or "/" in head or value.startswith((".", "/", "~")) or drive:
        raise SourceError(
            f"{where}: {shown} is a local path; only {', '.join(allowed)} URLs are accepted"
        )
    if "ssh" not in allowed:
        raise SourceError(
            f"{where}: {shown}: the ssh scheme (user@host:path) is not allowed here (allowed:"
            f" {', '.join(allowed)})"
        )
    user, at, host = head.rpartition("@")
    if at and not _USER.match(user):
        raise SourceError(f"{where}: {shown} has an invalid ssh user name")
    if not _host_ok(host):
        raise SourceError(f"{where}: {shown} has no valid host name")
    if not path or path.startswith(("-", ":")):
        raise SourceError(f"{where}: {shown} names no repository path")
    return GitUrl("ssh", host, None, value)


# --- paths -------------------------------------------------------------------------------------


def check_relative_path(value: object, where: str, *, allow_dot: bool = False) -> str:
    """A path inside the source tree, normalised (`a//b/./c` -> `a/b/c`); `SourceError` if not.

    Lexical only: the adapter also resolves symbolic links and checks the result is still
    inside the tree (a link `Dockerfile -> /etc/shadow` is a name that passes here).
    """
    if not isinstance(value, str):
        raise SourceError(f"{where}: must be a string, not {type(value).__name__}")
    shown = _shown(value)
    if not value:
        raise SourceError(f"{where}: is empty")
    if len(value) > MAX_PATH:
        raise SourceError(f"{where}: is longer than {MAX_PATH} characters")
    if _control(value):
        raise SourceError(f"{where}: {shown} contains a control character")
    if "\\" in value:
        raise SourceError(f"{where}: {shown} contains a backslash (use '/')")
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value):
        raise SourceError(f"{where}: {shown} must be a relative path inside the source tree")
    parts = [p for p in PurePosixPath(value).parts if p != "."]
    if ".." in parts:
        raise SourceError(f"{where}: {shown} must be a path inside the source tree (no '..')")
    if any(len(p) > MAX_COMPONENT for p in parts):
        raise SourceError(f"{where}: {shown} has a component longer than {MAX_COMPONENT}")
    if ".git" in parts:
        raise SourceError(f"{where}: {shown} points into .git")
    if not parts:
        if allow_dot:
            return "."
        raise SourceError(f"{where}: {shown} names the source tree itself, not a file")
    if parts[0].startswith("-"):
        raise SourceError(f"{where}: {shown} starts with '-'")
    return "/".join(parts)


def check_member_name(name: object, where: str) -> str:
    """A file name inside a code artifact (zip-slip): relative, inside, not `.git`."""
    return check_relative_path(name, f"{where}: file {_shown(str(name))}")


# --- other values ------------------------------------------------------------------------------


def check_entrypoint(value: object, where: str) -> tuple[str, ...]:
    """The entry point: a bounded list of strings without NUL (it becomes JSON in ENTRYPOINT)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise SourceError(f"{where}: must be a list of strings")
    if len(value) > MAX_ENTRYPOINT_ARGS:
        raise SourceError(f"{where}: more than {MAX_ENTRYPOINT_ARGS} arguments")
    for i, arg in enumerate(value):
        if "\x00" in arg:
            raise SourceError(f"{where}[{i}]: contains a NUL character")
        if len(arg) > MAX_ENTRYPOINT_ARG:
            raise SourceError(f"{where}[{i}]: longer than {MAX_ENTRYPOINT_ARG} characters")
    return tuple(value)


def check_artifact_name(value: object, where: str) -> str:
    """`[wandb-artifact://]ENTITY/PROJECT/NAME[:ALIAS]` with W&B's name characters."""
    if not isinstance(value, str):
        raise SourceError(f"{where}: must be a string, not {type(value).__name__}")
    shown = _shown(value)
    if len(value) > MAX_ARTIFACT_NAME:
        raise SourceError(f"{where}: is longer than {MAX_ARTIFACT_NAME} characters")
    bare = value.removeprefix("wandb-artifact://")
    path, _, alias = bare.partition(":")
    parts = path.split("/")
    if (
        len(parts) != 3
        or not all(_WANDB_PART.match(p) and p not in (".", "..") for p in parts)
        or (alias and not _WANDB_PART.match(alias))
        or ":" in alias
    ):
        raise SourceError(f"{where}: {shown} is not an artifact name ENTITY/PROJECT/NAME[:ALIAS]")
    return value


def check_image(value: object, where: str) -> str:
    """An image reference a job names: one token, never an option."""
    if not isinstance(value, str):
        raise SourceError(f"{where}: must be a string, not {type(value).__name__}")
    shown = _shown(value)
    if not value or len(value) > MAX_IMAGE:
        raise SourceError(f"{where}: must be 1 to {MAX_IMAGE} characters")
    if any(c.isspace() for c in value) or _control(value):
        raise SourceError(f"{where}: {shown} contains whitespace or a control character")
    if value.startswith("-"):
        raise SourceError(f"{where}: {shown} starts with '-'")
    return value


def check_build_arg(key: object, value: object, where: str) -> tuple[str, str]:
    """A Kaniko `--build-arg`: an identifier key and a value without NUL or newlines."""
    if not isinstance(key, str) or not _BUILD_ARG.match(key):
        raise SourceError(f"{where}: {_shown(str(key))} is not a build argument name")
    if not isinstance(value, str) or "\x00" in value or "\n" in value or "\r" in value:
        raise SourceError(f"{where}.{key}: must be a string without NUL or line breaks")
    return key, value
