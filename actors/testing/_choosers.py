"""How a schedule is chosen: at random by priorities (PCT), every one in turn
(depth first, optionally within a preemption bound), or replayed from its schedule
string (all of it, or a prefix and then no preemption: how a failure is shrunk).
Depth first skips the orders that only swap steps that commute (sleep sets).

A schedule string is the labels picked at each decision (a step with more than
one candidate), joined by `SEPARATOR`. Steps with one candidate are not written:
the run is deterministic between decisions. Each chooser is told which candidate,
if any, is the thread that ran last (``running``): picking another one while it
could go on is a *preemption*. A pause (a negative seq) is a fault the schedule
injects, not a preemption.
"""

from __future__ import annotations

import random

from actors.scheduling.hooks import Footprint
from protocol import TranscriptError

__all__ = [
    "SEPARATOR",
    "Exhaustive",
    "Priorities",
    "Replay",
    "ReplayThenSteady",
    "ScheduleMismatchError",
    "join",
    "split",
]

SEPARATOR = " > "


class ScheduleMismatchError(TranscriptError):
    """A replayed schedule does not fit the run (the paths or the code changed)."""


def join(decisions: list[str]) -> str:
    return SEPARATOR.join(decisions)


def split(schedule: str) -> list[str]:
    return schedule.split(SEPARATOR) if schedule else []


class _Blind:
    """A chooser that does not look at what steps touch."""

    def ran(self, seq: int, footprint: Footprint | None) -> None:
        pass


class Priorities(_Blind):
    """PCT (Burckhardt et al., 2010): each thread gets a random priority, the highest
    candidate runs, and at ``depth - 1`` random decisions the chosen thread drops
    below every other. Finds any bug of depth ``depth`` with a known probability.

    A pause (a candidate with a negative ``seq``) is not a thread: it is taken at the
    first decision it is offered from a random decision on, so each moment of a
    run is about as likely to be the one a process freezes at."""

    def __init__(self, seed: int, *, depth: int = 3, horizon: int = 60) -> None:
        depth = max(1, depth)
        self._rng = random.Random(seed)
        self._priority: dict[int, float] = {}
        self._changes = set(self._rng.sample(range(horizon), min(depth - 1, horizon)))
        self._decision = 0
        self._lowest = 0.0
        self._pause_from = self._rng.randrange(max(1, horizon // 3))

    def choose(self, labels: list[str], seqs: list[int], running: int | None = None, footprints: object = None) -> int:
        pauses = [i for i, seq in enumerate(seqs) if seq < 0]
        if pauses and self._decision >= self._pause_from:
            self._decision += 1
            return pauses[0]
        threads = [i for i, seq in enumerate(seqs) if seq >= 0]
        return threads[self._choose_thread([seqs[i] for i in threads])]

    def _choose_thread(self, seqs: list[int]) -> int:
        for seq in seqs:
            if seq not in self._priority:
                self._priority[seq] = 1.0 + self._rng.random()
        best = max(range(len(seqs)), key=lambda i: self._priority[seqs[i]])
        if self._decision in self._changes:
            self._lowest -= 1.0
            self._priority[seqs[best]] = self._lowest
            best = max(range(len(seqs)), key=lambda i: self._priority[seqs[i]])
        self._decision += 1
        return best


class Exhaustive:
    """Depth first over the decisions: follow ``prefix``, then take the first
    option; `next_prefix` names the next schedule not yet run.

    The options at a decision: the running thread first (no preemption), then the
    others in label order. With ``preemption_bound`` (CHESS, Musuvathi and Qadeer,
    2007) a schedule that already preempted that many times has one option left
    whenever the running thread can go on: letting it.

    With ``reduce``, sleep sets (Godefroid, 1996): once the subtree of option ``a``
    was searched, a later sibling's subtree never runs ``a``'s step until a step that
    conflicts with it (`Footprint.conflicts`) ran; that order only swapped ``a``
    with steps it commutes with, and ``a`` first was searched already. A decision
    whose options are all asleep runs the first, without branching. Under a bound,
    only the running thread's option goes to sleep: moving its step to the front
    costs no preemption, moving another thread's step can (Coons et al., 2013)."""

    def __init__(self, prefix: list[int], preemption_bound: int | None = None, *, reduce: bool = True) -> None:
        self._prefix = prefix
        self._bound = preemption_bound
        self._reduce = reduce
        self._preemptions = 0
        self._trail: list[tuple[int, int]] = []  # (option, options) at each decision
        self._asleep: dict[int, Footprint | None] = {}  # seq -> its step's footprint

    def choose(
        self,
        labels: list[str],
        seqs: list[int],
        running: int | None = None,
        footprints: list[Footprint | None] | None = None,
    ) -> int:
        options = _steady_first(seqs, running)
        steady = running is not None and running in seqs
        if steady and self._bound is not None and self._preemptions >= self._bound:
            options = [i for i in options if seqs[i] == running or seqs[i] < 0]  # pauses stay: faults
        awake = [i for i in options if seqs[i] not in self._asleep] or options[:1]
        depth = len(self._trail)
        choice = min(self._prefix[depth] if depth < len(self._prefix) else 0, len(awake) - 1)
        self._trail.append((choice, len(awake)))
        picked = awake[choice]
        if steady and seqs[picked] >= 0 and seqs[picked] != running:
            self._preemptions += 1
        if seqs[picked] < 0:  # a pause: it stops a whole process, so it conflicts with every step
            self._asleep.clear()
        elif self._reduce and footprints is not None:
            for i in awake[:choice]:  # searched before this one, in this same state
                if seqs[i] >= 0 and (self._bound is None or seqs[i] == running):
                    self._asleep[seqs[i]] = footprints[i]
        return picked

    def ran(self, seq: int, footprint: Footprint | None) -> None:
        self._asleep.pop(seq, None)
        for other, asleep in list(self._asleep.items()):
            if asleep is None or asleep.conflicts(footprint):
                del self._asleep[other]

    def next_prefix(self) -> list[int] | None:
        for depth in range(len(self._trail) - 1, -1, -1):
            choice, width = self._trail[depth]
            if choice + 1 < width:
                return [c for c, _ in self._trail[:depth]] + [choice + 1]
        return None


def _steady_first(seqs: list[int], running: int | None) -> list[int]:
    """Candidate indexes, the running thread's first, the rest in their order."""
    steady = [i for i, seq in enumerate(seqs) if seq == running]
    return steady + [i for i in range(len(seqs)) if i not in steady]


class Replay(_Blind):
    """Picks the labels of a schedule string, in order."""

    def __init__(self, schedule: str) -> None:
        self._labels = split(schedule)
        self._at = 0

    def choose(self, labels: list[str], seqs: list[int], running: int | None = None, footprints: object = None) -> int:
        if self._at >= len(self._labels):
            raise ScheduleMismatchError(f"the schedule ended after {self._at} decisions; this run needs more")
        wanted = self._labels[self._at]
        if wanted not in labels:
            raise ScheduleMismatchError(f"decision {self._at + 1}: {wanted!r} cannot run now (candidates: {labels})")
        self._at += 1
        return labels.index(wanted)

    def finished(self) -> bool:
        return self._at == len(self._labels)


class ReplayThenSteady(_Blind):
    """The first ``decisions`` of a schedule, then no preemption (the running thread
    goes on, else the first candidate; never a pause): a shorter schedule that may
    still fail the same way."""

    def __init__(self, decisions: list[str]) -> None:
        self._labels = decisions
        self._at = 0

    def choose(self, labels: list[str], seqs: list[int], running: int | None = None, footprints: object = None) -> int:
        if self._at < len(self._labels):
            wanted = self._labels[self._at]
            self._at += 1
            if wanted in labels:
                return labels.index(wanted)
            self._at = len(self._labels)  # the run went elsewhere: steady from here
        threads = [i for i, seq in enumerate(seqs) if seq >= 0]
        return next((i for i in threads if seqs[i] == running), threads[0])
