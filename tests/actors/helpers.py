"""Helpers for the actor tests: fault-injecting store wrappers and small utilities."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from persistence import Store
from protocol import Message

__all__ = ["Blocker", "FaultyStore", "conversation", "result_of", "run_in_thread", "wait_until"]


class FaultyStore:
    """Delegates every `Store` method to ``inner``; ``hooks[name]`` replaces one.

    A hook gets the real bound method first: ``hook(real, *args, **kwargs)``.
    Only used to inject faults (raise, block on an Event); the store stays real.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.hooks: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        hook = self.hooks.get(name)
        if hook is None or not callable(real):
            return real

        def hooked(*args: Any, **kwargs: Any) -> Any:
            return hook(real, *args, **kwargs)

        return hooked


def conversation(n: int, *, start: int = 0) -> list[Message]:
    """``n`` alternating user/assistant messages with distinct contents."""
    return [Message("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(start, start + n)]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll a state that has no event to wait on (e.g. a counter), with a deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Blocker:
    """A hook that blocks a store method until released; ``entered`` tells when."""

    def __init__(self, *, once: bool = True) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._once = once
        self._used = False
        self._lock = threading.Lock()

    def __call__(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            block = not (self._once and self._used)
            self._used = True
        if block:
            self.entered.set()
            assert self.release.wait(30), "blocked store call never released"
        return real(*args, **kwargs)


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``fn`` in a thread; returns (thread, box) where box["value"|"error"] is set."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # surfaced by the test through the box
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-caller")
    thread.start()
    return thread, box


def result_of(thread: threading.Thread, box: dict[str, Any], timeout: float = 20.0) -> Any:
    thread.join(timeout)
    assert not thread.is_alive(), "caller thread did not finish"
    if "error" in box:
        raise box["error"]
    return box["value"]
