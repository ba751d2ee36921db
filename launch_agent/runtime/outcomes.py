"""What a step of one item's dispatch ends in when it does not go on: two exceptions.

Each step of `Dispatcher._dispatch` (spec, parse, image, render, create) either returns what the
next one needs or raises one of these, and the dispatcher turns them into an outcome in one
place, as kopf turns `PermanentError` and `TemporaryError` into one `Outcome`
(`kopf/_core/actions/execution.py`):

- `ItemFailed`: the item is at fault (or its queue spec is): W&B is told with
  `failRunQueueItem` and a message a person can act on, and the agent goes on with the next item;
- `LeftForLater`: not the item's fault (the Kubernetes API or W&B unavailable, the agent's own
  credential refused): nothing is reported, the item stays un-acked and W&B offers it again
  once its lease lapses.
"""

from __future__ import annotations

import logging


class ItemFailed(Exception):
    """The item failed: `message` for W&B, `reason` for the failure metric, `stage` for W&B's
    failure kind (`agent`, `build`, `run`)."""

    def __init__(self, message: str, *, stage: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.stage = stage
        self.reason = reason


class LeftForLater(Exception):
    """Leave the item for a later pop; `why` is logged at `level`."""

    def __init__(self, why: str, *, level: int = logging.WARNING) -> None:
        super().__init__(why)
        self.why = why
        self.level = level
