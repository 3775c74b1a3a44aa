"""`Reply`: the one-shot answer slot a sync caller waits on; `LoopReplies`: the
answers of one event loop's awaiting tasks, delivered in batches.

A held lock is the latch: far cheaper than a `concurrent.futures.Future`, whose
``set_result`` takes a condition, notifies and runs callbacks, and whose
``result`` allocates a waiter lock per wait. It has the part of the Future
interface the actor uses (``set_result``, ``set_exception``, ``InvalidStateError``
on a second set, and the withdrawal handshake ``set_running_or_notify_cancel`` /
``cancel``), so the actor answers both kinds alike.

Withdrawal: a caller that gives up calls `cancel`; the actor calls
`set_running_or_notify_cancel` before it applies a mutating command. Exactly one
of them wins the claim, so a command is either withdrawn (never applied) or
applied and answered, never applied behind a caller's back after it gave up.

`LoopReplies` wakes an event loop once for many answers: an append submitted from
the loop (`SessionActor.submit_here`) is answered by the store's commit, on the
writer thread, which completes a whole batch of them at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import CancelledError, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .scheduling import hooks as _sched

__all__ = ["LoopReplies", "Reply"]

logger = logging.getLogger("session_actors.reply")

#: Guards the (rare) done-callbacks of every reply.
_callbacks_lock = threading.Lock()
#: One `LoopReplies` per event loop (created under the lock, read without it).
_loop_replies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopReplies] = weakref.WeakKeyDictionary()
_loop_replies_lock = threading.Lock()


class Reply:
    """Set once (`set_result` or `set_exception`), read by one waiter."""

    __slots__ = ("_latch", "_claim", "_value", "_error", "_running", "_done", "_callbacks")

    def __init__(self) -> None:
        self._latch = threading.Lock()
        self._latch.acquire()  # released once the answer is in
        self._claim = threading.Lock()  # taken once: by a settle, the actor (running) or cancel
        self._value: Any = None
        self._error: BaseException | None = None
        self._running = False
        self._done = False
        self._callbacks: list[Callable[[Reply], None]] | None = None

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def set_running_or_notify_cancel(self) -> bool:
        """Claim the reply for the actor: False if the caller withdrew (or it is settled).

        Idempotent for the claimer (a forwarded request is claimed again by the next actor).
        """
        if self._claim.acquire(False):
            self._running = True
            return True
        return self._running and not self._done

    def running(self) -> bool:
        return self._running and not self._done

    def cancel(self) -> bool:
        """Withdraw: True unless the actor already claimed or answered it."""
        if not self._claim.acquire(False):
            return False
        self._error = CancelledError()
        self._done = True
        self._latch.release()
        return True

    def add_done_callback(self, fn: Callable[[Reply], None]) -> None:
        """Call ``fn(reply)`` once it is answered (now if it already is), on the
        answering thread. Rare (a caller that gave up), so settling stays lock-free
        unless one was added."""
        with _callbacks_lock:
            self._callbacks = [*(self._callbacks or ()), fn]
        if self._done:
            self._run_callbacks()

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The answer (or its exception); `TimeoutError` if none within ``timeout``."""
        timeout = _sched.park("reply", self.done, timeout)
        if not self._latch.acquire(timeout=-1 if timeout is None else timeout):
            raise FutureTimeout()
        self._latch.release()  # stays open: a second result() answers at once
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self, value: Any, error: BaseException | None) -> None:
        # A claimed (running) reply is settled by its claimer, the one actor thread.
        if not (self._running and not self._done) and not self._claim.acquire(False):
            raise InvalidStateError("reply already set")
        self._value, self._error = value, error
        self._done = True
        self._latch.release()
        if self._callbacks is not None:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        with _callbacks_lock:  # each callback runs once, whoever sees it first
            callbacks, self._callbacks = self._callbacks or [], None
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                logger.exception("reply callback failed")


class LoopReplies:
    """Answers for the futures of one event loop, posted from any thread.

    `post` queues an answer and returns a wake-up (`wake`) unless a drain is already
    scheduled; the poster calls it, at once or after posting a batch of answers:
    one `call_soon_threadsafe` (a write to the loop's self-pipe) then serves them
    all. A wake-up that got lost is made good by the next post. The answer's value
    is built on the loop (``result()``), off the thread that posts. A future already
    done when its answer arrives (its task was cancelled) is skipped: the answer
    goes to nobody.
    """

    __slots__ = ("_loop", "_lock", "_answers", "_scheduled", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the registry of them must not keep loops alive
        self._lock = threading.Lock()
        self._answers: list[tuple[asyncio.Future[Any], Callable[[], Any] | None, BaseException | None]] = []
        self._scheduled = False

    @staticmethod
    def of(loop: asyncio.AbstractEventLoop) -> LoopReplies:
        """The loop's replies (one per loop)."""
        replies = _loop_replies.get(loop)
        if replies is None:
            with _loop_replies_lock:
                replies = _loop_replies.setdefault(loop, LoopReplies(loop))
        return replies

    def post(
        self, future: asyncio.Future[Any], result: Callable[[], Any] | None, error: BaseException | None
    ) -> Callable[[], None] | None:
        """Queue ``future``'s answer: ``result()`` (None without one) or ``error``.
        Returns `wake` when the poster must call it (any thread, never blocks)."""
        with self._lock:
            self._answers.append((future, result, error))
            if self._scheduled:
                return None
        return self.wake

    def wake(self) -> None:
        """Schedule one drain of the queued answers on the loop (unless one is)."""
        with self._lock:
            if self._scheduled or not self._answers:
                return
            self._scheduled = True
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody can await these any more
            with self._lock:
                self._answers.clear()
                self._scheduled = False

    def _drain(self) -> None:
        with self._lock:
            answers, self._answers = self._answers, []
            self._scheduled = False
        for future, result, error in answers:
            if future.done():
                continue
            if error is None:
                try:
                    value = None if result is None else result()
                except Exception as exc:
                    future.set_exception(exc)
                    continue
                future.set_result(value)
            else:
                future.set_exception(error)
