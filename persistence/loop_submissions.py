"""Submissions from an event loop reach the writer once per loop iteration, together.

Many tasks of one loop resumed in one iteration each submit a write
(``append_async``). Put into the writer's queue one by one, the first wakes the
writer thread, which then fights the loop thread for the GIL mid-burst and
commits a part of it. So a loop's submissions are held in a buffer of their
own and handed to the writer from one ``call_soon`` callback, which runs after
the task steps of the current iteration: the writer wakes once, to a whole burst.

A held submission keeps its caller's exclusivity (an actor's lock) until the
writer answers it, so it must reach the writer whatever becomes of the loop.
A buffer is handed over, in order and whole (a loop's submissions stay FIFO), by
the first of:

- the loop's callback;
- the submission that fills it to the writer's ``max_batch`` (the writer can
  start on a full batch while the loop goes on);
- the submission itself, when the callback cannot be scheduled (loop closing);
- the callback's end without running: ``loop.close()`` drops pending callbacks,
  and the dropped one hands the buffer over as it is freed;
- a waiter on a `HandOverLock` (an actor's exclusive lock, which a held
  submission holds), before it waits and again every ``RECHECK_S`` while it
  waits: every buffer of every loop (the loop may be blocked, in this very
  iteration, on something that waits for that lock);
- `hand_over_pending`, before a blocking store write: the calling thread's own
  loop's (its writes stay in program order) and those of loops that are not
  running (stopped with the callback pending);
- the writer's close, before its stop marker: held submissions commit like
  queued ones, and later ones are refused (the store is closed);
- a submission that is not added to a held buffer (made off any loop, or the
  first of its loop's iteration) hands over those of loops that are not running:
  a loop stopped with its hand-over pending may hold earlier submissions of the
  same thread, which stay first.

Only the loop's thread adds to its buffer; the hand-overs from other threads
take it under the same lock. The lock is re-entrant: a finalizer may hand over on
a thread that holds it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from protocol import TranscriptError

__all__ = ["HandOverLock", "LoopSubmissions", "hand_over_all", "hand_over_pending"]

logger = logging.getLogger("session_actors.loop_submissions")

#: The `LoopSubmissions` holding any buffer now (set operations are atomic).
_holding: set[LoopSubmissions] = set()
#: How often a `HandOverLock` waiter hands over again: a submission may have taken
#: the lock between its hand-over and its wait.
RECHECK_S = 0.05


class LoopSubmissions:
    """The submissions of event loops not yet handed to one writer's queue."""

    def __init__(self, put: Callable[[Any], None], max_batch: int) -> None:
        self._put = put  # the writer's queue
        self._max_batch = max_batch
        self._lock = threading.RLock()
        self._buffers: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        self._closed = False

    def submit(self, request: Any) -> None:
        """Hand ``request`` to the writer: at the end of the running loop's iteration,
        or now without a running loop. Raises `TranscriptError` once closed."""
        loop = _running_loop()
        with self._lock:
            if self._closed:
                raise TranscriptError("the store is closed")
            buffer = None if loop is None else self._buffers.get(loop)
            if buffer is None and self._buffers:
                # a loop that is not running (stopped with its hand-over pending) may hold
                # earlier submissions of this very thread: they go first
                self._hand_over_where(_not_running)
            if loop is None:
                self._put(request)
                return
            fresh = buffer is None
            if buffer is None:
                buffer = self._buffers[loop] = []
                _holding.add(self)
            buffer.append(request)
            if len(buffer) >= self._max_batch:
                self._hand_over(loop)
                return  # a callback already scheduled finds the next buffer, or none
        if fresh:
            self._schedule(loop)

    def held(self) -> int:
        """Submissions held now (not yet in the writer's queue)."""
        with self._lock:
            return sum(len(buffer) for buffer in self._buffers.values())

    def close(self) -> None:
        """Hand every buffer over (the writer still runs them); refuse later submissions."""
        with self._lock:
            self._closed = True
            for loop in list(self._buffers):
                self._hand_over(loop)

    def hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._hand_over(loop)

    def hand_over_where(self, which: Callable[[asyncio.AbstractEventLoop], bool]) -> None:
        """Hand over the buffers of the loops ``which`` picks."""
        with self._lock:
            self._hand_over_where(which)

    def _hand_over_where(self, which: Callable[[asyncio.AbstractEventLoop], bool]) -> None:
        for loop in list(self._buffers):
            if which(loop):
                self._hand_over(loop)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        buffer = self._buffers.pop(loop, None)
        if not self._buffers:
            _holding.discard(self)
        for request in buffer or ():
            self._put(request)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        flush = _Flush(self, loop)
        try:
            loop.call_soon(flush)
        except BaseException:  # closing: nothing will run it. The request is submitted
            flush()  # now (its caller must not take it back): hand it over at once


def hand_over_pending() -> None:
    """Before a blocking write on this thread: hand this thread's running loop's held
    submissions to their writers (they were submitted first), and those of every
    loop that is not running. Cheap when nothing is held."""
    if not _holding:
        return
    current = _running_loop()
    for submissions in list(_holding):
        submissions.hand_over_where(lambda loop: loop is current or not loop.is_running())


def hand_over_all() -> None:
    """Hand every held submission of every loop to its writer now."""
    for submissions in list(_holding):
        submissions.hand_over_where(lambda loop: True)


class HandOverLock:
    """A lock that a held submission may hold (an actor's exclusive lock, from an
    append's submission to its commit): a waiter hands every held submission over
    before it waits, and again every `RECHECK_S` while it waits, so none of them
    can keep it waiting on a loop that does not run. Uncontended, a plain lock."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout != -1:
            _check_timeout(blocking, timeout)  # as a lock: never "wait for ever" by mistake
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while True:
            if _holding:
                hand_over_all()
            wait = RECHECK_S if deadline is None else min(RECHECK_S, deadline - time.monotonic())
            if self._lock.acquire(timeout=max(0.0, wait)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


class _Flush:
    """The ``call_soon`` callback that hands a loop's buffer over; if the loop drops
    it unrun (``loop.close()`` clears its ready queue), freeing it hands over."""

    __slots__ = ("_submissions", "_loop", "_ran")

    def __init__(self, submissions: LoopSubmissions, loop: asyncio.AbstractEventLoop) -> None:
        self._submissions = submissions
        self._loop = loop
        self._ran = False

    def __call__(self) -> None:
        self._ran = True
        self._submissions.hand_over(self._loop)

    def __del__(self) -> None:
        if self._ran:
            return
        try:
            self._submissions.hand_over(self._loop)
        except BaseException:  # a finalizer must not raise; nothing else can do it now
            logger.exception("handing over a dropped loop's submissions failed")


def _check_timeout(blocking: bool, timeout: float) -> None:
    """Refuse what `threading.Lock.acquire` refuses."""
    if not blocking:
        raise ValueError("can't specify a timeout for a non-blocking call")
    if timeout < 0:
        raise ValueError("timeout value must be a non-negative number or -1")


def _not_running(loop: asyncio.AbstractEventLoop) -> bool:
    return not loop.is_running()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
