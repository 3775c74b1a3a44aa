"""`PathHandle`: what a harness path gets instead of a session or review handle.

It forwards every call to the real handle, after a scheduling point named
``"<path> <call>"`` whose footprint is the call's: a read (transcript, archive) or a
write of the path's conversation (the harness assumes a path shares nothing else
with the others: see ``reduce`` in `Harness.explore`); and writes what the store acknowledged in the run's `Ledger`:
the rows each append returned, minus what a retract took back. A keyed append whose
key the ledger already holds is a redelivery: the store returned the message it had
(the original, or a copy a compaction carried), not a new one, so it adds nothing.
The invariants are checked against that ledger.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from actors.scheduling import hooks as _sched
from protocol import CompressionOutcome, InvalidArgumentError, StoredMessage
from protocol._checks import check_duration

__all__ = ["Crashed", "Faults", "Ledger", "PathHandle", "PathTurn"]


class Crashed(BaseException):
    """Ends a path whose process crashed (`PathHandle.crash`): not an error of the path.
    A BaseException so that the path's own ``except Exception`` cannot swallow it."""


class Faults:
    """What a path can do to its own process: freeze it, crash it (the harness's side)."""

    def __init__(self, freeze: Any = None, crash: Any = None) -> None:
        self.freeze = freeze  # seconds -> None: the process stops for that long
        self.crash = crash  # () -> None: the process never runs again
        self.dead = False


class Ledger:
    """The acknowledged appends of one run, in acknowledgement order: each message
    once, as the append that stored it returned it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[int, StoredMessage] = {}
        self._keys: set[str] = set()  # the idempotency keys of the messages acknowledged
        self.ever: set[int] = set()  # every row id an append returned, retracted ones too
        self.by_path: dict[str, list[StoredMessage]] = {}  # each path's acknowledged messages
        self.outcomes: dict[str, list[CompressionOutcome]] = {}

    def acked(self, rows: list[StoredMessage], path: str = "") -> None:
        with self._lock:
            self.ever.update(row.id for row in rows)
            self.by_path.setdefault(path, []).extend(rows)
            for row in rows:
                if row.key is not None:
                    if row.key in self._keys:  # a redelivery: the message is in the ledger already
                        continue
                    self._keys.add(row.key)
                self.rows[row.id] = row

    def compressed(self, path: str, outcome: CompressionOutcome) -> None:
        with self._lock:
            self.outcomes.setdefault(path, []).append(outcome)

    def retracted(self, row: StoredMessage | None) -> None:
        if row is not None:
            with self._lock:
                self.rows.pop(row.id, None)


_READS = frozenset({"transcript", "archive"})
_FAULTS = frozenset({"freeze", "crash"})  # stop a whole process: they conflict with every step


class PathHandle:
    """A path's handle: the real handle's calls, each one a scheduling point."""

    def __init__(
        self, name: str, handle: Any, ledger: Ledger, faults: Faults | None = None, conversation: str | None = None
    ) -> None:
        self.name = name
        self._handle = handle
        self._ledger = ledger
        self._faults = faults or Faults()
        self._started = False  # the path's start was its first point
        self._conversation = conversation  # the session's incarnation (None: unknown)

    def footprint(self, call: str = "") -> _sched.Footprint | None:
        """What a step of this path touches: its conversation (``call`` a read or not)."""
        if self._conversation is None or call in _FAULTS:
            return None
        return _sched.Footprint(frozenset((self._conversation,)), call not in _READS)

    @property
    def session_id(self) -> str:
        return str(self._handle.session_id)

    @property
    def handle(self) -> Any:
        """The real `SessionHandle` or `ReviewHandle` (calls on it are not points)."""
        return self._handle

    def _step(self, call: str) -> _sched.scope:
        """The point before ``call``; the scope its hooks run in (its footprint)."""
        footprint = self.footprint(call)
        if not self._started:  # nothing happened since the start point: not a new one
            self._started = True
        else:
            _sched.point(f"{self.name} {call}", footprint)
        if self._faults.dead:  # another path of this process crashed it: nothing more runs here
            raise Crashed(self.name)
        return _sched.scope(footprint)

    def append(self, *args: Any, **fields: Any) -> Any:
        with self._step("append"):
            stored = self._handle.append(*args, **fields)
        self._ledger.acked(stored if isinstance(stored, list) else [stored], self.name)
        return stored

    def retract(self) -> StoredMessage | None:
        with self._step("retract"):
            popped = self._handle.retract()
        self._ledger.retracted(popped)
        return popped

    def transcript(self, *, limit: int | None = None) -> list[StoredMessage]:
        with self._step("transcript"):
            return list(self._handle.transcript(limit=limit))

    def archive(self) -> list[StoredMessage]:
        with self._step("archive"):
            return list(self._handle.archive())

    def compress(self, *, force: bool = False, mode: Any = None) -> CompressionOutcome:
        with self._step("compress"):
            outcome = self._handle.compress(force=force, mode=mode)
        self._ledger.compressed(self.name, outcome)
        return outcome

    def interrupt(self) -> bool:
        with self._step("interrupt"):
            return bool(self._handle.interrupt())

    def advance(self, seconds: float) -> None:
        """Sleep ``seconds`` on the harness's virtual clock: the other paths go on
        meanwhile, and every timer due fires in its order (a holder frozen past its
        lease, say). Takes no real time."""
        seconds = check_duration(seconds, "advance() seconds", allow_zero=True)
        self._started = True
        # what the path does once awake, up to its next call, is its own
        _sched.park(f"{self.name} advance", _never, seconds, _sched.LOCAL)

    def freeze(self, seconds: float) -> None:
        """Stop this path's whole process for ``seconds`` on the virtual clock: none of
        its threads runs meanwhile (no lease renewal, no actor step), then it goes on
        as if nothing happened. SIGSTOP (or a long GC pause), placed by the path."""
        seconds = check_duration(seconds, "freeze() seconds")
        if self._faults.freeze is None:
            raise InvalidArgumentError("freeze() runs under a Harness")
        self._step("freeze")
        self._faults.freeze(seconds)
        _sched.park(f"{self.name} frozen", _never, seconds)

    def crash(self) -> None:
        """This path's process dies here: this path and every other path and thread of
        it stop for good (its memory is gone; nothing it had not written reaches the
        database), and its leases lapse on the virtual clock. Never returns."""
        if self._faults.crash is None:
            raise InvalidArgumentError("crash() runs under a Harness")
        self._step("crash")
        self._faults.crash()
        raise Crashed(self.name)

    def turn(self, on_busy: str | None = None) -> PathTurn:
        return PathTurn(self, self._handle.turn(on_busy))


def _never() -> bool:
    return False


class PathTurn:
    """``with h.turn():`` on a path: opening and closing are scheduling points."""

    def __init__(self, path: PathHandle, turn: Any) -> None:
        self._path = path
        self._turn = turn

    @property
    def interrupted(self) -> bool:
        return bool(self._turn.interrupted)

    def wait_interrupted(self, timeout: float | None = None) -> bool:
        return bool(self._turn.wait_interrupted(timeout))

    def __enter__(self) -> PathHandle:
        with self._path._step("turn"):
            self._turn.__enter__()
        return self._path

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and issubclass(exc_type, Crashed):
            return  # the process died inside its turn: nobody closes it (its lease lapses)
        with self._path._step("end turn"):
            self._turn.__exit__(exc_type, exc, tb)
