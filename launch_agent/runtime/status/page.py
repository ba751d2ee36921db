"""The status page: a snapshot (`snapshot.build`) rendered as one HTML document (pure).

Server-rendered and readable without JavaScript; it reloads itself with
`<meta http-equiv="refresh">`. Every value goes through the one sanitizer
(`model.display.terminal_text`: control characters, bidi overrides and line separators shown
escaped, line breaks kept for log tails) and then `html.escape` (run names, reasons, queue
names and messages come from submitters and their containers), links are only ever `http(s)`
URLs the snapshot built, and quota bars are plain `<div>` widths computed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from html import escape
from typing import Any

from launch_agent.model.display import terminal_text

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d2330;background:#fafbfc}
h1{font-size:1.4rem;margin:0 0 .3rem} h2{font-size:1.1rem;margin:1.4rem 0 .4rem}
table{border-collapse:collapse;font-size:.85rem;background:#fff}
th,td{border:1px solid #d9dde3;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef1f5} .ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600}
.muted{color:#6b7280} .bar{position:relative;width:14rem;height:.9rem;background:#eef1f5;
border:1px solid #c7ccd4} .fill{position:absolute;top:0;left:0;height:100%;background:#3b82f6}
.borrow{background:#f59e0b} .min{position:absolute;top:-2px;height:calc(100% + 4px);
border-left:2px solid #111} .msg{max-width:40rem;white-space:pre-wrap;word-break:break-word}
"""


def _e(value: object) -> str:
    return escape(terminal_text("" if value is None else str(value)), quote=True)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"


def _when(iso: object, now: object) -> str:
    """`12s ago` (the exact time in the title), from the snapshot's ISO times."""
    if not isinstance(iso, str) or not isinstance(now, str):
        return "—"
    try:
        ago = (datetime.fromisoformat(now) - datetime.fromisoformat(iso)).total_seconds()
    except ValueError:
        return _e(iso)
    return f'<span title="{_e(iso)}">{_e(_age(max(0.0, ago)))} ago</span>'


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], empty: str) -> str:
    names = list(headers)
    head = "".join(f"<th>{_e(h)}</th>" for h in names)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="muted">{_e(empty)}</p>'
    thead = f"<thead><tr>{head}</tr></thead>" if any(names) else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _ok(value: bool | None, yes: str = "ok", no: str = "failing") -> str:
    if value is None:
        return '<span class="muted">not yet</span>'
    return f'<span class="ok">{yes}</span>' if value else f'<span class="bad">{no}</span>'


def _link(url: object, text: object) -> str:
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return f'<a href="{_e(url)}">{_e(text)}</a>'
    return _e(text)


def quantity(resource: str, value: float | None) -> str:
    if value is None:
        return "∞"
    if "memory" in resource or "storage" in resource:
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{value / size:.1f}{unit}"
    return f"{value:g}"


def bar(res: Mapping[str, Any]) -> str:
    """Used (blue up to min, amber above: borrowed) on a scale of max (or of the larger of
    used and min when the node has no max); a black tick marks min."""
    used, low, high = float(res["used"]), float(res["min"]), res["max"]
    scale = float(high) if high else max(used, low, 1.0)
    scale = max(scale, used, 1e-12)
    within = min(used, low) / scale * 100
    above = max(0.0, used - low) / scale * 100
    tick = min(low / scale * 100, 100)
    label = (
        f"{quantity(res['resource'], used)} used of max "
        f"{quantity(res['resource'], high)} (min {quantity(res['resource'], low)})"
    )
    return (
        f'<div class="bar" role="img" aria-label="{_e(label)}" title="{_e(label)}"'
        f' data-resource="{_e(res["resource"])}" data-used="{used:g}">'
        f'<div class="fill" style="width:{within:.2f}%"></div>'
        f'<div class="fill borrow" style="left:{within:.2f}%;width:{above:.2f}%"></div>'
        f'<div class="min" style="left:{tick:.2f}%"></div></div>'
    )


def _agent(agent: Mapping[str, Any]) -> str:
    apis = agent["apis"]
    problems = agent["problems"]
    ready = (
        '<span class="ok">ready</span>'
        if agent["ready"]
        else '<span class="bad">not ready</span>: ' + _e("; ".join(problems))
    )
    rows = [
        ("Agent", _e(agent["name"]) + f' <span class="muted">v{_e(agent["version"])}</span>'),
        (
            "Role",
            _e(agent["role"]) + f' <span class="muted">(leader: {_e(agent["leader"])})</span>',
        ),
        ("Host", _e(agent["hostname"])),
        ("Uptime", _e(_age(agent["uptime_seconds"]))),
        ("Readiness", ready),
        (
            "W&B",
            _ok(apis["wandb"]["ok"])
            + " "
            + _link(agent["wandb"]["url"], agent["wandb"]["url"])
            + (f' <span class="muted">entity {_e(agent["wandb"]["entity"])}</span>'),
        ),
        ("Kubernetes", _ok(apis["kubernetes"]["ok"]) + " " + _e(", ".join(agent["namespaces"]))),
        ("Last poll", _when(agent["last_poll"], agent["now"]) if agent["last_poll"] else "never"),
        ("Admission", _e(agent["quota_mode"]) + f" · builder {_e(agent['builder'])}"),
    ]
    return _table(("", ""), ((f"<b>{k}</b>", v) for k, v in rows), "")


def _queues(queues: list[Mapping[str, Any]], now: str) -> str:
    return _table(
        ("Queue", "Popped (1h)", "Running", "Tracked", "Failed (1h)", "Last pop"),
        (
            (
                _e(q["name"]),
                _e(q["popped_last_hour"]),
                _e(q["running"]),
                _e(q["tracked"]),
                _e(q["failed_last_hour"]),
                _when(q["last_pop"], now),
            )
            for q in queues
        ),
        "No queue configured.",
    )


def _runs(runs: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{_e(k)} {_e(v)}" for k, v in runs["by_state"].items() if v)
    head = (
        f"<p>{_e(runs['total'])} run(s) tracked"
        + (f" ({counts})" if counts else "")
        + (
            f", showing the {_e(runs['shown'])} most recent"
            if runs["shown"] < runs["total"]
            else ""
        )
        + (
            f'; <span class="bad">{_e(runs["past_start_deadline"])} past the start deadline</span>'
            if runs["past_start_deadline"]
            else ""
        )
        + "</p>"
    )
    # MultiKueue runs name their worker cluster; the column is there only when one does.
    multi = any(r.get("placements") for r in runs["items"])
    rows = (
        (
            _link(r["url"], r["run_id"] or "—"),
            _e(r["item"]),
            _e(r["queue"]),
            (
                f'<span class="bad">{_e(r["state"])}</span>'
                if r["past_start_deadline"]
                else _e(r["state"])
            ),
            f'<span class="msg">{_e(r["reason"])}</span>',
            _e(_age(r["age_seconds"])),
            _e(r["workload"]),
            *([worker_cell(r)] if multi else []),
        )
        for r in runs["items"]
    )
    headers = ("Run", "Item", "Queue", "State", "Reason", "Age", "Workload")
    return head + _table((*headers, *(["Worker"] if multi else [])), rows, "No run in flight.")


def worker_cell(run: Mapping[str, Any]) -> str:
    """The run's worker now (— while Kueue holds it), and where it ran before."""
    placements = [str(p) for p in run.get("placements") or ()]
    now = run.get("worker")
    earlier = placements[:-1] if now and placements and placements[-1] == now else placements
    text = _e(now or "—")
    if earlier:
        text += f' <span class="muted">(before: {_e(", ".join(earlier))})</span>'
    return text


def _quota(quota: Mapping[str, Any] | None) -> str:
    if quota is None:
        return '<p class="muted">The agent does not admit against a quota tree (quota.mode).</p>'
    rows = []
    for node in quota["nodes"]:
        name = "&nbsp;" * 4 * int(node["depth"]) + _e(node["name"])
        pending = _e(node["pending"]) if node["leaf"] else ""
        for i, res in enumerate(node["resources"]):
            r = res["resource"]
            rows.append(
                (
                    name if i == 0 else "",
                    _e(r),
                    bar(res),
                    _e(quantity(r, res["used"])),
                    _e(quantity(r, res["min"])),
                    _e(quantity(r, res["max"])),
                    _e(quantity(r, res["borrowed"])),
                    pending if i == 0 else "",
                )
            )
    return _table(
        ("Node", "Resource", "Usage", "Used", "Min", "Max", "Borrowed", "Pending"),
        rows,
        "The tree has no resources.",
    )


def _builds(builds: Mapping[str, Any], now: str) -> str:
    recent = builds["recent"]
    head = (
        f"<p>Builder {_e(builds['builder'])}: recently {_e(recent['built'])} built,"
        f" {_e(recent['cached'])} cached, {_e(recent['failed'])} failed.</p>"
    )
    rows = (
        (_when(b["at"], now), _e(b["result"]), _e(b["seconds"]), _e(b["image"]))
        for b in builds["items"]
    )
    return head + _table(("At", "Result", "Seconds", "Image"), rows, "No build yet.")


def _failures(failures: list[Mapping[str, Any]], now: str) -> str:
    rows = (
        (
            _when(f["at"], now),
            _e(f["item"]),
            _e(f["queue"] or "—"),
            _e(f["stage"]),
            _e(f["reason"]),
            f'<span class="msg">{_e(f["message"])}</span>',
        )
        for f in failures
    )
    return _table(
        ("At", "Item", "Queue", "Stage", "Reason", "Message"), rows, "No failure recently."
    )


def render(snapshot: Mapping[str, Any]) -> str:
    agent = snapshot["agent"]
    refresh = int(agent["refresh_seconds"])
    sections = [
        ("agent", "Agent", _agent(agent)),
        ("queues", "Queues", _queues(snapshot["queues"], agent["now"])),
        ("runs", "Runs", _runs(snapshot["runs"])),
        ("quota", "Quota", _quota(snapshot["quota"])),
        ("builds", "Builds", _builds(snapshot["builds"], agent["now"])),
        ("failures", "Last failures", _failures(snapshot["failures"], agent["now"])),
    ]
    body = "".join(
        f'<section id="{key}"><h2>{_e(title)}</h2>{html}</section>' for key, title, html in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{refresh}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(agent['name'])} · launch-agent status</title><style>{STYLE}</style></head>"
        f"<body><h1>{_e(agent['name'])}</h1>"
        f'<p class="muted">launch-agent status at {_e(agent["now"])}; refreshes every'
        f" {refresh}s; JSON at <code>/api/status</code></p>{body}</body></html>\n"
    )
