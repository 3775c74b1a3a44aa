"""What a handle sends its session's actor (the mailbox envelope) and how it is
answered: the reply-future helpers the actor uses (a request is claimed before it
is applied; an answer never raises into the actor), and the answer of a submitted
append."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from protocol import StoredMessage, TranscriptError

__all__ = ["Answer", "Built", "Request", "chain", "claim", "deliver", "set_exception", "set_result"]

logger = logging.getLogger("session_actors.actor")

#: Builds the stored messages of a committed append (wherever the answer is used).
Built = Callable[[], list[StoredMessage]]
#: How a submitted append is answered: ``(built, None)``, ``(None, error)``, or
#: ``(None, None)``: not applied, send it through the mailbox (`SubmittedAppends.submit`).
#: It may return a wake-up to call once the answers at hand are all posted.
Answer = Callable[[Built | None, BaseException | None], Callable[[], None] | None]


@dataclass(slots=True, eq=False)
class Request:
    """A mailbox envelope: a protocol command, the future its caller waits on, and
    which handle sent it (``sender``: turns hold other handles' mutating calls).

    ``held`` is set by the actor when it holds the request behind another handle's
    open turn; the caller then waits up to ``policy.held_wait_s`` instead of
    ``ask_timeout_s`` before it withdraws the request.

    A claimed append that must go on to another actor (its session moved to a live id
    that actor serves) was not applied yet, but its reply can no longer be withdrawn:
    ``gate`` (set before it is forwarded) is the claim that the next actor takes
    before applying it, and ``gave_up`` tells the forwarding actor the caller left.
    """

    command: Any
    reply: Future[Any]
    sender: int = 0
    held: bool = False
    gate: threading.Lock | None = None
    gave_up: bool = False
    # A turn that met another holder's: the token it interrupted, the token its
    # lease is to roll back, and since when it has been held (monotonic; 0: never).
    interrupted: int | None = None
    rollback: int | None = None
    held_since: float = 0.0
    sealed: int | None = None  # the dead turn sealed for it (sealed once per turn)

    def withdraw_forwarded(self) -> bool:
        """Caller side, after ``reply.cancel()`` failed: True when the request was
        forwarded and no actor has started applying it (it never will)."""
        self.gave_up = True
        gate = self.gate
        return gate is not None and gate.acquire(False)

    def forwarding(self) -> bool:
        """Actor side, before forwarding a claimed request: False if its caller
        already gave up (then nobody may apply it)."""
        self.gate = threading.Lock()
        return not self.gave_up

    def take_gate(self) -> bool:
        """Actor side, before applying: False when the caller withdrew it while forwarded."""
        gate = self.gate
        return gate is None or gate.acquire(False)


def claim(reply: Any) -> bool:
    """Claim a mutating request before applying it: False when its caller withdrew."""
    return reply.running() or reply.set_running_or_notify_cancel()


def chain(source: Future[Any], target: Future[Any]) -> None:
    """Complete ``target`` like ``source`` (now or when it completes)."""

    def copy(done: Future[Any]) -> None:
        exc = done.exception()
        if exc is not None:
            set_exception(target, exc)
        else:
            set_result(target, done.result())

    source.add_done_callback(copy)


def deliver(answers: list[tuple[Any, Any, BaseException | None]]) -> None:
    """Answer the callers of a handled message (`SessionActor.on_receive`); an error
    raised while answering is logged, never raised."""
    for reply, value, error in answers:
        try:
            if error is not None:
                set_exception(reply, error)
            else:
                set_result(reply, value)
        except BaseException:  # a done-callback of someone else's: never reaches pykka
            logger.exception("answering a caller failed")


def set_result(future: Future[Any], value: Any) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:
        pass


def set_exception(future: Future[Any], exc: BaseException) -> None:
    if not isinstance(exc, Exception):
        wrapped = TranscriptError(f"request aborted by {exc!r}")
        wrapped.__cause__ = exc
        exc = wrapped
    try:
        future.set_exception(exc)
    except InvalidStateError:
        pass
