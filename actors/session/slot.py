"""A registry slot: one resident actor, the ids it answers for, and its dispatch lock.

Enqueueing a request and closing the slot (for eviction or a hand-over) happen
under the same per-slot lock, so a request can never land in the mailbox of an
actor that has already been told to stop. Handles keep a reference to a slot and
follow ``successor`` (or ask the registry again) once it is closed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..scheduling import hooks as _sched

if TYPE_CHECKING:
    import pykka

    from ..compaction._attempt import Attempt
    from .actor import SessionActor
    from .turns import TurnGate

__all__ = ["Slot"]


class Slot:
    """Mutable, lock-protected bookkeeping shared by a registry and its actor."""

    __slots__ = (
        "lock",
        "exclusive",
        "session_id",
        "ids",
        "actor_ref",
        "closed",
        "successor",
        "pending",
        "last_used",
        "attempt",
        "turns",
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
        self.actor_ref: pykka.ActorRef[Any] | None = None
        self.closed = False  # no more requests may be enqueued
        self.successor: Slot | None = None  # where requests go after a hand-over
        self.pending = 0  # requests enqueued and not yet handled
        self.last_used = _sched.monotonic()
        self.attempt: Attempt | None = None  # the actor's latest attempt (set on its thread)
        self.turns: TurnGate | None = None  # the actor's turn gate (set when it starts)
        # (id, created_at) of the session the actor started on: a later session under the
        # same id (after an erasure) is another conversation, never this slot's
        self.born: tuple[str, float] | None = None
        self.erased = False  # its lineage was erased: handles on it fail for good
        self.runner: SessionActor | None = None  # the actor, for the caller-runs append path

    @property
    def busy(self) -> bool:
        """An attempt is in flight, requests are queued or being handled (an append
        on its caller's thread too), a turn is open or calls are held behind one:
        never evict."""
        attempt, turns = self.attempt, self.turns
        return (
            self.pending > 0
            or self.exclusive.locked()
            or (attempt is not None and attempt.in_flight)
            or (turns is not None and turns.busy)
        )

    def current(self) -> Slot:
        """Follow hand-overs to the slot now serving this one's requests."""
        slot = self
        while slot.successor is not None:
            slot = slot.successor
        return slot

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"Slot({self.session_id!r}, {state}, pending={self.pending})"
