"""`Latch`: how a group-commit writer lets a waiting caller go.

A committed batch's callers are woken one by one (each releases the next of its
chain, `batching.linked_chains`). Waking a thread that sleeps is a futex wake-up,
and on a VM that costs the waking thread ~6 us (an interrupt to the other vCPU):
with a plain lock as the latch, all of it with the GIL held, which every other
thread of the process waits for, once per append. A Linux eventfd does the same
wake-up in a write whose syscall lets go of the GIL, so the other threads run
Python meanwhile (measured 1.08-1.15x from 64 threads when it was introduced).

Each latch waits on an eventfd taken from a process-wide pool and given back when
its wait ends, so a process holds as many as it has callers waiting at once, at
most `MAX_EVENTFDS`; past that, where ``os.eventfd`` is missing (not Linux) or the
process is out of descriptors, a latch is a plain lock. The waiter loops on its
own flag, so a wake-up meant for an earlier user of the same eventfd (one whose
wait saw its flag before the write arrived) only makes it look again; an eventfd
whose wait was interrupted is never reused (it is closed once its latch is gone).
"""

from __future__ import annotations

import os
import threading
import weakref

__all__ = ["MAX_EVENTFDS", "Latch"]

#: Eventfds a process keeps for its latches (read at each new one: a benchmark sets it
#: to 0 to compare with plain locks).
MAX_EVENTFDS = 256
_new_eventfd = getattr(os, "eventfd", None)
_pool: list[int] = []  # idle eventfds, each at count 0 or holding a stale wake-up
_pool_lock = threading.Lock()  # guards making new ones (take/give back are atomic list ops)
_made = 0


class Latch:
    """Held until `set` (once, from any thread); `wait` (by one thread) returns once it is."""

    __slots__ = ("_set", "_fd", "_lock", "__weakref__")

    def __init__(self) -> None:
        self._set = False
        self._fd = fd = _take_eventfd()  # -1: a lock instead
        self._lock: threading.Lock | None = None
        if fd < 0:
            self._lock = threading.Lock()
            self._lock.acquire()

    def set(self) -> None:
        self._set = True
        fd = self._fd
        if fd >= 0:
            os.eventfd_write(fd, 1)  # lets go of the GIL for the wake-up
        elif self._lock is not None:
            self._lock.release()

    def wait(self) -> None:
        fd = self._fd
        if fd < 0:
            assert self._lock is not None
            self._lock.acquire()
            return
        try:
            while not self._set:
                os.eventfd_read(fd)
        except BaseException:
            # interrupted: the set may still write to it, so it stays this latch's and
            # is closed once the latch is gone, never given to another
            weakref.finalize(self, _close, fd)
            raise
        self._fd = -1
        _pool.append(fd)  # a set() racing this may still add a stale wake-up: harmless

    def close(self) -> None:
        """Give back the eventfd of a latch that will never be waited on or set."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            _pool.append(fd)


def _take_eventfd() -> int:
    if MAX_EVENTFDS <= 0:
        return -1
    try:
        return _pool.pop()
    except IndexError:
        pass
    global _made
    with _pool_lock:
        if _new_eventfd is None or _made >= MAX_EVENTFDS:
            return -1
        try:
            fd = _new_eventfd(0, os.EFD_CLOEXEC)
        except OSError:  # out of descriptors: this latch is a lock
            return -1
        _made += 1
        return fd


def _close(fd: int) -> None:
    global _made
    os.close(fd)
    with _pool_lock:
        _made -= 1


def _forget_in_child() -> None:
    """A forked child must not share the parent's eventfds (a wake-up written in one
    process could be read in the other): it closes its copies and makes its own."""
    global _made, _pool_lock
    _pool_lock = threading.Lock()  # another thread may have held it at the fork
    for fd in _pool:
        os.close(fd)
    _pool.clear()
    _made = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
