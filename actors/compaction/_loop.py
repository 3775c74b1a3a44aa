"""The event loop thread async compressors run on (one per registry).

An ``async def compress`` runs as a task on one long-lived loop, so a client's
connection pool (``AsyncOpenAI``, LiteLLM) stays on one loop across attempts. The
attempt's worker thread waits for the task and cancels it as soon as the attempt's
``cancel`` event is set (an interrupt, a timeout or a lost lease).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from protocol.errors import CompressorLoopClosedError

__all__ = ["CompressorLoop", "CompressorLoopClosedError"]

logger = logging.getLogger("session_actors.compressor_loop")

T = TypeVar("T")
#: How often the waiting worker thread looks at ``cancel``.
_CANCEL_POLL_S = 0.02


class CompressorLoop:
    """Starts its thread on first use; `close` cancels what is left and joins it."""

    def __init__(self, name: str = "session-actors-compressors") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, awaitable: Awaitable[T], cancel: threading.Event) -> T:
        """Run ``awaitable`` on the loop; cancel its task once ``cancel`` is set."""
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(awaitable), self._started())
        while True:
            try:
                return future.result(timeout=_CANCEL_POLL_S)
            except FutureTimeout:
                if cancel.is_set():
                    future.cancel()  # cancels the task on the loop thread
                    raise CancelledError("compressor cancelled") from None

    def close(self, timeout: float) -> None:
        """Cancel the tasks still running, stop the loop and join its thread."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout)
        except Exception:
            logger.warning("async compressor tasks did not finish on close", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise CompressorLoopClosedError()
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True)
                self._thread.start()
            return self._loop


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
