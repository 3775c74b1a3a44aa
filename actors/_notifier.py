"""`OutcomeNotifier`: calls a registry's ``on_outcome`` hook on its own thread.

An attempt posts its outcome once, after its cleanup and after its callers were
woken; the hook then runs here, never on an actor thread, so a slow hook delays
no append. An exception from the hook is logged and ignored.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from protocol import CompressionOutcome

__all__ = ["OutcomeHook", "OutcomeNotifier"]

logger = logging.getLogger("session_actors.registry")

OutcomeHook = Callable[[CompressionOutcome], object]

_STOP = object()


class OutcomeNotifier:
    """One daemon thread draining a queue of outcomes into ``hook``."""

    def __init__(self, hook: OutcomeHook) -> None:
        self._hook = hook
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="registry-outcomes", daemon=True)
        self._thread.start()

    def post(self, outcome: CompressionOutcome) -> None:
        """Queue one call of the hook (thread-safe, never blocks)."""
        if self._closed:
            logger.debug("outcome after the registry closed, not delivered: %r", outcome)
            return
        self._queue.put(outcome)

    def close(self, timeout: float) -> None:
        """Deliver what is queued, then stop the thread (waits at most ``timeout``)."""
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("on_outcome hook still running after %ss; not waiting for it", timeout)

    def _run(self) -> None:
        while (outcome := self._queue.get()) is not _STOP:
            try:
                self._hook(outcome)  # type: ignore[arg-type]
            except BaseException:  # a hook's bug must not stop later notifications
                logger.exception("on_outcome hook raised; ignored")
