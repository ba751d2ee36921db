"""When and how long the W&B client waits before trying a request again (pure).

The reference agent has no backoff at all and dies after one 19-second outage. Here every call
gets a bounded number of attempts with jittered exponential backoff; when they are used up the
client raises `WandbUnavailable` and the caller pauses that work and tries again later.

- Retried: network errors (refused, reset, timed out), HTTP 5xx, 408 and 429.
- 429 and 503 may carry `Retry-After` (seconds or an HTTP date): the client waits at least that
  long. A `Retry-After` longer than `max_retry_after` ends the retries at once, since waiting
  inside one call that long would stall the caller; the caller's own pause is the better place.
- Not retried: 401/403 (the key is wrong), other 4xx, GraphQL `errors` (same request, same
  answer).

The jitter is "equal jitter": half of each backoff step is fixed and half random, so agents
restarted together spread out but no retry is ever immediate.
"""

from __future__ import annotations

from typing import Literal

from launch_agent.adapters.retry import RetryPolicy, parse_retry_after

__all__ = ["WANDB_RETRY", "RetryPolicy", "Verdict", "classify", "parse_retry_after"]

Verdict = Literal["ok", "retry", "auth", "fail"]


# The W&B client's own timing: W&B answers slower than an API server and an outage is
# longer-lived, so fewer, longer-spaced attempts.
WANDB_RETRY = RetryPolicy(attempts=5, base_delay=0.5, max_delay=15.0, timeout=20.0)


def classify(status: int) -> Verdict:
    if 200 <= status < 300:
        return "ok"
    if status in (401, 403):
        return "auth"
    if status >= 500 or status in (408, 429):
        return "retry"
    return "fail"
