"""The submitted append path: ``handle.append_async`` from an event loop.

The loop takes the session's exclusive lock without waiting (`admission.runs_here`),
queues the append for the store's group commit (`SubmittingStore.append_nowait`)
and returns; the commit answers it on the writer thread, which lets the lock go.
Nothing runs on the actor's worker, and the loop is woken once per batch.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from protocol import (
    Message,
    SessionEndedError,
    SessionNotFoundError,
    StoredMessage,
    TurnHeldError,
    TurnLostError,
)
from protocol.errors import DeadTurnError

from .admission import Forwarded
from .request import Answer, Built

if TYPE_CHECKING:
    from persistence import SubmittingStore

    from .turns import TurnGate

__all__ = ["SubmitHost", "SubmittedAppends"]

logger = logging.getLogger("session_actors.actor")


class SubmitHost(Protocol):
    """What the submitted path needs from its actor (each called with its exclusive lock held)."""

    @property
    def live_id(self) -> str: ...

    def admit(self, sender: int) -> bool:
        """May a step of handle ``sender`` run off the mailbox now (`admission.runs_here`)?
        True marks the slot used."""
        ...

    def count_tokens(self, messages: tuple[Message, ...]) -> None: ...

    def recount(self) -> None:
        """Forget the token estimate: counted, not appended."""
        ...

    def check_budget_later(self) -> None: ...

    def follow(self, exc: SessionEndedError, session_id: str) -> None: ...

    def append_step(self, messages: tuple[Message, ...], sender: int) -> list[StoredMessage]:
        """The append with its bookkeeping, as the mailbox runs it."""
        ...

    def stop_later(self) -> None:
        """This actor was handed over off its thread: let its mailbox stop it."""
        ...

    def retire_erased(self) -> None:
        """The store no longer has the lineage: stop the actor for good."""
        ...


class SubmittedAppends:
    """The submitted path of one `SessionActor`: appends handed to the store's group
    commit, answered on its writer thread. The actor makes one on the first
    submitted append (a session only appended to from threads never does)."""

    __slots__ = ("_exclusive", "_host", "_incarnation", "_store", "_turns")

    def __init__(
        self,
        host: SubmitHost,
        *,
        exclusive: threading.Lock,
        turns: TurnGate,
        store: SubmittingStore,
        incarnation: str,
    ) -> None:
        self._host = host
        self._exclusive = exclusive
        self._turns = turns
        self._store = store
        self._incarnation = incarnation

    def submit(self, messages: tuple[Message, ...], sender: int, answer: Answer) -> bool:
        """The submitted path of an append from an event loop: queue it for the store's
        group commit without waiting; False (nothing done) when it must go through
        the mailbox (the conditions of `SessionActor.append_here`).

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
        if not self._exclusive.acquire(blocking=False):
            return False
        host = self._host
        try:
            if not host.admit(sender):
                self._exclusive.release()
                return False
            session_id = host.live_id
            host.count_tokens(messages)  # here: the loop has time, the writer not
            done = functools.partial(self._submitted_done, messages, sender, session_id, answer)
            lease = self._turns.owned_lease(sender, session_id)
            if lease is not None:
                submitted = self._store.append_nowait(
                    session_id, messages, done, incarnation=self._incarnation, turn=lease
                )
            else:
                submitted = self._store.append_nowait(session_id, messages, done, incarnation=self._incarnation)
        except BaseException:
            host.recount()  # counted, not appended
            self._exclusive.release()
            raise
        if not submitted:
            host.recount()
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
        rest of the append's bookkeeping, then the lock goes and the caller is answered
        (the stored messages are built where the answer is used, off the writer)."""
        if error is None and built is not None:
            try:
                if self._turns.owned_by(sender):  # the turn learns its seqs
                    stored = built()
                    self._turns.note_appended(sender, stored)
                    built = functools.partial(list, stored)
                self._host.check_budget_later()
            finally:
                self._exclusive.release()
            return answer(built, None)
        self._host.recount()  # counted when submitted
        if isinstance(error, TurnLostError):
            self._turns.mark_lost(sender)
        if isinstance(error, TurnHeldError):  # another holder's turn: the mailbox holds it
            lost = self._turns.lose_turn(sender, error, self._host.live_id)
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
        the mailbox does (exclusive lock still held), or retire the actor."""
        stored: list[StoredMessage] | None = None
        failure: BaseException | None = error
        try:
            if isinstance(error, SessionEndedError):
                self._host.follow(error, session_id)
                stored, failure = self._host.append_step(messages, sender), None
                self._host.check_budget_later()
        except Forwarded:
            failure = None  # not applied: the mailbox forwards it to the actor serving the live id
            self._host.stop_later()
        except TurnHeldError as exc:  # the continuation carries another holder's turn
            failure = self._turns.lose_turn(
                sender, exc, self._host.live_id
            )  # None: the mailbox holds it (or seals a dead one)
            if failure is None and not isinstance(exc, DeadTurnError):
                self._turns.foreign = exc
        except BaseException as exc:
            failure = exc
        finally:
            self._exclusive.release()
        if isinstance(failure, SessionNotFoundError):
            try:
                self._host.retire_erased()  # erased elsewhere, as the mailbox does
            except BaseException:
                logger.exception("retiring the erased session actor %s failed", self._host.live_id)
        wake = answer(None if stored is None else functools.partial(list, stored), failure)
        if wake is not None:
            wake()
