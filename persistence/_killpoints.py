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
``*`` for any. The stores name only the points (`persistence._hooks.point`); set,
the variable installs `KillPoints` there when the hooks are imported. Unset (the
normal case) nothing is installed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable

__all__ = ["ENV_KILL_AT", "POINTS", "KillPoints", "from_environment", "parse"]

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


class KillPoints:
    """The hook (`persistence._hooks.FaultHook`) that SIGKILLs this process the
    ``nth`` time a write transaction holding ``operation`` reaches ``point``."""

    def __init__(self, operation: str, point: str, nth: int) -> None:
        self._target = (operation, point, nth)
        self._lock = threading.Lock()
        self._seen = 0

    def reached(self, point: str, operations: str | Iterable[str]) -> None:
        operation, target_point, nth = self._target
        if point != target_point:
            return
        ops = (operations,) if isinstance(operations, str) else tuple(operations)
        if operation != "*" and operation not in ops:
            return
        with self._lock:
            self._seen += 1
            if self._seen < nth:
                return
        os.kill(os.getpid(), signal.SIGKILL)


def from_environment() -> KillPoints | None:
    """The kill points ``SESSION_ACTORS_KILL_AT`` asks for (None: unset, the normal case)."""
    spec = os.environ.get(ENV_KILL_AT) or None
    return None if spec is None else KillPoints(*parse(spec))
