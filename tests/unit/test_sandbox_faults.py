"""Fault rules: matching, rates (deterministic), limited counts, outages; the bounded log."""

from __future__ import annotations

import pytest

from launch_agent.sandbox.faults import FaultRule, Faults, RequestLog

MATCH = [
    ("*", "POST jobs", True),
    ("POST jobs", "POST jobs", True),
    ("POST jobs", "POST pods", False),
    ("POST *", "POST secrets", True),
    ("WATCH *", "POST secrets", False),
    ("popFromRunQueue", "popFromRunQueue", True),
]


@pytest.mark.parametrize(("match", "key", "expected"), MATCH)
def test_rule_matching(match: str, key: str, expected: bool) -> None:
    assert FaultRule(match).matches(key) is expected


def test_times_limits_a_rule() -> None:
    faults = Faults()
    faults.add(FaultRule("POST jobs", status=500, times=2))
    fired = [faults.pick("POST jobs") is not None for _ in range(4)]
    assert fired == [True, True, False, False]


def test_rate_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[bool]:
        faults = Faults(seed=seed)
        faults.add(FaultRule("*", status=429, rate=0.3))
        return [faults.pick("GET pods") is not None for _ in range(200)]

    first = run(7)
    assert first == run(7)
    assert 30 < sum(first) < 90


def test_outage_answers_everything_until_it_ends() -> None:
    faults = Faults()
    faults.outage(60, status=502)
    rule = faults.pick("anything")
    assert rule is not None
    assert rule.status == 502
    faults.end_outage()
    assert faults.pick("anything") is None


def test_request_log_is_bounded_but_counts_everything() -> None:
    log = RequestLog(maxlen=3)
    for i in range(10):
        log.record("POST", f"/x/{i}", "POST jobs", 201, 0.001)
    assert len(log) == 3
    assert log.count("POST jobs") == 10
    assert [e.path for e in log] == ["/x/7", "/x/8", "/x/9"]


def test_observers_see_every_request_with_the_rule_picked_for_it() -> None:
    faults = Faults()
    refused = faults.add(FaultRule("POST jobs", status=503, times=1))
    seen: list[tuple[str, str, FaultRule | None]] = []
    faults.observers.append(lambda key, path, rule: seen.append((key, path, rule)))
    path = "/apis/batch/v1/namespaces/default/jobs"
    assert faults.pick("POST jobs", path) is refused
    assert faults.pick("POST jobs", path) is None
    faults.outage(60)
    outage = faults.pick("popFromRunQueue", "/graphql")
    assert outage is not None and outage.status == 503
    assert seen == [
        ("POST jobs", path, refused),
        ("POST jobs", path, None),
        ("popFromRunQueue", "/graphql", outage),
    ]
    faults.clear()  # the fault script goes; observers stay until their owner removes them
    assert faults.observers
