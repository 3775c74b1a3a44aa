"""`mutation`: turn a safety check off for a block, to prove a test would catch its loss."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from persistence.internal import mutations as _mutations
from protocol import InvalidArgumentError

__all__ = ["mutation"]


@contextmanager
def mutation(*names: str) -> Iterator[None]:
    """Disable the named checks until the block ends: a compaction commit's ``"fence"``,
    ``"ended"``, ``"watermark"``, ``"snapshot"``, ``"parent_open"`` (``"fencing"``: all
    five), and ``"join"``.

    For tests only: a run inside the block can fork or lose messages. The harness
    should then find the failure, and its replay should reproduce it.
    """
    unknown = [n for n in names if n not in _mutations.NAMES]
    if unknown or not names:
        raise InvalidArgumentError(f"mutation() takes names from {_mutations.NAMES}, got {names!r}")
    added = [n for n in names if n not in _mutations.DISABLED]
    _mutations.DISABLED.update(added)
    try:
        yield
    finally:
        _mutations.DISABLED.difference_update(added)
