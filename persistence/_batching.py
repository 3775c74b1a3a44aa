"""What both group-commit writers do with their queue: take a batch, drain on close,
and link a committed batch's waiting callers into release chains."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["RELEASE_CHAINS", "drain", "fill_batch", "linked_chains"]

#: Release chains a committed batch's callers are split into. Each woken caller
#: releases the one after it in its chain; a woken thread takes tens of
#: microseconds to run again on a VM (a lock ping-pong between two threads here:
#: ~80 us a round trip), several times the Python a caller runs before it blocks
#: again, so with one chain the GIL sits idle while each next caller wakes. A few
#: chains side by side overlap those wake-ups; many would wake callers at once to
#: fight over the GIL. (measured 1.1-1.3x over one chain from 64 threads when it was introduced.)
RELEASE_CHAINS = 2


class _Chained(Protocol):
    next: Any


_C = TypeVar("_C", bound=_Chained)


def linked_chains(batch: Sequence[_C]) -> list[_C]:
    """Link ``batch`` into `RELEASE_CHAINS` interleaved release chains (request ``i``
    is released by request ``i - RELEASE_CHAINS``); returns their heads, for the
    writer to release. The module constant is read at each call (a benchmark varies it)."""
    chains = RELEASE_CHAINS
    for request, successor in zip(batch, batch[chains:]):
        request.next = successor
    return list(batch[:chains])


def fill_batch(source: queue.SimpleQueue[Any], batch: list[Any], limit: int) -> list[Any]:
    """Add to ``batch`` what is queued right now, up to ``limit`` items in all."""
    while len(batch) < limit:
        try:
            batch.append(source.get_nowait())
        except queue.Empty:
            break
    return batch


def drain(source: queue.SimpleQueue[Any], stop: object) -> list[Any]:
    """Everything still queued except ``stop`` markers: requests queued before close()
    still run, their callers are waiting."""
    rest: list[Any] = []
    while True:
        try:
            item = source.get_nowait()
        except queue.Empty:
            return rest
        if item is not stop:
            rest.append(item)
