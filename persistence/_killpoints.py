"""Test-only kill points: SIGKILL this process at a named point of a write transaction.

Fault-injection tests (tests/faults) and ``simulate --chaos`` set
``SESSION_ACTORS_KILL_AT=<operation>:<point>[:<nth>]`` in a worker process's
environment; the store then kills that process with SIGKILL the ``nth`` time
(default the first) a write transaction holding ``operation`` reaches ``point``:

- ``before_begin``: the transaction is about to start;
- ``after_fence``: the fencing UPDATE of ``commit_compaction`` has matched;
- ``before_commit``: every statement ran, COMMIT is next (an SQLite batch of
  appends written as one statement outside a transaction: just before it);
- ``after_commit``: COMMIT returned, the caller has not been answered.

``operation`` is a store method name (``append``, ``commit_compaction``, ...) or
``*`` for any. Unset (the normal case) the stores pay one module-level boolean
test per transaction: ``ARMED`` is read once, when this module is imported.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable

__all__ = ["ARMED", "ENV_KILL_AT", "POINTS", "parse", "reached"]

ENV_KILL_AT = "SESSION_ACTORS_KILL_AT"
POINTS = ("before_begin", "after_fence", "before_commit", "after_commit")


def parse(spec: str) -> tuple[str, str, int]:
    """``(operation, point, nth)`` of a spec; ValueError when malformed."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[1] not in POINTS or not parts[0]:
        raise ValueError(f"{ENV_KILL_AT} must be <operation>:<point>[:<nth>] with a point in {POINTS}, got {spec!r}")
    nth = int(parts[2]) if len(parts) == 3 else 1
    if nth < 1:
        raise ValueError(f"{ENV_KILL_AT}: nth must be >= 1, got {nth}")
    return parts[0], parts[1], nth


_SPEC = os.environ.get(ENV_KILL_AT) or None
_TARGET = parse(_SPEC) if _SPEC else None
ARMED = _TARGET is not None
_lock = threading.Lock()
_seen = 0


def reached(point: str, operations: str | Iterable[str]) -> None:
    """Kill this process if armed for ``point`` and one of ``operations``."""
    global _seen
    if _TARGET is None:
        return
    operation, target_point, nth = _TARGET
    if point != target_point:
        return
    ops = (operations,) if isinstance(operations, str) else tuple(operations)
    if operation != "*" and operation not in ops:
        return
    with _lock:
        _seen += 1
        if _seen < nth:
            return
    os.kill(os.getpid(), signal.SIGKILL)
