"""Passivation: which resident actors to stop when a registry is over capacity.

Least recently used first; never the slot just asked for, never a busy one (an
attempt in flight or requests queued). Stopping is safe because a stopped
session's state is all in the store: the next request starts a fresh actor.
"""

from __future__ import annotations

from collections.abc import Iterable

from .slot import Slot

__all__ = ["pick_evictions"]


def pick_evictions(resident: Iterable[Slot], max_resident: int, *, keep: Slot | None = None) -> list[Slot]:
    """The least recently used idle slots to stop so at most ``max_resident`` remain."""
    slots = list(resident)
    excess = len(slots) - max_resident
    if excess <= 0:
        return []
    victims: list[Slot] = []
    for slot in sorted(slots, key=lambda s: s.last_used):
        if len(victims) == excess:
            break
        if slot is keep or slot.closed or slot.busy:
            continue
        victims.append(slot)
    return victims
