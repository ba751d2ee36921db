"""A git server on loopback: `git http-backend` (git's own smart-HTTP CGI) behind a threaded
HTTP server, for tests, the demo and benchmarks that fetch build sources.

The agent refuses local paths and `file://` from submitters, so its sources are reached the way
a real one is, over git's smart HTTP protocol. Optional Basic auth (`users`) stands in for a
private repository; `requests` records what clients sent.
"""

from __future__ import annotations

import base64
import http.server
import shutil
import subprocess
import threading
from pathlib import Path
from types import TracebackType

_IDENTITY = {
    "GIT_AUTHOR_NAME": "sandbox",
    "GIT_AUTHOR_EMAIL": "sandbox@example.com",
    "GIT_COMMITTER_NAME": "sandbox",
    "GIT_COMMITTER_EMAIL": "sandbox@example.com",
}


def run_git(cwd: Path, *args: str) -> str:
    """git in `cwd` with a fixed identity and no user or system configuration; its stdout."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**_IDENTITY, "HOME": str(cwd), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout.strip()


def bare_repo(root: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    """`root/<name>.git`, a bare repository with one commit of `files` on `main`; its sha."""
    work = root / f"{name}.work"
    work.mkdir(parents=True)
    run_git(work, "init", "-q", "-b", "main")
    for rel, text in files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    run_git(work, "add", ".")
    run_git(work, "commit", "-qm", "train")
    bare = root / f"{name}.git"
    run_git(root, "clone", "-q", "--bare", str(work), str(bare))
    sha = run_git(work, "rev-parse", "HEAD")
    shutil.rmtree(work)
    return bare, sha


def _backend() -> str:
    exec_path = subprocess.run(
        ["git", "--exec-path"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return str(Path(exec_path) / "git-http-backend")


class GitHttpServer:
    """Every bare repository under `root` at `http://127.0.0.1:<port>/<name>.git`.

    `users` ({name: password}) turns on Basic auth for every request. `requests` records
    (method, path, authorization header) of every request, for tests that check what a
    client sent.
    """

    def __init__(self, root: Path, users: dict[str, str] | None = None) -> None:
        self.root = root
        self.users = dict(users or {})
        self.requests: list[tuple[str, str, str]] = []
        self._backend = ""  # found on entry: construction does no I/O
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use `with GitHttpServer(...)`"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def repo_url(self, name: str) -> str:
        return f"{self.url}/{name}.git"

    def add(self, name: str, files: dict[str, str]) -> tuple[str, str]:
        """A new served repository with one commit of `files`; (URL, commit sha)."""
        _, sha = bare_repo(self.root, name, files)
        return self.repo_url(name), sha

    def serve(self, bare: Path, name: str) -> str:
        """Serve an existing bare repository as `name`; its URL."""
        target = self.root / f"{name}.git"
        if bare.resolve() != target.resolve():
            shutil.copytree(bare, target)
        return self.repo_url(name)

    def __enter__(self) -> GitHttpServer:
        self._backend = _backend()
        handler = _handler(self)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="git-http", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _authorised(self, header: str) -> bool:
        if not self.users:
            return True
        expected = {
            "Basic " + base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in self.users.items()
        }
        return header in expected


def _handler(server: GitHttpServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def _cgi(self) -> None:
            auth = self.headers.get("Authorization", "")
            server.requests.append((self.command, self.path, auth))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not server._authorised(auth):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            env = {
                "GIT_PROJECT_ROOT": str(server.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "REMOTE_USER": "bot" if server.users else "",
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "HOME": str(server.root),
                "PATH": "/usr/bin:/bin",
                "GIT_CONFIG_NOSYSTEM": "1",
            }
            done = subprocess.run(
                [server._backend], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = done.stdout.partition(b"\n\n")
            status = 200
            headers: list[tuple[str, str]] = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
