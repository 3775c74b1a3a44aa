"""`WorkerPool`: the shared, elastic threads a registry's actors run on.

An actor owns no thread (see `actors.scheduling.pooled`): when a message lands in an idle
actor's mailbox, the actor's drain is submitted here. Threads are started on
demand, only when more tasks are queued than workers are free (waiting, or just
done with a task and about to look), up to ``max_workers``; a worker idle for
``idle_s`` exits, except the first ``core`` ones (started with the pool), so the
first message after a quiet spell meets a waiting thread instead of a thread
start. Tasks run in
submission order (one FIFO queue), and a task raising anything, even a
`BaseException`, is logged and never takes its worker down.

Why a cap cannot deadlock: a task (an actor's drain) only blocks on store I/O
(bounded by the store's patience), on threads that are not workers (compressor
and lease threads, the store's writer) or on callers; no handler ever waits for
another actor's progress, so every busy worker finishes without help from the
tasks queued behind it. A cap only bounds how many handlers block at once.

`close()` runs what is queued, then joins every worker. A task submitted after
`close()` runs on the submitting thread (an actor stopped late, e.g. by pykka's
``ActorRegistry.stop_all``), so nothing queued is ever stranded.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from . import hooks as _sched

__all__ = ["WorkerPool"]

logger = logging.getLogger("session_actors.pool")

Task = Callable[[], None]

_pool_numbers = itertools.count(1)


class WorkerPool:
    """A FIFO task queue served by at most ``max_workers`` threads, started on demand."""

    def __init__(self, max_workers: int, *, idle_s: float = 2.0, core: int = 0, name: str = "actor-pool") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        if not 0 <= core <= max_workers:
            raise ValueError(f"core must be between 0 and max_workers, got {core}")
        if idle_s <= 0:
            raise ValueError(f"idle_s must be positive, got {idle_s}")
        self.max_workers = max_workers
        self.idle_s = idle_s
        self._name = f"{name}-{next(_pool_numbers)}"
        self._thread_numbers = itertools.count(1)
        self._cond = threading.Condition(threading.Lock())
        self._ready: deque[Task] = deque()
        self._workers: set[threading.Thread] = set()
        self._waiting = 0  # workers blocked in wait() (notified or not)
        self._busy = 0  # workers running a task
        self._closed = False
        self._started = 0  # threads ever started (monitoring)
        self._peak = 0  # most workers alive at once (monitoring)
        # Workers that never exit for being idle, started now. Daemon threads: one
        # waits for work for ever, so a registry never closed would otherwise keep the
        # interpreter from exiting (a thread per actor let it go once the actors were
        # evicted). Non-daemon threads waiting on a task it runs keep it running.
        self._core: set[threading.Thread] = set()
        with self._cond:
            for _ in range(core):
                self._core.add(self._start_worker(daemon=True))

    def submit(self, task: Task) -> None:
        """Run ``task`` on a worker: a waiting one, a new one while under the cap, or
        the next busy one to finish."""
        task = _sched.task(task)  # a harness's scheduler counts it from here
        with self._cond:
            if not self._closed:
                self._ready.append(task)
                if self._waiting:
                    self._cond.notify()  # a notified waiter drains ``_ready`` before waiting again
                free = len(self._workers) - self._busy
                if len(self._ready) > free and len(self._workers) < self.max_workers:
                    self._start_worker()
                return
        _run(task)  # closed: nobody else will

    def stats(self) -> dict[str, int]:
        """Workers alive now, the most alive at once, threads ever started, tasks queued."""
        with self._cond:
            return {
                "workers": len(self._workers),
                "peak_workers": self._peak,
                "threads_started": self._started,
                "queued": len(self._ready),
            }

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then join every worker (at most ``timeout`` seconds).
        True when every worker exited in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            workers = list(self._workers)
        for worker in workers:
            if worker is threading.current_thread():
                continue  # closed from a task: this worker exits once the task returns
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            worker.join(left)
        alive = [w.name for w in workers if w.is_alive() and w is not threading.current_thread()]
        if alive:
            logger.warning("%s: workers still busy after close: %s", self._name, alive)
        return not alive

    # -- workers --------------------------------------------------------------------

    def _start_worker(self, *, daemon: bool = False) -> threading.Thread:
        """(Condition held.) One more worker; it takes tasks until idle for ``idle_s``."""
        thread = threading.Thread(target=self._work, name=f"{self._name}-{next(self._thread_numbers)}", daemon=daemon)
        self._workers.add(thread)
        try:
            thread.start()
        except Exception:  # "can't start new thread": a worker alive takes the task
            self._workers.discard(thread)  # never counted on, never joined
            if not self._workers:
                raise
            logger.warning(
                "%s: could not start a worker; the %d alive take the queue",
                self._name,
                len(self._workers),
                exc_info=True,
            )
            return thread
        self._started += 1
        self._peak = max(self._peak, len(self._workers))
        return thread

    def _work(self) -> None:
        task = self._next_task(finished=False)
        while task is not None:
            _run(task)
            task = self._next_task(finished=True)

    def _next_task(self, *, finished: bool) -> Task | None:
        """The oldest queued task, or None when this worker should exit (idle for
        ``idle_s``, or closed with nothing left); an exiting worker leaves the set
        under the same lock, so `submit` never counts on it."""
        with self._cond:
            if finished:
                self._busy -= 1
            idle_until = time.monotonic() + self.idle_s
            while not self._ready:
                left = idle_until - time.monotonic()
                me = threading.current_thread()
                if self._closed or (left <= 0 and me not in self._core):
                    self._workers.discard(me)
                    return None
                if left <= 0:  # one of the core workers: wait on
                    idle_until = time.monotonic() + self.idle_s
                    left = self.idle_s
                self._waiting += 1
                try:
                    self._cond.wait(left)
                finally:
                    self._waiting -= 1
            self._busy += 1
            return self._ready.popleft()


def _run(task: Task) -> None:
    try:
        task()
    except BaseException:  # a worker serves every actor: one failure must not stop it
        logger.exception("a pooled task failed")
