"""`DeterministicScheduler`: runs the controlled threads one at a time, in an order
a chooser decides, on a virtual clock.

How it works. Every thread or pool task the runtime announces (`actors.scheduling.hooks`)
is *controlled*: it counts as running until it reaches a hook, where it stops and
waits to be picked. The scheduler's loop (on the harness's own thread) waits until
no controlled thread is running, lists the candidates (threads stopped at a point,
and parked threads whose wait is over: ready, or past its virtual deadline). A
parked thread whose wait is over runs first, without a decision; otherwise the
chooser picks among the points. With several candidates that is a *decision*; the
labels picked at the decisions are the schedule string. When nothing can run and a
path is still alive, the virtual clock jumps to the nearest deadline (a lease
renewal, a turn's limit, an ask's timeout), so no test ever sleeps.

Threads the runtime does not announce (the store's writer, pool workers between
tasks) run freely: they only serve a controlled thread that is running, which the
loop waits for. A controlled thread blocked anywhere but a hook would stall the
loop; after ``stuck_after_s`` real seconds the run fails with `HarnessStuckError`
instead of hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from actors.scheduling.hooks import Footprint

__all__ = ["Candidate", "Chooser", "DeadlockError", "DeterministicScheduler", "HarnessStuckError"]

#: Where the virtual monotonic clock starts (any value: only differences matter).
VIRTUAL_START = 1_000.0

_STARTING, _RUNNING, _WAITING, _DONE = "starting", "running", "waiting", "done"


class HarnessStuckError(RuntimeError):
    """A controlled thread blocked outside every hook, or a schedule never ended."""


class DeadlockError(RuntimeError):
    """Every live thread waits for ever: nothing can run and no timer is due."""


class Candidate:
    """A controlled thread or task (``seq``: its order of creation in this run)."""

    __slots__ = ("deadline", "footprint", "go", "group", "label", "ready", "seq", "state")

    def __init__(self, seq: int, group: str) -> None:
        self.seq = seq
        self.group = group  # the harness process it belongs to (a pause stops them all)
        self.go = threading.Event()  # set when picked (only this thread wakes)
        self.state = _STARTING
        self.label = ""
        self.ready: Callable[[], bool] | None = None
        self.deadline: float | None = None
        self.footprint: Footprint | None = None  # what its next step touches (None: unknown)

    def runnable(self, now: float) -> bool:
        if self.state != _WAITING:
            return False
        if self.ready is None or (self.deadline is not None and self.deadline <= now):
            return True
        return bool(self.ready())


class Chooser(Protocol):
    def choose(
        self, labels: list[str], seqs: list[int], running: int | None, footprints: list[Footprint | None]
    ) -> int:
        """The index of the candidate to run (labels sorted, unique; ``running``: the
        seq of the thread that ran last, a candidate or not; ``footprints``: what each
        one's step touches)."""

    def ran(self, seq: int, footprint: Footprint | None) -> None:
        """A thread ran a step (at a decision or not) that touched ``footprint``."""


class DeterministicScheduler:
    """One run's scheduler: install it (`actors.scheduling.hooks.install`), start the paths, `run`."""

    def __init__(
        self,
        chooser: Chooser,
        *,
        pauses: dict[str, float] | None = None,
        stuck_after_s: float = 30.0,
        max_steps: int = 50_000,
    ) -> None:
        self._chooser = chooser
        self._pauses = dict(pauses or {})  # group -> seconds: one pause each, at a decision's choice
        self._frozen: dict[str, float] = {}  # group -> virtual time its pause ends
        self._dead: set[str] = set()  # groups whose process crashed: none of their threads runs again
        #: The group of threads spawned by a thread the scheduler does not control.
        self.spawn_group = "main"
        self._stuck_after_s = stuck_after_s
        self._max_steps = max_steps
        self._cond = threading.Condition()
        self._stacks: dict[int, list[Candidate]] = {}  # thread ident -> the work it runs now
        self._live: list[Candidate] = []
        self._running = 0
        self._seq = 0
        self._free = False
        self._now = VIRTUAL_START
        self._released_at = 0.0
        self.steps = 0
        self.decisions: list[str] = []
        self._last: int | None = None  # the seq of the thread granted last
        #: label -> times a thread was picked there; (picked, waiting) -> times at a decision
        self.points: dict[str, int] = {}
        self.orders: dict[tuple[str, str], int] = {}

    # -- the runtime's side (actors.scheduling.hooks.Scheduler) ---------------------------------

    def spawned(self) -> object:
        with self._cond:
            if self._free:
                return None
            self._seq += 1
            parent = self.current()
            candidate = Candidate(self._seq, self.spawn_group if parent is None else parent.group)
            self._live.append(candidate)
            self._running += 1
            return candidate

    def adopt(self, token: object) -> None:
        if isinstance(token, Candidate):
            with self._cond:
                self._stacks.setdefault(threading.get_ident(), []).append(token)

    def finished(self, token: object) -> None:
        if not isinstance(token, Candidate):
            return
        with self._cond:
            stack = self._stacks.get(threading.get_ident())
            if stack and stack[-1] is token:
                stack.pop()
            if token.state in (_STARTING, _RUNNING):
                self._running -= 1
            token.state = _DONE
            self._live.remove(token)
            if not self._running:
                self._cond.notify()

    def point(self, label: str, footprint: Footprint | None = None) -> None:
        self._block(label, None, None, footprint)

    def park(
        self, label: str, ready: Callable[[], bool], timeout: float | None, footprint: Footprint | None = None
    ) -> float | None:
        return 0.0 if self._block(label, ready, timeout, footprint) else timeout

    def monotonic(self) -> float:
        if self._free:  # after the run: time goes on from where the virtual clock stopped
            return self._now + (time.monotonic() - self._released_at)
        return self._now

    def wall_offset(self) -> float:
        """Virtual seconds elapsed in this run (the store's clock adds them)."""
        return self.monotonic() - VIRTUAL_START

    def freeze(self, seconds: float) -> None:
        """From a controlled thread: its whole group stops for ``seconds`` virtual
        seconds (its own wait included), from now."""
        me = self.current()
        if me is not None:
            with self._cond:
                self._frozen[me.group] = max(self._frozen.get(me.group, 0.0), self._now + seconds)

    def crash(self) -> str | None:
        """From a controlled thread: its group never runs again in this run. Its group."""
        me = self.current()
        if me is None:
            return None
        with self._cond:
            self._dead.add(me.group)
        return me.group

    # -- the harness's side -------------------------------------------------------------

    def current(self) -> Candidate | None:
        stack = self._stacks.get(threading.get_ident())
        return stack[-1] if stack else None

    def run(self, alive: Callable[[], bool]) -> None:
        """Pick threads until nothing can run and ``alive()`` (a path is unfinished) is False."""
        with self._cond:
            while True:
                self._settle()
                candidates = sorted(
                    (c for c in self._live if c.runnable(self._now) and not self._is_frozen(c.group)),
                    key=lambda c: (c.label, c.seq),
                )
                if not candidates:
                    if not alive():
                        return
                    self._jump()
                    continue
                self.steps += 1
                if self.steps > self._max_steps:
                    raise HarnessStuckError(f"no end after {self._max_steps} steps: {self._waiting_labels()}")
                woken = [c for c in candidates if c.ready is not None]
                # A wake-up is not a decision: what a woken thread does before its next
                # point is its own, and a deadline only passes when nothing else could run.
                if woken:
                    self._grant(woken[0])
                    continue
                picked = self._pick(candidates)
                if picked is not None:
                    self._grant(picked)

    def release(self) -> None:
        """Let every controlled thread run freely (to close the registry after a run)."""
        with self._cond:
            self._released_at = time.monotonic()
            self._free = True
            for candidate in self._live:
                if candidate.state == _WAITING:
                    candidate.state = _RUNNING
                    self._running += 1
                    candidate.go.set()

    # -- internals --------------------------------------------------------------------

    def _block(
        self, label: str, ready: Callable[[], bool] | None, timeout: float | None, footprint: Footprint | None
    ) -> bool:
        with self._cond:
            me = self.current()
            if me is None or self._free:
                return False
            me.label, me.ready, me.footprint = label, ready, footprint
            me.deadline = None if timeout is None else self._now + timeout
            me.state = _WAITING
            me.go.clear()
            self._running -= 1
            if not self._running:
                self._cond.notify()  # the loop (the only other waiter on it)
        me.go.wait()
        return True

    def _settle(self) -> None:
        """(Condition held.) Wait until no controlled thread is running."""
        give_up = time.monotonic() + self._stuck_after_s
        while self._running:
            left = give_up - time.monotonic()
            if left <= 0:
                running = [c.label or f"#{c.seq} (not yet at a point)" for c in self._live if c.state != _WAITING]
                raise HarnessStuckError(f"threads blocked outside a scheduling point: {running}")
            self._cond.wait(left)

    def _is_frozen(self, group: str) -> bool:
        return group in self._dead or self._frozen.get(group, -1.0) > self._now

    def _jump(self) -> None:
        deadlines = [
            c.deadline
            for c in self._live
            if c.state == _WAITING and c.deadline is not None and not self._is_frozen(c.group)
        ]
        deadlines += [until for group, until in self._frozen.items() if until > self._now and group not in self._dead]
        if not deadlines:
            raise DeadlockError(f"every thread waits for ever: {self._waiting_labels()}")
        self._now = max(self._now, min(deadlines))

    def _pick(self, candidates: list[Candidate]) -> Candidate | None:
        """The candidate to run, or None when the choice was to pause a group."""
        pausable = sorted(g for g in self._pauses if any(c.group == g for c in candidates))
        if len(candidates) == 1 and not pausable:
            return candidates[0]
        labels = _unique([c.label for c in candidates]) + [f"pause {g}" for g in pausable]
        seqs = [c.seq for c in candidates] + [-1 - i for i in range(len(pausable))]
        footprints = [c.footprint for c in candidates] + [None] * len(pausable)  # a pause touches everything
        order = sorted(range(len(labels)), key=lambda i: labels[i])
        index = order[
            self._chooser.choose(
                [labels[i] for i in order], [seqs[i] for i in order], self._last, [footprints[i] for i in order]
            )
        ]
        self.decisions.append(labels[index])
        picked = _base(labels[index])
        for other in {_base(label) for label in labels[: len(candidates)]} - {picked}:
            self.orders[(picked, other)] = self.orders.get((picked, other), 0) + 1
        if index < len(candidates):
            return candidates[index]
        group = pausable[index - len(candidates)]
        self._frozen[group] = self._now + self._pauses.pop(group)
        return None

    def _grant(self, candidate: Candidate) -> None:
        self._chooser.ran(candidate.seq, candidate.footprint)
        self._last = candidate.seq
        label = _base(candidate.label) if candidate.label else "start"
        self.points[label] = self.points.get(label, 0) + 1
        candidate.state = _RUNNING
        self._running += 1
        candidate.go.set()

    def _waiting_labels(self) -> list[str]:
        return sorted(c.label for c in self._live if c.state == _WAITING)


def _unique(labels: list[str]) -> list[str]:
    """Same labels (two drains of one command, say) numbered in creation order."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def _base(label: str) -> str:
    """A label without the number `_unique` gave it."""
    head, sep, tail = label.rpartition(" #")
    return head if sep and tail.isdigit() else label
