"""What both group-commit writers do with their queue: take a batch, drain on close."""

from __future__ import annotations

import queue
from typing import Any

__all__ = ["drain", "fill_batch"]


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
    rest = []
    while True:
        try:
            item = source.get_nowait()
        except queue.Empty:
            return rest
        if item is not stop:
            rest.append(item)
