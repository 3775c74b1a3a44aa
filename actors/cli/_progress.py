"""Progress of a long command on stderr: a bar on a terminal, periodic lines in a log.

On a terminal the bar redraws in place. Piped (a CI log, ``2> file``) a bar would be
a wall of carriage returns or nothing at all, so instead one line is written at each
tenth of the work and at least every `LINE_EVERY_S` seconds: a stalled run still shows
that it is alive and where it stopped.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from ._output import no_color

__all__ = ["LINE_EVERY_S", "progress"]

#: Longest silence between two progress lines when stderr is not a terminal.
LINE_EVERY_S = 30.0


@contextmanager
def progress(
    total: int, unit: str, *, label: str = "simulating", stream: TextIO | None = None
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)`` (thread-safe) for work of ``total`` ``unit``s."""
    stream = sys.stderr if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        console = Console(file=stream, no_color=no_color(), highlight=False)
        with Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as bar:
            task = bar.add_task(unit, total=total)
            yield lambda n: bar.advance(task, n)
        return
    lines = _Lines(total, unit, label, stream)
    yield lines.advance
    lines.finish()


class _Lines:
    """One progress line per tenth of the work, or per `LINE_EVERY_S` of silence."""

    def __init__(self, total: int, unit: str, label: str, stream: TextIO) -> None:
        self._total = max(1, total)
        self._label = label
        self._unit = unit
        self._stream = stream
        self._lock = threading.Lock()
        self._done = 0
        self._tenth = 0
        self._started = self._last = time.monotonic()

    def advance(self, n: int) -> None:
        with self._lock:
            self._done += n
            tenth = min(10, self._done * 10 // self._total)
            now = time.monotonic()
            if tenth > self._tenth or now - self._last >= LINE_EVERY_S:
                self._tenth = tenth
                self._write(now)

    def finish(self) -> None:
        with self._lock:
            if self._tenth < 10:  # the last line always says where the run ended
                self._write(time.monotonic())

    def _write(self, now: float) -> None:
        self._last = now
        percent = self._done * 100 // self._total
        self._stream.write(
            f"{self._label}: {self._done}/{self._total} {self._unit} ({percent}%), {now - self._started:.1f}s\n"
        )
        self._stream.flush()
