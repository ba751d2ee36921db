"""The runtime's one monotonic clock, injected.

Every part that measures intervals (the poller's agent checks, the dispatcher's queue latency,
the tracker's explain grace, the stop checks' timeout, the quota driver's tick) takes a `Clock`
from its constructor; `Agent` passes the same one to all of them, so a test can drive time
instead of sleeping through it. Wall-clock time (timestamps in Kubernetes objects, the quota
engine's enqueue times) is a separate `now: () -> datetime`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]

# The event loop's own clock is `time.monotonic` too, so timers and these readings agree.
monotonic: Clock = time.monotonic
