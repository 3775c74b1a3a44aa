"""Compressors for tests: yours and ours.

`GatedCompressor` blocks inside ``compress`` until the test releases it, so a test
can act while a compaction is in flight; `ScriptedCompressor` returns or raises
what it was given. Both record every input and are safe across threads.
`SlowCompressor` takes virtual time under a `Harness`: the summary is slow while
the other paths, the lease keeper and the turn clock go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from actors.scheduling import hooks as _sched
from protocol import SUMMARY_PREFIX, InvalidArgumentError, Message, StoredMessage
from protocol._checks import check_duration

__all__ = ["CompressorCancelled", "GatedCompressor", "ScriptedCompressor", "SlowCompressor", "summary_only"]

DEFAULT_GATE_TIMEOUT_S = 60.0
_CANCEL_POLL_S = 0.01


class CompressorCancelled(Exception):
    """Raised by the test compressors when ``cancel`` was set while they waited."""


def summary_only(messages: Sequence[Message]) -> list[Message]:
    """Keep leading system messages and replace everything else by one summary."""
    head = []
    for message in messages:
        if message.role != "system":
            break
        head.append(message.as_message())
    summary = Message("assistant", f"{SUMMARY_PREFIX} summary of {len(messages)} messages", meta={"synthetic": True})
    return head + [summary]


class _Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inputs: list[list[StoredMessage]] = []

    def _record(self, messages: Sequence[StoredMessage]) -> int:
        """Record one call; returns its 0-based index."""
        with self._lock:
            self._inputs.append(list(messages))
            return len(self._inputs) - 1

    @property
    def calls(self) -> int:
        """How many times ``compress`` was entered."""
        with self._lock:
            return len(self._inputs)

    @property
    def inputs(self) -> list[list[StoredMessage]]:
        """The transcript each call received, in call order."""
        with self._lock:
            return [list(x) for x in self._inputs]


class GatedCompressor(_Recorder):
    """Blocks in ``compress`` until `release` is called (or ``cancel`` is set).

    ``started`` is set each time a call enters. ``result`` maps the input to the
    output (default `summary_only`). A cancelled wait raises `CompressorCancelled`;
    a gate not released within ``gate_timeout_s`` raises `TimeoutError` so a broken
    test cannot hang a worker thread forever.
    """

    name = "gated"

    def __init__(
        self,
        result: Callable[[Sequence[StoredMessage]], Sequence[Message]] = summary_only,
        *,
        gate_timeout_s: float = DEFAULT_GATE_TIMEOUT_S,
    ) -> None:
        super().__init__()
        self.started = threading.Event()
        self._gate = threading.Event()
        self._result = result
        self._gate_timeout_s = gate_timeout_s

    def release(self) -> None:
        """Let every current and future call proceed."""
        self._gate.set()

    def wait_started(self, timeout: float = 10.0) -> bool:
        return self.started.wait(timeout)

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        self._record(messages)
        self.started.set()
        remaining = self._gate_timeout_s
        while not self._gate.wait(_CANCEL_POLL_S):
            if cancel.is_set():
                raise CompressorCancelled("cancelled while gated")
            remaining -= _CANCEL_POLL_S
            if remaining <= 0:
                raise TimeoutError("GatedCompressor was never released")
        return self._result(messages)


class ScriptedCompressor(_Recorder):
    """Plays a script, one step per call; the last step repeats.

    A step is a list of messages (or message dicts) to return, an exception
    (instance or class) to raise, or a callable ``f(messages) -> list[Message]``.
    """

    name = "scripted"

    def __init__(self, *steps: Any) -> None:
        if not steps:
            raise ValueError("ScriptedCompressor needs at least one step")
        super().__init__()
        self._steps = list(steps)

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        index = self._record(messages)
        step = self._steps[min(index, len(self._steps) - 1)]
        if isinstance(step, BaseException) or (isinstance(step, type) and issubclass(step, BaseException)):
            raise step
        if callable(step):
            return list(step(messages))
        return [m if isinstance(m, Message) else Message.from_dict(m) for m in step]


class SlowCompressor:
    """``inner``, after ``seconds`` on the harness's virtual clock.

    Under a `Harness` the summary takes that long on its clock and no real time:
    meanwhile the other paths run, the lease keeper renews (or, in a frozen
    process, does not), ``max_turn_s`` runs out and the attempt's deadline comes.
    A ``cancel`` (an interrupt, a lost lease) ends the wait early and raises
    `CompressorCancelled`. Outside a harness it waits no time at all.
    """

    def __init__(self, inner: Any, seconds: float) -> None:
        if not callable(getattr(inner, "compress", None)):
            raise InvalidArgumentError(f"SlowCompressor wraps a compressor, got {inner!r}")
        self.inner = inner
        self.seconds = check_duration(seconds, "SlowCompressor seconds", allow_zero=True)
        self.name = str(getattr(inner, "name", "") or "slow")

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        # a controlled thread returns once the virtual deadline passed (or cancel was set)
        _sched.park("slow compressor", cancel.is_set, self.seconds)
        if cancel.is_set():
            raise CompressorCancelled("cancelled while the summary was slow")
        return self.inner.compress(messages, target_tokens=target_tokens, cancel=cancel)
