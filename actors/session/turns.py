"""The turn gate of one session actor: who holds the open turn, and the calls it holds.

`handle.turn()` makes the messages a handle appends contiguous: while its turn is
open, mutating calls (appends, another handle's turn) from every other handle wait
here, in arrival order, and apply right after the turn closes. The gate is mutated
only under the actor's exclusive lock (on the actor thread, or by a caller-run append
that hands the actor over: `hand_over`); other threads read it (`busy` for eviction,
`admits` for a caller-runs append path, `overdue` for the registry's janitor).

When the actor hands over to another resident actor, its open turn and the calls held
behind it move there (`MovedTurn`) and the turn reopens there (`ResumeTurn`).

Across processes the store holds each open turn's lease (`TurnLease`): a turn opened
here takes it, its appends carry it, and closing the turn releases it. While another
holder's lease is live the store refuses this registry's writes (`TurnHeldError`):
the gate then holds every mutating call (``foreign``) until the registry's turn
keeper sees that lease end and the actor serves them again, in order.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

from protocol import StoredMessage, TurnHeldError, TurnLease, TurnLostError
from protocol._commands import Append, OpenTurn, Retract

from ..scheduling import hooks as _sched
from .request import Request

__all__ = ["HELD_COMMANDS", "MovedTurn", "ResumeTurn", "TurnGate", "TurnTicket"]

logger = logging.getLogger("session_actors.turns")


@dataclass(slots=True)
class _Turn:
    number: int
    owner: int  # the sending handle's key
    opened_at: float  # monotonic
    depth: int = 1  # re-entrant opens of the same handle
    appended: int = 0  # messages appended in this turn (the last ones of the transcript)
    first: tuple[str, int] | None = None  # (session id, seq) of its first message
    lease: TurnLease | None = None  # the store's turn lease (None: lost or not taken)
    renewed_at: float = 0.0  # monotonic time of the last successful take or renewal
    lost: bool = False  # the lease lapsed or was taken: the rest of the turn is refused
    key: str | None = None  # its idempotency key (a turn of the same key never interrupts it)
    interrupted: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class TurnTicket:
    """What `OpenTurn` answers: the turn's number and the event another caller's
    ``on_busy="interrupt"`` sets; for a keyed turn completed before, ``replay`` holds
    its stored messages and no turn was opened (``number`` 0)."""

    number: int
    interrupted: threading.Event
    replay: tuple[StoredMessage, ...] | None = None


@dataclass(frozen=True, slots=True)
class ResumeTurn:
    """Internal command: reopen a turn that moved here from a handed-over actor (held,
    like an `OpenTurn`, while another handle's turn is open here)."""

    turn: _Turn


#: Commands held while another handle's turn is open (mutating ones, and turns).
HELD_COMMANDS: tuple[type, ...] = (Append, Retract, OpenTurn, ResumeTurn)


@dataclass(slots=True)
class MovedTurn:
    """Internal message: the open turn of an actor that handed over to the one it is
    sent to, and the calls held behind it, oldest first."""

    turn: _Turn | None
    held: list[Request] = field(default_factory=list)

    def requests(self) -> list[Request]:
        """What the receiving actor serves in order: the turn's reopening, then the
        held calls (held again behind it)."""
        if self.turn is None:
            return list(self.held)
        resume = Request(ResumeTurn(self.turn), Future(), self.turn.owner)
        return [resume, *self.held]


class TurnGate:
    """One actor's open turn (at most one) and the requests held behind it."""

    __slots__ = ("_max_turn_s", "turn", "_held", "_last_number", "foreign")

    def __init__(self, max_turn_s: float) -> None:
        self._max_turn_s = max_turn_s
        # The open turn, or None. Read from any thread (a None check is how an append
        # skips the turn bookkeeping at once); set only on the actor thread.
        self.turn: _Turn | None = None
        # () until a call is held: every resident actor has a gate, and each object it
        # keeps costs session starts garbage-collection time (see `pooled.StopFlag`)
        self._held: deque[Request] | tuple[()] = ()
        self._last_number = 0  # turns opened so far (numbers start at 1)
        # Another holder's live turn lease refused a write: everything mutating waits
        # (held) until the turn keeper sees it end. Set under the exclusive lock.
        self.foreign: TurnHeldError | None = None

    # -- read from any thread ---------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A turn is open or calls are held: the actor must not be evicted."""
        return self.turn is not None or bool(self._held) or self.foreign is not None

    def admits(self, sender: int) -> bool:
        """May a mutating call from handle ``sender`` apply now?

        Yes when no turn is open and nothing is held (nothing to overtake), or when
        the open turn is ``sender``'s own; never while another holder's turn refused
        a write here.
        """
        turn = self.turn
        if self.foreign is not None:  # the owner goes on: it learns its turn was lost
            return turn is not None and turn.owner == sender
        if turn is None:
            return not self._held
        return turn.owner == sender

    def busy_with_held(self) -> bool:
        return bool(self._held)

    def owned_by(self, sender: int) -> bool:
        """Is the open turn ``sender``'s?"""
        turn = self.turn
        return turn is not None and turn.owner == sender

    def overdue(self, now: float) -> bool:
        turn = self.turn
        return turn is not None and now - turn.opened_at >= self._max_turn_s

    # -- actor thread only ------------------------------------------------------------

    def must_hold(self, request: Request) -> bool:
        return isinstance(request.command, HELD_COMMANDS) and not self.admits(request.sender)

    def owned_lease(self, sender: int, session_id: str) -> TurnLease | None:
        """The lease of ``sender``'s open turn (None outside one); `TurnLostError` when
        that turn lost its lease."""
        turn = self.turn
        if turn is None or turn.owner != sender:
            return None
        if turn.lost:
            raise TurnLostError(session_id, message=f"the turn on {session_id!r} lost its lease: open a new one")
        return turn.lease

    def mark_lost(self, sender: int) -> None:
        """The store says ``sender``'s turn lease lapsed: refuse the rest of the turn."""
        turn = self.turn
        if turn is not None and turn.owner == sender:
            turn.lost, turn.lease = True, None

    def lose_turn(self, sender: int, exc: TurnHeldError, session_id: str) -> TurnLostError | None:
        """Another holder took the lease of ``sender``'s open turn: the turn is lost
        (its error returned); None when ``sender`` has no turn open here."""
        turn = self.turn
        if turn is None or turn.owner != sender:
            return None
        turn.lost, turn.lease = True, None
        logger.warning("the turn on %s lost its lease to %r: the rest of it is refused", session_id, exc.holder)
        return TurnLostError(session_id, exc.holder, exc.expires_at, exc.token)

    def hold(self, request: Request) -> None:
        request.held = True
        if not isinstance(self._held, deque):
            self._held = deque()
        self._held.append(request)

    def join(self, sender: int) -> TurnTicket | None:
        """Join ``sender``'s open turn (re-entrant); None when it has none."""
        turn = self.turn
        if turn is None or turn.owner != sender:
            return None
        turn.depth += 1
        return TurnTicket(turn.number, turn.interrupted)

    def open(self, sender: int, lease: TurnLease | None = None, key: str | None = None) -> TurnTicket:
        """Open a turn for ``sender`` under the store's ``lease``, or join its open one."""
        joined = self.join(sender)
        if joined is not None:
            return joined
        self._last_number += 1
        now = _sched.monotonic()
        self.turn = _Turn(self._last_number, sender, now, lease=lease, renewed_at=now, key=key)
        return TurnTicket(self.turn.number, self.turn.interrupted)

    def close(self, sender: int, number: int) -> _Turn | None:
        """Leave turn ``number``; the turn when that closed it (the held calls may go,
        its lease is to be released).

        A late exit of a turn the actor already closed is a no-op.
        """
        turn = self.turn
        if turn is None or turn.number != number or turn.owner != sender:
            self._leave_held_resume(sender, number)
            return None
        turn.depth -= 1
        if turn.depth > 0:
            return None
        self.turn = None
        return turn

    def close_overdue(self) -> _Turn | None:
        """Close a turn open longer than ``max_turn_s``; the turn if one was closed."""
        turn = self.turn
        if turn is None or not self.overdue(_sched.monotonic()):
            return None
        logger.warning(
            "turn %d open for more than %ss: closed by the actor (%d message(s) appended, %d call(s) held)",
            turn.number,
            self._max_turn_s,
            turn.appended,
            len(self._held),
        )
        self.turn = None
        return turn

    def hand_over(self) -> MovedTurn | None:
        """The actor hands over to another resident actor (its exclusive lock held):
        its open turn and the calls held behind it leave with it, to be reopened and
        held there (`MovedTurn`); None when there is neither."""
        turn, held = self.turn, self.take_held()
        self.turn = None
        return None if turn is None and not held else MovedTurn(turn, held)

    def take_back(self, moved: MovedTurn) -> None:
        """The actor handed to could not take ``moved``: it stays here (applied when
        this actor stops, as before)."""
        self.turn = moved.turn
        if moved.held:  # ahead of anything held here since
            self._held = deque([*moved.held, *self._held])

    def resume(self, turn: _Turn) -> None:
        """Reopen ``turn``, moved here (`ResumeTurn`, let through by `must_hold`: no
        turn is open here, since a handle's turn lives on one actor at a time)."""
        if self.turn is not None:
            logger.error("turn %d moved here while turn %d is open: not reopened", turn.number, self.turn.number)
            return
        self.turn = turn

    def _leave_held_resume(self, sender: int, number: int) -> None:
        """The owner left a moved turn still held here (behind another handle's turn):
        leave it there too, so it does not reopen with nobody in it."""
        for request in self._held:
            command = request.command
            if isinstance(command, ResumeTurn) and command.turn.owner == sender and command.turn.number == number:
                command.turn.depth -= 1
                if command.turn.depth <= 0:
                    cast(deque, self._held).remove(request)  # it holds this request
                return

    def close_for_stop(self) -> _Turn | None:
        """The actor is stopping: its turn ends (returned: its lease is to be
        released), its held calls must be applied."""
        turn, self.turn = self.turn, None
        self.foreign = None
        return turn

    def take_held(self) -> list[Request]:
        """Every held request, oldest first (each is re-checked when served)."""
        held, self._held = list(self._held), ()
        return held

    def note_appended(self, sender: int, stored: list[StoredMessage]) -> None:
        turn = self.turn
        if turn is None or turn.owner != sender or not stored:
            return
        turn.appended += len(stored)
        if turn.first is None:
            turn.first = (stored[0].session_id, stored[0].seq)

    def note_retracted(self, popped: StoredMessage) -> None:
        """The owner retracted one of its turn's messages (the last live one)."""
        turn = self.turn
        if turn is None or turn.first is None or turn.appended <= 0:
            return
        if popped.session_id == turn.first[0] and popped.seq >= turn.first[1]:
            turn.appended -= 1
            if turn.appended == 0:
                turn.first = None

    def note_rewritten(self) -> None:
        """A commit or a move gave the turn's messages new seqs: forget the old ones."""
        if self.turn is not None:
            self.turn.first = None

    def snapshot_bounds(self, session_id: str) -> tuple[int, int | None]:
        """``(turn_messages, turn_first_seq)`` for `protocol.compactable_end`."""
        turn = self.turn
        if turn is None:
            return 0, None
        first_seq = turn.first[1] if turn.first is not None and turn.first[0] == session_id else None
        return turn.appended, first_seq
