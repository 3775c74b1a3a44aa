"""Scheduling hooks: the places where a deterministic scheduler takes control.

The runtime calls these at every point where the order of events between its
threads matters: before an actor handles a message (`point`), where a thread
waits for another (`park`, `wait`, `join`), and wherever it reads the time that
drives leases, turns, cooldowns and idle eviction (`monotonic`). Threads and
pool tasks that run runtime code are announced through `Thread` and `task`.

With no scheduler installed (always, outside `actors.testing.Harness`) each hook
is one read of a module global and then the plain operation: no locks, no
allocation. With one installed, the scheduler runs exactly one of the threads it
controls at a time and decides which goes next at each hook; a thread it does not
control (the store's writer, a caller outside the harness) passes straight through.

A hook may say what the thread does from there until its next hook: its `Footprint`
(the conversations it touches, and whether it writes them). Two steps whose
footprints do not conflict commute, so a search need not try them in both orders.
A hook that says nothing conflicts with every step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from protocol import ConfigurationError

__all__ = [
    "LOCAL",
    "Footprint",
    "Scheduler",
    "Thread",
    "controlled",
    "install",
    "join",
    "monotonic",
    "park",
    "point",
    "scope",
    "task",
    "uninstall",
    "wait",
]


class Footprint(NamedTuple):
    """What a step touches: the conversations (a session's incarnation, shared by its
    lineage) it reads or writes (a store row, an actor's state or mailbox). No
    conversations: only the thread's own state."""

    conversations: frozenset[str]
    writes: bool

    def conflicts(self, other: Footprint | None) -> bool:
        """Might the two steps give another result in the other order? (None: unknown.)"""
        if other is None:
            return True
        return bool(self.conversations & other.conversations) and (self.writes or other.writes)


#: A step that touches nothing another thread sees.
LOCAL = Footprint(frozenset(), False)


class Scheduler(Protocol):
    """What the runtime asks of a scheduler (implemented in `actors.testing`)."""

    def spawned(self) -> object:
        """A controlled thread or task was created: counted as running until it
        reaches its first hook. Returns its token."""

    def adopt(self, token: object) -> None:
        """The calling thread now runs the work of ``token``."""

    def finished(self, token: object) -> None:
        """The work of ``token`` ended on the calling thread."""

    def point(self, label: str, footprint: Footprint | None = None) -> None:
        """Block until the scheduler picks the calling thread (at ``label``)."""

    def park(
        self, label: str, ready: Callable[[], bool], timeout: float | None, footprint: Footprint | None = None
    ) -> float | None:
        """Block until ``ready()`` or ``timeout`` virtual seconds passed, and the
        scheduler picks the calling thread. Returns the real timeout the caller
        then waits with (0 for a controlled thread: the wait is already over)."""

    def monotonic(self) -> float: ...


_active: Scheduler | None = None
_scopes = threading.local()  # .footprint: what the calling thread's hooks touch (`scope`)


def install(scheduler: Scheduler) -> None:
    global _active
    if _active is not None:
        raise ConfigurationError("a harness is already running a schedule in this process: one at a time")
    _active = scheduler


def uninstall(scheduler: Scheduler) -> None:
    global _active
    if _active is scheduler:
        _active = None


def controlled() -> bool:
    """Is a scheduler installed? (Lets a hook site skip building its label.)"""
    return _active is not None


def point(label: str, footprint: Footprint | None = None) -> None:
    scheduler = _active
    if scheduler is not None:
        scheduler.point(label, footprint or getattr(_scopes, "footprint", None))


def park(
    label: str, ready: Callable[[], bool], timeout: float | None, footprint: Footprint | None = None
) -> float | None:
    """Before a blocking wait of ``timeout`` seconds for ``ready()``: the timeout to wait with."""
    scheduler = _active
    if scheduler is None:
        return timeout
    return scheduler.park(label, ready, timeout, footprint or getattr(_scopes, "footprint", None))


class scope:
    """``with scope(footprint):`` the calling thread's hooks that declare no footprint
    of their own take ``footprint``: a caller that knows everything a call does (a
    harness path's call on its session handle) says so once, for the hooks inside."""

    def __init__(self, footprint: Footprint | None) -> None:
        self._footprint = footprint

    def __enter__(self) -> None:
        self._outer = getattr(_scopes, "footprint", None)
        _scopes.footprint = self._footprint

    def __exit__(self, *exc: object) -> None:
        _scopes.footprint = self._outer


def wait(event: threading.Event, timeout: float | None, label: str) -> bool:
    """``event.wait(timeout)``, on the virtual clock under a scheduler."""
    return event.wait(park(label, event.is_set, timeout))


def join(thread: Thread, timeout: float | None, label: str) -> None:
    """``thread.join(timeout)``, on the virtual clock under a scheduler."""
    thread.join(park(label, thread.finished.is_set, timeout))


def monotonic() -> float:
    scheduler = _active
    return time.monotonic() if scheduler is None else scheduler.monotonic()


def task(fn: Callable[[], None]) -> Callable[[], None]:
    """A pool task, controlled from its submission until it returns."""
    scheduler = _active
    if scheduler is None:
        return fn
    token = scheduler.spawned()

    def run() -> None:
        scheduler.adopt(token)
        try:
            fn()
        finally:
            scheduler.finished(token)

    return run


class Thread(threading.Thread):
    """A runtime thread: controlled from its start to its end under a scheduler.

    ``finished`` is set as its controlled part ends, so a `join` under a scheduler
    can tell the thread is done before the interpreter has reaped it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finished = threading.Event()
        self._scheduler: Scheduler | None = None
        self._token: object = None

    def start(self) -> None:
        scheduler = _active
        if scheduler is not None:
            self._scheduler, self._token = scheduler, scheduler.spawned()
        try:
            super().start()
        except BaseException:
            if scheduler is not None:
                scheduler.finished(self._token)
            raise

    def run(self) -> None:
        scheduler = self._scheduler
        if scheduler is not None:
            scheduler.adopt(self._token)
        try:
            super().run()
        finally:
            self.finished.set()
            if scheduler is not None:
                scheduler.finished(self._token)
