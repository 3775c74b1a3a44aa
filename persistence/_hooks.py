"""Test hooks of the write path: the places where a fault injector takes control.

The stores call `point` at each named point of a write transaction (``before_begin``,
``after_fence``, ``before_commit``, ``after_commit``: see `persistence._killpoints`)
and ask `skipped` before a safety check a test may turn off (see
`persistence._mutations`). The guarantee's code names neither: it names the
point or the check, and whatever is installed here decides.

With no hook installed (always, outside tests and ``simulate --chaos``) `point` is
one read of a module global and `skipped` one set look-up. A process started with
``SESSION_ACTORS_KILL_AT`` installs the kill points when this module is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from . import _killpoints, _mutations

__all__ = ["FaultHook", "install", "point", "skipped", "uninstall"]


class FaultHook(Protocol):
    """What a fault injector supplies (kill points, a test's own probe)."""

    def reached(self, point: str, operations: str | Iterable[str]) -> None:
        """A write transaction holding ``operations`` (store method names) is at ``point``."""


#: What ``SESSION_ACTORS_KILL_AT`` asks for, read once; restored by `uninstall`.
_from_environment: FaultHook | None = _killpoints.from_environment()
_active: FaultHook | None = _from_environment


def install(hook: FaultHook) -> None:
    """Route every point to ``hook`` until `uninstall` (one hook at a time: the last wins)."""
    global _active
    _active = hook


def uninstall(hook: FaultHook) -> None:
    global _active
    if _active is hook:
        _active = _from_environment


def point(name: str, operations: str | Iterable[str]) -> None:
    """A write transaction holding ``operations`` reached point ``name``."""
    if _active is not None:
        _active.reached(name, operations)


def skipped(check: str) -> bool:
    """Whether a test turned the safety check ``check`` off (`persistence._mutations.NAMES`)."""
    return bool(_mutations.DISABLED) and _mutations.is_disabled(check)
