"""`Reply`: the one-shot answer slot a sync caller waits on.

A held lock is the latch: far cheaper than a `concurrent.futures.Future`, whose
``set_result`` takes a condition, notifies and runs callbacks, and whose
``result`` allocates a waiter lock per wait. It has the part of the Future
interface the actor uses (``set_result``, ``set_exception``, ``InvalidStateError``
on a second set), so the actor answers both kinds alike.
"""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

__all__ = ["Reply"]


class Reply:
    """Set once (`set_result` or `set_exception`), read by one waiter."""

    __slots__ = ("_latch", "_claim", "_value", "_error")

    def __init__(self) -> None:
        self._latch = threading.Lock()
        self._latch.acquire()  # released once the answer is in
        self._claim = threading.Lock()  # makes setting one-shot across threads
        self._value: Any = None
        self._error: BaseException | None = None

    def set_result(self, value: Any) -> None:
        self._settle(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def done(self) -> bool:
        return self._claim.locked()

    def result(self, timeout: float | None = None) -> Any:
        """The answer (or its exception); `TimeoutError` if none within ``timeout``."""
        if not self._latch.acquire(timeout=-1 if timeout is None else timeout):
            raise FutureTimeout()
        self._latch.release()  # stays open: a second result() answers at once
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self, value: Any, error: BaseException | None) -> None:
        if not self._claim.acquire(False):
            raise InvalidStateError("reply already set")
        self._value, self._error = value, error
        self._latch.release()
