"""`launch-agent status` against a loopback server answering what a broken or hostile agent (or
whatever sits at the URL) might: one line on stderr and exit 1, or a table with no control
character, never a traceback and never unbounded output."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from launch_agent.cli import main
from tests.status_documents import MAX_OUTPUT, near_documents, snapshot
from tests.terminal import unsafe_characters


class Answer:
    """What the server answers next: a status code and a body."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Answer]]:
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answer
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def status(url: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["status", "--url", url, *args])
    return code, out.getvalue(), err.getvalue()


def serve(answer: Answer, doc: Any, status_code: int = 200) -> None:
    answer.status = status_code
    answer.body = json.dumps(doc).encode()


def broken(change: Any) -> dict[str, Any]:
    doc = snapshot()
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (broken(lambda d: d["agent"].pop("role")), "agent.role: missing"),
        (broken(lambda d: d["runs"].update(total="many")), "runs.total: expected a count"),
        (
            broken(lambda d: d["runs"]["items"][0].update(age_seconds="3s")),
            "runs.items[0].age_seconds: expected a number",
        ),
        (
            broken(lambda d: d["quota"]["nodes"][1].update(depth=10**9)),
            "quota.nodes[1].depth: expected a depth",
        ),
        (broken(lambda d: d.pop("builds")), "builds: missing"),
        (broken(lambda d: d["agent"].update(wandb=[])), "agent.wandb: expected a mapping"),
    ],
)
def test_a_bad_answer_is_one_line_and_exit_1(
    server: tuple[str, Answer], doc: Any, named: str
) -> None:
    url, answer = server
    serve(answer, doc)
    for output in ("table", "json", "yaml"):
        code, out, err = status(url, "-o", output)
        assert (code, out) == (1, "")
        assert err.count("\n") == 1 and named in err and "Traceback" not in err


def test_a_hostile_error_body_is_shown_escaped(server: tuple[str, Answer]) -> None:
    url, answer = server
    answer.status, answer.body = 500, b"\x1b]52;c;aGFja2Vk\x07down\nforged line"
    code, out, err = status(url)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and unsafe_characters(err) == []
    answer.status = 200


def test_a_good_answer_with_hostile_text_prints_escaped(server: tuple[str, Answer]) -> None:
    url, answer = server
    serve(answer, snapshot("name\x1b[2J\x1b]52;c;aGFja2Vk\x07\u202eend\nAGENT forged"))
    code, out, err = status(url)
    assert code == 0, err
    assert unsafe_characters(out, allowed="\n") == []
    assert "\nAGENT forged" not in out and "\\x1b[2J" in out
    code, out, err = status(url, "-o", "json")
    assert code == 0 and unsafe_characters(out) == []


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=near_documents())
def test_any_answer_ends_in_one_line_or_a_table(server: tuple[str, Answer], doc: Any) -> None:
    url, answer = server
    serve(answer, doc)
    code, out, err = status(url)
    assert "Traceback" not in err
    if code == 1:
        assert out == "" and err.count("\n") == 1 and unsafe_characters(err) == []
    else:
        assert code == 0, err
        assert unsafe_characters(out, allowed="\n") == [] and len(out) <= MAX_OUTPUT + 1
