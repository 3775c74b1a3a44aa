"""A registry slot: one resident actor, the ids it answers for, and its dispatch lock.

Enqueueing a request and closing the slot (for eviction or a hand-over) happen
under the same per-slot lock, so a request can never land in the mailbox of an
actor that has already been told to stop. Handles keep a reference to a slot and
follow ``successor`` (or ask the registry again) once it is closed.

Who writes what. The registry writes the routing fields (``session_id``, ``ids``,
``closed``, ``successor``, ``pending``, ``born``, ``erased``), under ``lock``. The
actor writes ``runner`` once, as the registry starts it (before the slot is
published); its turn gate and its attempt stay its own and are read through
``runner``. ``last_used`` is the idle clock: whoever runs a step of the session
(the registry's dispatch, a caller-run or submitted append) sets it. ``lock`` and
``exclusive`` are made here and never replaced.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from ..scheduling import hooks as _sched

if TYPE_CHECKING:
    import pykka

    from protocol import Message, StoredMessage

    from ..compaction._attempt import Attempt
    from .request import Answer
    from .turns import TurnGate

__all__ = ["Runner", "Slot"]


class Runner(Protocol):
    """What the registry, its turn keeper and the handles use of a slot's actor."""

    @property
    def actor_ref(self) -> pykka.ActorRef[Any]: ...

    @property
    def turns(self) -> TurnGate:
        """The actor's turn gate (read from any thread; changed under ``exclusive``)."""
        ...

    @property
    def attempt(self) -> Attempt | None:
        """The actor's latest compaction attempt."""
        ...

    def append_here(self, messages: tuple[Message, ...], sender: int) -> list[StoredMessage] | None: ...

    def submit_here(self, messages: tuple[Message, ...], sender: int, answer: Answer) -> bool: ...

    def _stop_here(self) -> bool: ...


class Slot:
    """Lock-protected bookkeeping shared by a registry and its actor."""

    __slots__ = (
        "lock",
        "exclusive",
        "session_id",
        "ids",
        "closed",
        "successor",
        "pending",
        "last_used",
        "born",
        "erased",
        "runner",
    )

    def __init__(self, session_id: str) -> None:
        self.lock = threading.Lock()
        # The actor's exclusive lock: held while it handles a message, or while a
        # caller runs an append on its own thread (`SessionActor.append_here`).
        self.exclusive = threading.Lock()
        self.session_id = session_id  # the live id the actor serves (follows moves)
        self.ids: set[str] = {session_id}  # every id routed here (aliases, old parents)
        self.closed = False  # no more requests may be enqueued
        self.successor: Slot | None = None  # where requests go after a hand-over
        self.pending = 0  # requests enqueued and not yet handled
        self.last_used = _sched.monotonic()
        # (id, created_at) of the session the actor started on: a later session under the
        # same id (after an erasure) is another conversation, never this slot's
        self.born: tuple[str, float] | None = None
        self.erased = False  # its lineage was erased: handles on it fail for good
        self.runner: Runner | None = None  # the actor serving this slot, once started

    @property
    def busy(self) -> bool:
        """An attempt is in flight, requests are queued or being handled (an append
        on its caller's thread too), a turn is open or calls are held behind one:
        never evict."""
        if self.pending > 0 or self.exclusive.locked():
            return True
        runner = self.runner
        if runner is None:
            return False
        attempt = runner.attempt
        return (attempt is not None and attempt.in_flight) or runner.turns.busy

    def current(self) -> Slot:
        """Follow hand-overs to the slot now serving this one's requests."""
        slot = self
        while slot.successor is not None:
            slot = slot.successor
        return slot

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"Slot({self.session_id!r}, {state}, pending={self.pending})"
