"""The pending caps: how many runs the poller may pop per queue when a group of queues (a quota
leaf, a Kueue LocalQueue) may hold only so many runs that are not started yet."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K")


def share_caps(
    groups: Mapping[K, Sequence[str]], free: Mapping[K, int], turn: int
) -> dict[str, int]:
    """Each group's free slots shared by its queues; who gets a remainder rotates with `turn`,
    so queues that share a group take turns at the odd slot."""
    caps: dict[str, int] = {}
    for key, members in groups.items():
        share, extra = divmod(max(0, free.get(key, 0)), len(members))
        for i, queue in enumerate(members):
            rank = (i - turn) % len(members)
            caps[queue] = share + (1 if rank < extra else 0)
    return caps


class PendingHolds:
    """Popped items that hold a pending slot of their group before the group counts their run.

    An item W&B offers again while its first dispatch still runs holds one slot (`take` says
    whether this call took it). Releasing a slot calls `on_room` (the poller's wake-up)."""

    def __init__(self, on_room: Callable[[], None]) -> None:
        self.on_room = on_room
        self._held: Counter[str] = Counter()
        self._holds: dict[str, str] = {}  # item id → the group it holds a slot of

    def take(self, rqi_id: str, group: str) -> bool:
        if rqi_id in self._holds:
            return False
        self._held[group] += 1
        self._holds[rqi_id] = group
        return True

    def release(self, rqi_id: str) -> None:
        group = self._holds.pop(rqi_id, None)
        if group is not None:
            self._held[group] -= 1
            self.on_room()

    def held(self, group: str) -> int:
        return self._held[group]
