"""kube-apiserver's `/metrics` text read into request counts (`bench dispatch --cluster real`),
on lines as kube-apiserver v1.37 writes them, and the created-once check of its harness."""

from __future__ import annotations

import pytest

from launch_agent.demo.apimetrics import (
    MetricsError,
    clients_only,
    parse_labels,
    request_counts,
    started_between,
)
from launch_agent.demo.bench_real import check_once, created_once, job_body
from launch_agent.demo.dispatch import BenchError, Creates
from launch_agent.sandbox.wandb import LaunchState

TOTAL = (
    'apiserver_request_total{{code="{code}",component="{component}",dry_run="",group="{group}",'
    'resource="{resource}",scope="resource",subresource="{sub}",verb="{verb}",version="v1"}} {n}'
)
LONG = (
    'apiserver_longrunning_requests{{component="apiserver",group="{group}",resource="{resource}",'
    'scope="namespace",subresource="",verb="WATCH",version="v1"}} {n}'
)


def total(verb: str, resource: str, n: int, **labels: str) -> str:
    fields = {"code": "201", "component": "apiserver", "group": "batch", "sub": ""} | labels
    return TOTAL.format(verb=verb, resource=resource, n=n, **fields)


def test_counts_add_the_codes_of_a_route_and_the_watches_open_now() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
            "# TYPE apiserver_request_total counter",
            total("POST", "jobs", 998),
            total("POST", "jobs", 2, code="409"),
            total("GET", "secrets", 1, code="404", group=""),
            total("PATCH", "jobs", 3, sub="status"),
            total("WATCH", "jobs", 4, code="200"),
            LONG.format(group="batch", resource="jobs", n=2),
            # Non-resource requests are nobody's dispatch.
            total("GET", "", 37, code="500", component="", group="", sub="/readyz"),
            'apiserver_request_duration_seconds_bucket{resource="jobs",verb="POST",le="0.1"} 9',
        ]
    )
    assert request_counts(text) == {
        "POST jobs": 1000,
        "GET secrets": 1,
        "PATCH jobs/status": 3,
        "WATCH jobs": 6,
    }


def test_a_value_in_exponent_form_is_read() -> None:
    assert request_counts(total("POST", "jobs", 0).replace(" 0", " 1.2e+06")) == {
        "POST jobs": 1_200_000
    }


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('apiserver_request_total{verb="POST",resource="jobs"}', "line 2: not a sample"),
        ('apiserver_request_total{verb="POST",resource="jobs"} many', "line 2: value 'many'"),
    ],
)
def test_a_broken_line_is_named(line: str, reason: str) -> None:
    with pytest.raises(MetricsError, match=reason):
        request_counts("# TYPE apiserver_request_total counter\n" + line)


def test_label_values_may_hold_escaped_quotes_and_commas() -> None:
    assert parse_labels(r'a="x,\"y\"",b=""') == {"a": 'x,"y"', "b": ""}


def test_a_window_counts_what_started_in_it() -> None:
    # A watch open before the window and ended in it: +1 finished, -1 open, so none started.
    before = {"WATCH pods": 1, "POST jobs": 10, "PUT leases": 6}
    after = {"WATCH pods": 1, "WATCH jobs": 1, "POST jobs": 1010, "PUT leases": 7}
    window = started_between(after, before)
    assert window == {"POST jobs": 1000, "PUT leases": 1, "WATCH jobs": 1}
    assert clients_only(window) == ({"POST jobs": 1000, "WATCH jobs": 1}, {"PUT leases": 1})


def _creates(run_ids: list[str]) -> Creates:
    creates = Creates()
    for n, run in enumerate(run_ids):
        body = job_body("ns", n)
        body["metadata"]["labels"]["wandb.ai/run-id"] = run
        creates.listener("batch/jobs", "ADDED", body)
    return creates


def _acked(count: int) -> LaunchState:
    state = LaunchState(entity="ent")
    state.add_queue("q1")
    for n in range(count):
        item = state.push_by_name("ent", "model-registry", "q1", {})
        item.associated_run_id = f"run-{n}"
    return state


@pytest.mark.parametrize(
    ("run_ids", "fails"),
    [
        (["run-0", "run-1", "run-2"], False),
        (["run-0", "run-1"], True),  # one lost
        (["run-0", "run-1", "run-1"], True),  # one twice
        (["run-0", "run-1", "other"], True),  # a Job of no item's run
    ],
)
def test_every_item_has_its_job_once(run_ids: list[str], fails: bool) -> None:
    items = list(_acked(3).items.values())
    result = {
        "agent": "a",
        "namespace": "ns",
        "runs": 3,
        "once": created_once(items, _creates(run_ids)),
    }
    if fails:
        with pytest.raises(BenchError, match="expected 3 Jobs, one per item"):
            check_once(result)
    else:
        check_once(result)
