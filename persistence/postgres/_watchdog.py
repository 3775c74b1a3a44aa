"""Deadlines that hold against a server that stops answering.

PostgreSQL's own timeouts (``statement_timeout``, ``lock_timeout``) are enforced
by the backend: a backend that is frozen (SIGSTOP, a VM paused, a host swapping
to death) enforces nothing, and the kernel keeps acknowledging our packets, so
TCP keepalives see a healthy peer. A client blocked reading its reply would wait
for the whole stall. The watchdog bounds that wait: a call registers its
connection with a deadline, and once the deadline plus `GRACE_S` has passed
with the call still waiting, the watchdog shuts the connection's socket down,
which wakes the blocked read with an error (the connection is then broken and
discarded). The server may still run what it had received once it resumes:
every write therefore also carries its deadline to the server, on the server's
clock (`call_deadline_check`, schema version 8), which refuses to commit once it
has passed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

__all__ = ["GRACE_S", "Watch", "Watchdog"]

log = logging.getLogger("session_actors.postgres.watchdog")

#: How long past its deadline a call may wait for a reply before its connection is cut:
#: long enough that a live server's own statement_timeout answers first.
GRACE_S = 0.5
_TICK_S = 0.05


class Watch:
    """One connection under watch. ``until``: the monotonic deadline of the call
    waiting on it (None: nothing waits); ``cut``: whether the watchdog cut it."""

    __slots__ = ("conn", "cut", "until")

    def __init__(self, conn: Any, until: float | None) -> None:
        self.conn = conn
        self.until = until
        self.cut = False


class Watchdog:
    """One thread per store, started on first use, cutting connections whose call
    outlived its deadline by `GRACE_S`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._watches: set[Watch] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, conn: Any, until: float | None = None) -> Watch:
        """Watch ``conn``; set the returned `Watch`'s ``until`` while a call waits."""
        watch = Watch(conn, until)
        with self._wake:
            self._watches.add(watch)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._wake.notify()
        return watch

    def unwatch(self, watch: Watch) -> None:
        """Stop watching; once this returns the watchdog never touches the connection
        again (so it may be closed, and its descriptor reused)."""
        with self._wake:
            self._watches.discard(watch)

    def close(self) -> None:
        """Stop the thread and join it. Idempotent."""
        with self._wake:
            self._closed = True
            thread, self._thread = self._thread, None
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        with self._wake:
            while not self._closed:
                self._cut_overdue(time.monotonic())
                self._wake.wait(_TICK_S if self._watches else None)

    def _cut_overdue(self, now: float) -> None:
        for watch in self._watches:
            until = watch.until
            if until is not None and not watch.cut and now >= until + GRACE_S:
                watch.cut = True
                _shut_down(watch.conn)


def _shut_down(conn: Any) -> None:
    """Shut the connection's socket down in both directions (called under the
    watchdog's lock, so the descriptor is still the connection's): a thread blocked
    reading it wakes with an end of file. A duplicate descriptor does it, so the
    driver's own stays open and is closed by the driver as usual."""
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception as exc:  # any: already closed or broken; its caller sees that
        log.debug("cutting a stalled connection failed: %s", exc)
        return
    log.warning("PostgreSQL did not answer a call within its deadline; its connection was cut")
