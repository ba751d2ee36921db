"""The errors of the W&B client, one class per thing a caller does differently.

- `WandbAuthError`: the key is wrong (HTTP 401/403, or `viewer` is null). Nothing will get better
  by retrying; the agent stops at start-up with the message, which names the W&B URL.
- `WandbUnavailable`: W&B did not answer usefully within the retry budget (network errors,
  5xx, 429, a 200 whose body is not JSON at all). The caller pauses the work that needed W&B
  and tries again later; the process never ends on an outage.
- `WandbGraphQLError`: the server answered with GraphQL `errors` (bad input, unknown queue, a
  schema difference). Retrying the same request gives the same answer.
- `WandbNotFound`: an object the agent needs (its project, its launch agent) is absent.
- `WandbProtocolError`: a non-retryable answer the client cannot use (a 4xx without GraphQL
  errors, a wrong shape); the message says which operation and what was wrong.
- `WandbResponseTooLarge`: a `WandbProtocolError` for an answer over `wandb.max_response_bytes`,
  refused while it streamed (the connection is closed, the rest never read). Not retried:
  the same request gets the same flood, and a pop retried would lease more items.
- `WandbAckUncertain`: an ack whose first attempt may have reached the server was retried and
  the retry answered `success: false`: the item may be ours or another agent's.

All derive from `WandbError`, so a caller that only needs "W&B failed" catches one class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launch_agent.model.display import clip

MAX_ERROR_MESSAGE = 1_000


class WandbError(Exception):
    """Any failure talking to W&B."""


class WandbAuthError(WandbError):
    """W&B refused the API key."""


class WandbUnavailable(WandbError):
    """W&B could not be reached within the retry budget; try again later."""

    def __init__(self, message: str, *, attempts: int, last_error: str) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error


class WandbGraphQLError(WandbError):
    """The server answered with GraphQL `errors`."""

    def __init__(self, operation: str, errors: Sequence[Mapping[str, Any]]) -> None:
        self.operation = operation
        self.errors = [dict(e) for e in errors]
        # W&B's words may quote what the agent sent (a refused 200,000-character item id):
        # each is clipped before it reaches a log line or a failure message.
        self.messages = [clip(str(e.get("message", e)), MAX_ERROR_MESSAGE) for e in errors]
        super().__init__(f"W&B rejected {operation}: " + "; ".join(self.messages))


class WandbNotFound(WandbError):
    """An object the agent needs does not exist (or the key cannot see it)."""


class WandbProtocolError(WandbError):
    """An answer the client cannot use: wrong status, not JSON, or the wrong shape."""


class WandbResponseTooLarge(WandbProtocolError):
    """An answer over the configured limit; the message names the operation and the limit."""


class WandbAckUncertain(WandbError):
    """An ack was retried after an attempt with an unknown outcome and then refused."""

    def __init__(self, item_id: str, run_name: str) -> None:
        self.item_id = item_id
        self.run_name = run_name
        super().__init__(
            f"ackRunQueueItem {item_id} (runName {run_name}): an earlier attempt may have"
            " reached W&B before the connection failed, and the retry was refused as already"
            " acknowledged; W&B does not say by whom"
        )
