"""How a schedule is chosen: at random by priorities (PCT), every one in turn
(depth first), or replayed from its schedule string.

A schedule string is the labels picked at each decision (a step with more than
one candidate), joined by `SEPARATOR`. Steps with one candidate are not written:
the run is deterministic between decisions.
"""

from __future__ import annotations

import random

from protocol import TranscriptError

__all__ = ["SEPARATOR", "Exhaustive", "Priorities", "Replay", "ScheduleMismatchError", "join", "split"]

SEPARATOR = " > "


class ScheduleMismatchError(TranscriptError):
    """A replayed schedule does not fit the run (the paths or the code changed)."""


def join(decisions: list[str]) -> str:
    return SEPARATOR.join(decisions)


def split(schedule: str) -> list[str]:
    return schedule.split(SEPARATOR) if schedule else []


class Priorities:
    """PCT (Burckhardt et al., 2010): each thread gets a random priority, the highest
    candidate runs, and at ``depth - 1`` random decisions the chosen thread drops
    below every other. Finds any bug of depth ``depth`` with a known probability.

    A pause (a candidate with a negative ``seq``) is not a thread: it is taken at the
    first decision it is offered from a random decision on, so each moment of a
    run is about as likely to be the one a process freezes at."""

    def __init__(self, seed: int, *, depth: int = 3, horizon: int = 60) -> None:
        self._rng = random.Random(seed)
        self._priority: dict[int, float] = {}
        self._changes = set(self._rng.sample(range(horizon), min(depth - 1, horizon)))
        self._decision = 0
        self._lowest = 0.0
        self._pause_from = self._rng.randrange(max(1, horizon // 3))

    def choose(self, labels: list[str], seqs: list[int]) -> int:
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
    candidate; `next_prefix` names the next schedule not yet run."""

    def __init__(self, prefix: list[int]) -> None:
        self._prefix = prefix
        self._trail: list[tuple[int, int]] = []  # (choice, candidates) at each decision

    def choose(self, labels: list[str], seqs: list[int]) -> int:
        depth = len(self._trail)
        choice = self._prefix[depth] if depth < len(self._prefix) else 0
        choice = min(choice, len(labels) - 1)
        self._trail.append((choice, len(labels)))
        return choice

    def next_prefix(self) -> list[int] | None:
        for depth in range(len(self._trail) - 1, -1, -1):
            choice, width = self._trail[depth]
            if choice + 1 < width:
                return [c for c, _ in self._trail[:depth]] + [choice + 1]
        return None


class Replay:
    """Picks the labels of a schedule string, in order."""

    def __init__(self, schedule: str) -> None:
        self._labels = split(schedule)
        self._at = 0

    def choose(self, labels: list[str], seqs: list[int]) -> int:
        if self._at >= len(self._labels):
            raise ScheduleMismatchError(f"the schedule ended after {self._at} decisions; this run needs more")
        wanted = self._labels[self._at]
        if wanted not in labels:
            raise ScheduleMismatchError(f"decision {self._at + 1}: {wanted!r} cannot run now (candidates: {labels})")
        self._at += 1
        return labels.index(wanted)

    def finished(self) -> bool:
        return self._at == len(self._labels)
