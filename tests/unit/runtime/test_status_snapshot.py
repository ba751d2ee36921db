"""The status snapshot and its HTML, from plain data (no agent, no server)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from launch_agent.runtime.status import page
from launch_agent.runtime.status.activity import Activity
from launch_agent.runtime.status.snapshot import (
    NANO,
    AgentInfo,
    QuotaRow,
    RunRow,
    app_url,
    build,
    run_url,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
EVIL = '<script>alert("x")</script>'


def info(**extra: object) -> AgentInfo:
    fields: dict[str, object] = {
        "name": "agent",
        "version": "1.2.3",
        "role": "leader",
        "leader": "host-a",
        "hostname": "host-a",
        "started_at": T0,
        "wandb_base_url": "https://api.wandb.ai",
        "entity": "ent",
        "namespaces": ["default"],
        "quota_mode": "agent",
        "builder": "noop",
        "problems": [],
        "last_poll": T0,
    }
    fields.update(extra)
    return AgentInfo(**fields)  # type: ignore[arg-type]


def row(i: int, **extra: object) -> RunRow:
    fields: dict[str, object] = {
        "item": f"item-{i}",
        "queue": "q1",
        "entity": "ent",
        "project": "proj",
        "run_id": f"r{i}",
        "state": "running",
        "reason": "",
        "age_seconds": float(i),
        "workload": f"Job default/r{i}",
    }
    fields.update(extra)
    return RunRow(**fields)  # type: ignore[arg-type]


class Texts(HTMLParser):
    """Every script element and every tag name the page contains."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_submitter_text_is_escaped_everywhere() -> None:
    now = [T0]
    activity = Activity(lambda: now[0])
    activity.popped(EVIL, "item-evil")
    activity.failed("item-evil", "run", EVIL, f"the run failed: {EVIL}")
    activity.built("failed", 3.0, f"registry/{EVIL}")
    snapshot = build(
        info(name=EVIL, entity=EVIL),
        queues=[EVIL],
        runs=[row(1, item=EVIL, queue=EVIL, reason=EVIL, workload=EVIL, project=EVIL)],
        activity=activity.view(),
        quota=[QuotaRow(EVIL, 0, True, {"cpu": NANO}, {"cpu": 2 * NANO}, {"cpu": NANO}, 1)],
        start_deadline_seconds=60,
    )
    html = page.render(snapshot)
    parser = Texts()
    parser.feed(html)
    assert "script" not in parser.tags
    assert EVIL not in html
    assert html.count("&lt;script&gt;") >= 8
    # The run link's path is percent-encoded, never raw markup.
    url = snapshot["runs"]["items"][0]["url"]
    assert url.startswith("https://wandb.ai/ent/") and "<" not in url


def test_runs_are_capped_and_counted() -> None:
    activity = Activity(lambda: T0)
    runs = [row(i, state="starting" if i % 2 else "running") for i in range(250)]
    snapshot = build(
        info(),
        queues=["q1"],
        runs=runs,
        activity=activity.view(),
        quota=None,
        start_deadline_seconds=100,
        max_runs=200,
    )
    listed = snapshot["runs"]
    assert (listed["total"], listed["shown"], len(listed["items"])) == (250, 200, 200)
    # The most recent (youngest) first.
    assert [r["item"] for r in listed["items"][:2]] == ["item-0", "item-1"]
    assert listed["by_state"]["starting"] == 125
    assert listed["by_state"]["running"] == 125
    # Starting for more than 100 s: items 101, 103, ..., 249.
    assert listed["past_start_deadline"] == 75
    queued = build(
        info(),
        queues=["q1"],
        runs=[row(1, state="queued", age_seconds=1000.0)],
        activity=activity.view(),
        quota=None,
        start_deadline_seconds=100,
    )
    assert queued["runs"]["past_start_deadline"] == 0  # waiting for admission, by design
    assert "showing the 200 most recent" in page.render(snapshot)


def test_failures_and_pops_are_windowed_and_bounded() -> None:
    now = [T0]
    activity = Activity(lambda: now[0], window=timedelta(hours=1))
    for i in range(60):
        activity.popped("q1", f"i{i}")
        activity.failed(f"i{i}", "run", "exit", f"failure {i}")
    now[0] = T0 + timedelta(minutes=61)
    activity.popped("q1", "late")
    activity.failed("late", "run", "exit", "the late one")
    snapshot = build(
        info(),
        queues=["q1", "q2"],
        runs=[],
        activity=activity.view(),
        quota=None,
        start_deadline_seconds=60,
    )
    q1, q2 = snapshot["queues"]
    assert (q1["popped_last_hour"], q1["failed_last_hour"]) == (1, 1)
    assert (q2["name"], q2["popped_last_hour"]) == ("q2", 0)
    failures = snapshot["failures"]
    assert len(failures) == 50
    assert failures[0]["message"] == "the late one"
    assert failures[0]["queue"] == "q1"


def test_quota_rows_in_base_units_with_borrowed_and_bars() -> None:
    rows = [
        QuotaRow("root", 0, False, {"cpu": 4 * NANO}, {"cpu": 4 * NANO}, {"cpu": 3 * NANO}),
        QuotaRow("a", 1, True, {"cpu": 1 * NANO}, {"cpu": 4 * NANO}, {"cpu": 3 * NANO}, 2),
        QuotaRow("b", 1, True, {"cpu": 3 * NANO}, {}, {"cpu": 0}, 0),
    ]
    snapshot = build(
        info(),
        queues=[],
        runs=[],
        activity=Activity(lambda: T0).view(),
        quota=rows,
        start_deadline_seconds=60,
    )
    quota = snapshot["quota"]
    assert quota["pending"] == 2
    a = quota["nodes"][1]["resources"][0]
    assert a == {"resource": "cpu", "used": 3, "min": 1, "max": 4, "borrowed": 2}
    assert quota["nodes"][2]["resources"][0]["max"] is None
    html = page.render(snapshot)
    # a: 1 of 4 within min (25%), 2 borrowed (50%), min tick at 25%.
    assert re.search(
        r'width:25\.00%"></div><div class="fill borrow" style="left:25\.00%;width:50\.00%', html
    )


def test_wandb_urls() -> None:
    assert app_url("https://api.wandb.ai") == "https://wandb.ai"
    assert app_url("https://user:pw@wandb.example:8443/") == "https://wandb.example:8443"
    assert run_url("http://127.0.0.1:9", "e", "p", "r 1") == "http://127.0.0.1:9/e/p/runs/r%201"
    assert run_url("https://api.wandb.ai", "e", "", "r") is None


def test_page_refreshes_itself_and_needs_no_script() -> None:
    snapshot = build(
        info(refresh_seconds=7),
        queues=[],
        runs=[],
        activity=Activity(lambda: T0).view(),
        quota=None,
        start_deadline_seconds=60,
    )
    html = page.render(snapshot)
    assert '<meta http-equiv="refresh" content="7">' in html
    assert "<script" not in html
