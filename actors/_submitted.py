"""The submitted append path: ``handle.append_async`` from an event loop.

The loop takes the session's exclusive lock without waiting (`actors._admission`),
queues the append for the store's group commit (`SubmittingStore.append_nowait`)
and returns; the commit answers it on the writer thread, which lets the lock go.
Nothing runs on the actor's worker, and the loop is woken once per batch.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from persistence import SubmittingStore
from protocol import (
    Message,
    SessionEndedError,
    SessionNotFoundError,
    StoredMessage,
    TurnHeldError,
    TurnLease,
    TurnLostError,
)
from protocol.errors import DeadTurnError

from . import _sched
from ._admission import Forwarded, runs_here

if TYPE_CHECKING:
    from persistence import Store

    from ._routing import Router
    from ._slot import Slot
    from ._turns import TurnGate

__all__ = ["Answer", "Built", "SubmittedAppends"]

logger = logging.getLogger("session_actors.actor")

#: Builds the stored messages of a committed append (wherever the answer is used).
Built = Callable[[], list[StoredMessage]]
#: How a submitted append is answered: ``(built, None)``, ``(None, error)``, or
#: ``(None, None)``: not applied, send it through the mailbox (`SubmittedAppends.submit_here`).
#: It may return a wake-up to call once the answers at hand are all posted.
Answer = Callable[[Built | None, BaseException | None], Callable[[], None] | None]


class SubmittedAppends:
    """The `SessionActor` steps of the submitted path (a mixin: they share its state)."""

    if TYPE_CHECKING:
        _exclusive: threading.Lock
        _submits: bool
        _slot: Slot
        _mailbox: Sequence[Any]
        _turns: TurnGate
        _store: Store
        _incarnation: str
        _tokens: int | None
        _registry: Router

        @property
        def live_id(self) -> str: ...
        def _count_tokens(self, messages: tuple[Message, ...]) -> None: ...
        def _check_budget_later(self) -> None: ...
        def _follow(self, exc: SessionEndedError, session_id: str) -> None: ...
        def _append(self, messages: tuple[Message, ...], sender: int) -> list[Any]: ...
        def _stop_later(self) -> None: ...
        def owned_lease(self, sender: int) -> TurnLease | None: ...
        def lose_turn(self, sender: int, exc: TurnHeldError) -> TurnLostError | None: ...
        def mark_lost(self, sender: int) -> None: ...

    def submit_here(self, messages: tuple[Message, ...], sender: int, answer: Answer) -> bool:
        """The submitted path of an append from an event loop: queue it for the store's
        group commit without waiting; False (nothing done) when it must go through
        the mailbox (the conditions of `append_here`, or a store that cannot submit).

        The exclusive lock is taken here, on the loop's thread, and held until the
        commit answers (`_submitted_done`, on the store's writer thread): it is a plain
        lock, not owned by a thread. Meanwhile the actor thread, caller-run appends
        and other submissions wait behind this append exactly as behind a caller-run
        one, so nothing overtakes it or is overtaken by it, and the actor is not
        evicted under it. Once this returns True, ``answer(stored, error)`` is called
        exactly once, from another thread: ``(None, None)`` when the append was not
        applied and must go through the mailbox (another actor serves the live id).
        Bad messages raise here (nothing queued).
        """
        if not self._submits or not self._exclusive.acquire(blocking=False):
            return False
        try:
            if not runs_here(self._slot, self._mailbox, self._turns, sender):
                self._exclusive.release()
                return False
            self._slot.last_used = _sched.monotonic()
            session_id = self.live_id
            self._count_tokens(messages)  # here: the loop has time, the writer not
            done = functools.partial(self._submitted_done, messages, sender, session_id, answer)
            store = cast(SubmittingStore, self._store)  # see _submits
            lease = self.owned_lease(sender)
            if lease is not None:
                submitted = store.append_nowait(session_id, messages, done, incarnation=self._incarnation, turn=lease)
            else:
                submitted = store.append_nowait(session_id, messages, done, incarnation=self._incarnation)
        except BaseException:
            self._tokens = None  # counted, not appended: recount
            self._exclusive.release()
            raise
        if not submitted:
            self._tokens = None
            self._exclusive.release()
        # once submitted, the exclusive lock is the completion's (it may be released already)
        return submitted

    def _submitted_done(
        self,
        messages: tuple[Message, ...],
        sender: int,
        session_id: str,
        answer: Answer,
        built: Built | None,
        error: BaseException | None,
    ) -> Callable[[], None] | None:
        """A submitted append has its outcome (writer thread, exclusive lock held): the
        rest of `_append`'s bookkeeping, then the lock goes and the caller is answered
        (the stored messages are built where the answer is used, off the writer)."""
        if error is None and built is not None:
            try:
                if self._turns.owned_by(sender):  # the turn learns its seqs
                    stored = built()
                    self._turns.note_appended(sender, stored)
                    built = functools.partial(list, stored)
                self._check_budget_later()
            finally:
                self._exclusive.release()
            return answer(built, None)
        self._tokens = None  # counted when submitted: recount
        if isinstance(error, TurnLostError):
            self.mark_lost(sender)
        if isinstance(error, TurnHeldError):  # another holder's turn: the mailbox holds it
            lost = self.lose_turn(sender, error)
            if lost is None and not isinstance(error, DeadTurnError):  # a dead one: the mailbox seals it
                self._turns.foreign = error
            self._exclusive.release()
            return answer(None, lost)
        if isinstance(error, (SessionEndedError, SessionNotFoundError)):
            # following a successor appends again and moves through the registry (whose
            # lock may be held by a thread waiting on this writer): not on the writer thread
            try:
                threading.Thread(
                    target=self._finish_submitted,
                    name="session-append-follow",
                    args=(messages, sender, session_id, answer, error),
                    daemon=True,
                ).start()
                return None
            except BaseException as exc:
                error = exc
        self._exclusive.release()
        return answer(None, error)

    def _finish_submitted(
        self, messages: tuple[Message, ...], sender: int, session_id: str, answer: Answer, error: BaseException
    ) -> None:
        """A submitted append met a session ended or erased: follow the successor as
        `_append` does (exclusive lock still held), or retire the actor as `_serve` does."""
        stored: list[StoredMessage] | None = None
        failure: BaseException | None = error
        try:
            if isinstance(error, SessionEndedError):
                self._follow(error, session_id)
                stored, failure = self._append(messages, sender), None
                self._check_budget_later()
        except Forwarded:
            failure = None  # not applied: the mailbox forwards it to the actor serving the live id
            self._stop_later()
        except TurnHeldError as exc:  # the continuation carries another holder's turn
            failure = self.lose_turn(sender, exc)  # None: the mailbox holds it (or seals a dead one)
            if failure is None and not isinstance(exc, DeadTurnError):
                self._turns.foreign = exc
        except BaseException as exc:
            failure = exc
        finally:
            self._exclusive.release()
        if isinstance(failure, SessionNotFoundError):
            try:
                self._registry._retire_erased(self._slot)  # erased elsewhere, as in `_serve`
            except BaseException:
                logger.exception("retiring the erased session actor %s failed", self.live_id)
        wake = answer(None if stored is None else functools.partial(list, stored), failure)
        if wake is not None:
            wake()
