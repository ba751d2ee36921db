"""The W&B client's retry rules: which answers are retried, how long it waits, Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.adapters.retry import (
    RetryPolicy,
    parse_retry_after,
    rate_limit_wait,
    wandb_verdict,
)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, "ok"),
        (204, "ok"),
        (400, "fail"),
        (401, "auth"),
        (403, "auth"),
        (404, "fail"),
        (408, "retry"),
        (409, "fail"),
        (429, "retry"),
        (500, "retry"),
        (502, "retry"),
        (503, "retry"),
        (504, "retry"),
    ],
)
def test_classify(status: int, verdict: str) -> None:
    assert wandb_verdict(status) == verdict


POLICY = RetryPolicy(attempts=5, base_delay=1.0, max_delay=8.0, max_retry_after=30.0)


@pytest.mark.parametrize(
    ("retry", "rand", "wait"),
    [
        (0, 0.0, 0.5),
        (0, 0.999, 0.9995),
        (1, 0.0, 1.0),
        (2, 0.5, 3.0),
        (3, 1.0, 8.0),
        (4, 0.0, 4.0),  # capped at max_delay
        (1000, 0.0, 4.0),  # no overflow for absurd retry counts
    ],
)
def test_backoff_table(retry: int, rand: float, wait: float) -> None:
    assert POLICY.backoff(retry, rand) == pytest.approx(wait)


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [
        (None, 0.5),
        (0.0, 0.5),
        (10.0, 10.0),
        (30.0, 30.0),
        (31.0, None),  # longer than the policy will wait inside one call: give up now
    ],
)
def test_delay_honours_retry_after(retry_after: float | None, wait: float | None) -> None:
    assert POLICY.delay(0, 0.0, retry_after) == wait


@given(retry=st.integers(0, 64), rand=st.floats(0, 1, exclude_max=True))
def test_backoff_is_never_immediate_and_never_above_the_cap(retry: int, rand: float) -> None:
    wait = POLICY.backoff(retry, rand)
    step = min(POLICY.max_delay, POLICY.base_delay * 2**retry)
    assert step / 2 <= wait <= step <= POLICY.max_delay


NOW = datetime(2026, 11, 30, 0, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("7", 7.0),
        (" 0 ", 0.0),
        ("Mon, 30 Nov 2026 00:00:12 GMT", 12.0),
        ("Sun, 29 Nov 2026 23:59:00 GMT", 0.0),  # a date in the past: retry now
        ("soon", None),
        ("-3", None),
        ("", None),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, NOW) == seconds


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attempts": 0}, "attempts"),
        ({"base_delay": 5.0, "max_delay": 1.0}, "base_delay"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_policy_refuses_nonsense(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("remaining", "reset", "wait"),
    [
        ("0", "12", 12.0),
        (" 0 ", "0.5", 0.5),
        ("3", "12", None),  # some left: no hold
        ("0", None, None),
        (None, "12", None),
        ("0", "soon", None),  # unreadable: ignored, the 429s (if any) still say when
        ("none", "12", None),
        ("0", "-1", None),
        ("0", "inf", None),
    ],
)
def test_rate_limit_headers(remaining: str | None, reset: str | None, wait: float | None) -> None:
    assert rate_limit_wait(remaining, reset) == wait
