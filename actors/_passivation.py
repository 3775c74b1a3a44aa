"""Passivation: which resident actors to stop, over capacity or idle.

Least recently used first; never the slot just asked for, never a busy one (an
attempt in flight or requests queued). Stopping is safe because a stopped
session's state is all in the store: the next request starts a fresh actor.

`ResidentSet` keeps the resident slots in an LRU order without touching it on
the hot path: appends only bump ``slot.last_used`` (under the slot's own lock),
never the registry's. Each entry remembers the ``last_used`` it was filed with;
an eviction scan takes the front entry, and one used since it was filed (or
busy) goes to the back with its new time instead of being stopped ("second
chance"). So each scan step is O(1), a slot moves at most twice per scan (so an
eviction costs O(1) amortized: a slot is refiled once per use), and nothing is
ever sorted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from .session.slot import Slot

__all__ = ["ResidentSet"]


class ResidentSet:
    """The resident slots of a registry in least-recently-used order (registry lock held)."""

    def __init__(self) -> None:
        self._order: OrderedDict[Slot, float] = OrderedDict()  # slot -> last_used when filed

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Slot]:
        return iter(list(self._order))

    def add(self, slot: Slot) -> None:
        """File ``slot`` as the most recently used."""
        self._order[slot] = slot.last_used
        self._order.move_to_end(slot)

    def discard(self, slot: Slot) -> None:
        self._order.pop(slot, None)

    def clear(self) -> None:
        self._order.clear()

    def over_capacity(self, max_resident: int, *, keep: Slot | None = None) -> list[Slot]:
        """The least recently used idle slots to stop so at most ``max_resident`` remain."""
        excess = len(self._order) - max_resident
        return self._victims(excess, keep=keep) if excess > 0 else []

    def idle_since(self, cutoff: float) -> list[Slot]:
        """Every idle slot not used since ``cutoff`` (monotonic seconds)."""
        return self._victims(len(self._order), cutoff=cutoff)

    def _victims(self, wanted: int, *, keep: Slot | None = None, cutoff: float | None = None) -> list[Slot]:
        """Scan from the least recently filed entry, each entry at most twice (a first
        look may only refile it with its real time). Victims leave the set (the
        caller stops them); closed slots are dropped."""
        victims: list[Slot] = []
        for _ in range(2 * len(self._order)):
            if len(victims) == wanted or not self._order:
                break
            slot, filed = next(iter(self._order.items()))
            if slot.closed:
                del self._order[slot]
                continue
            if cutoff is not None and filed >= cutoff:
                break  # filed since the cutoff, like (nearly) everything behind it
            used = slot.last_used
            recent = used > filed if cutoff is None else used >= cutoff
            if slot is keep or slot.busy or recent:
                self._order[slot] = used  # second chance: to the back, with its real time
                self._order.move_to_end(slot)
                continue
            del self._order[slot]
            victims.append(slot)
        return victims
