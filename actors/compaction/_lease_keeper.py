"""Keeps a compaction lease alive while the compressor runs, and fences its holder.

One thread per attempt. Every ``ttl/3`` it renews the lease. A transient renew
error is tolerated, but the holder stops acting as owner as soon as it can no
longer prove ownership: a renew answered None (final), or monotonic time since the
last successful renew passed ``ttl - min(ttl/10, 5)`` (the self-fence). The same
thread enforces the attempt's hard deadline (``max_compaction_s``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from persistence import Store
from protocol import Lease

from ..scheduling import hooks as _sched
from ._policy import CompactionPolicy

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("session_actors.lease_keeper")


class LeaseKeeper:
    """Renews ``lease`` until stopped; calls ``on_lost`` or ``on_timeout`` at most once."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        policy: CompactionPolicy,
        *,
        on_lost: Callable[[], object],
        on_timeout: Callable[[], object],
        renewed_at: float | None = None,
    ) -> None:
        self._store = store
        self._lease = lease
        self._policy = policy
        self._on_lost = on_lost
        self._on_timeout = on_timeout
        # Monotonic time the lease was last proven ours (acquired or renewed). It is
        # taken *before* the store call, so the self-fence errs on the safe side.
        self._proven_at = _sched.monotonic() if renewed_at is None else renewed_at
        self._deadline = self._proven_at + policy.max_compaction_s
        self._lost = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = _sched.Thread(target=self._run, name=f"lease-keeper:{lease.session_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing. Never waits: the thread may be inside a slow renew, and an
        interrupt must return promptly; `join` waits for it (used on close)."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            _sched.join(self._thread, timeout, f"join lease-keeper {self._lease.session_id}")

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    def owned(self) -> bool:
        """True while the holder can still prove ownership (renewed recently, never lost)."""
        with self._lock:
            if self._lost:
                return False
            return _sched.monotonic() - self._proven_at <= self._policy.self_fence_s

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # a keeper must never die silently with the lease held
            logger.exception("lease keeper for %s failed", self._lease.session_id)
            self._mark_lost()
            self._on_lost()

    def _loop(self) -> None:
        interval = self._policy.renew_interval_s
        next_renew = self._proven_at + interval
        while True:
            now = _sched.monotonic()
            with self._lock:
                fence_at = self._proven_at + self._policy.self_fence_s
            wake = min(next_renew, fence_at, self._deadline)
            if _sched.wait(self._stop, max(0.0, wake - now), f"lease-keeper {self._lease.session_id}"):
                return
            now = _sched.monotonic()
            if now >= self._deadline:
                self._on_timeout()
                return
            if now >= fence_at:
                logger.warning("self-fencing lease on %s: no renew for too long", self._lease.session_id)
                self._mark_lost()
                self._on_lost()
                return
            if now >= next_renew:
                renewed = self._renew_once()
                if renewed is None:
                    self._on_lost()
                    return
                # after a transient failure, retry sooner: the self-fence is coming
                next_renew = now + (interval if renewed else interval / 4)

    def _renew_once(self) -> bool | None:
        """Renew: True when renewed, False after a transient error, None when the
        lease is definitively gone."""
        started = _sched.monotonic()
        try:
            renewed = self._store.renew_lease(self.lease, self._policy.lease_ttl_s)
        except Exception:  # transient: keep trying until the self-fence says otherwise
            logger.warning("renewing lease on %s failed; will retry", self._lease.session_id, exc_info=True)
            return False
        if renewed is None:
            logger.warning("lease on %s was taken over or expired", self._lease.session_id)
            self._mark_lost()
            return None
        with self._lock:
            self._lease = renewed
            self._proven_at = started
        return True

    def _mark_lost(self) -> None:
        with self._lock:
            self._lost = True
