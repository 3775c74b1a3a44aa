"""Who ends an attempt: one in-process lock decides between admitting its result
and aborting it.

This is not the fencing token: that one is checked by the store inside the
compaction commit's own write (see each backend's ``compaction`` module) and guards
against other processes. `AttemptDecision` only settles the race inside this
process between the actor thread admitting the compressor's result and an
interrupt, a timeout or a lost lease aborting it.

An attempt is PREPARING (the actor thread takes the lease, snapshots the cooldown,
reads the transcript), then RUNNING (the compressor works in its own thread), then
either ADMITTED (the actor thread decides and commits) or ABORTED (an interrupt, a
timeout or a lost lease won the race). Whoever flips the state first owns the
cleanup; the loser backs off. Resources (lease, forced-cooldown snapshot) are
*published* here as they are taken, so an aborter can hand them back without
waiting for the thread that took them.
"""

from __future__ import annotations

import enum
import threading

from protocol import Cooldown, Lease

__all__ = ["AttemptDecision", "AttemptState"]


class AttemptState(enum.Enum):
    PREPARING = "preparing"
    RUNNING = "running"
    ADMITTED = "admitted"
    ABORTED = "aborted"


_OPEN = (AttemptState.PREPARING, AttemptState.RUNNING)
_NO_SNAPSHOT = object()


class AttemptDecision:
    """Thread-safe state of one attempt, plus the resources it must give back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = AttemptState.PREPARING
        self._lease: Lease | None = None
        self._snapshot: object = _NO_SNAPSHOT

    @property
    def state(self) -> AttemptState:
        with self._lock:
            return self._state

    @property
    def aborted(self) -> bool:
        with self._lock:
            return self._state is AttemptState.ABORTED

    def publish_lease(self, lease: Lease) -> bool:
        """Record the lease; False (caller releases it) when already aborted."""
        with self._lock:
            if self._state is AttemptState.ABORTED:
                return False
            self._lease = lease
            return True

    def publish_snapshot(self, snapshot: Cooldown | None) -> bool:
        """Record the raw cooldown row before clearing it; False when already aborted."""
        with self._lock:
            if self._state is AttemptState.ABORTED:
                return False
            self._snapshot = snapshot
            return True

    @property
    def has_snapshot(self) -> bool:
        with self._lock:
            return self._snapshot is not _NO_SNAPSHOT

    @property
    def snapshot(self) -> Cooldown | None:
        with self._lock:
            return None if self._snapshot is _NO_SNAPSHOT else self._snapshot  # type: ignore[return-value]

    @property
    def lease(self) -> Lease | None:
        """The published lease, if still held (peek; see `take_lease`)."""
        with self._lock:
            return self._lease

    def take_lease(self) -> Lease | None:
        """Hand the lease to exactly one releaser."""
        with self._lock:
            lease, self._lease = self._lease, None
            return lease

    def start_running(self) -> bool:
        """PREPARING -> RUNNING; False when an abort got there first."""
        with self._lock:
            if self._state is AttemptState.PREPARING:
                self._state = AttemptState.RUNNING
                return True
            return False

    def admit(self) -> bool:
        """Admit the compressor's result for commit; False when aborted first."""
        with self._lock:
            if self._state in _OPEN:
                self._state = AttemptState.ADMITTED
                return True
            return False

    def abort(self) -> AttemptState | None:
        """Abort if still open; returns the state it aborted from, else None."""
        with self._lock:
            if self._state in _OPEN:
                previous, self._state = self._state, AttemptState.ABORTED
                return previous
            return None
