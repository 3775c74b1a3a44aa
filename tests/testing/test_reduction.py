"""Partial-order reduction: depth-first search skips the orders that only swap steps
that commute, and still tries both orders of steps that conflict.

Two threads of ``n`` steps each, straight on the scheduler: their steps conflict
(writes of one conversation), so every one of the C(2n, n) interleavings is a
different schedule; on two conversations they commute, and the search runs n + 1.
"""

from __future__ import annotations

from math import comb

import pytest

from actors.scheduling import hooks
from actors.testing._choosers import Exhaustive, Replay, join
from actors.testing._scheduler import DeterministicScheduler

N = 4


def _threads(footprints: dict[str, hooks.Footprint | None], chooser, log: list[str]) -> DeterministicScheduler:
    """One run: a thread per name, ``N`` steps each (the step appends to ``log``)."""
    scheduler = DeterministicScheduler(chooser)

    def steps(name: str) -> None:
        for i in range(N):
            hooks.point(f"{name} {i}", footprints[name])
            log.append(f"{name}{i}")

    hooks.install(scheduler)
    try:
        threads = [hooks.Thread(target=steps, args=(name,), daemon=True) for name in sorted(footprints)]
        for thread in threads:
            thread.start()
        scheduler.run(alive=lambda: not all(t.finished.is_set() for t in threads))
    finally:
        scheduler.release()
        hooks.uninstall(scheduler)
    for thread in threads:
        thread.join(10)
    return scheduler


def _explore(footprints: dict[str, hooks.Footprint | None], **options) -> tuple[list[str], set[tuple[str, ...]]]:
    """Every schedule depth-first search runs, and the distinct logs they left."""
    prefix: list[int] | None = []
    schedules, logs = [], set()
    while prefix is not None:
        chooser = Exhaustive(prefix, **options)
        log: list[str] = []
        schedules.append(join(_threads(footprints, chooser, log).decisions))
        logs.add(tuple(log))
        prefix = chooser.next_prefix()
    return schedules, logs


def _writes(conversation: str) -> hooks.Footprint:
    return hooks.Footprint(frozenset({conversation}), True)


@pytest.mark.parametrize(
    "footprints",
    [
        {"a": _writes("S"), "b": _writes("S")},
        {"a": _writes("S"), "b": None},  # unknown: conflicts with everything
        {"a": hooks.Footprint(frozenset({"S"}), False), "b": _writes("S")},  # a read and a write
    ],
    ids=["one-conversation", "unknown", "read-write"],
)
def test_conflicting_steps_are_tried_in_every_order(footprints) -> None:
    schedules, logs = _explore(footprints)
    assert len(schedules) == len(set(schedules)) == len(logs) == comb(2 * N, N)


@pytest.mark.parametrize(
    "footprints",
    [
        {"a": _writes("S"), "b": _writes("T")},
        {"a": hooks.Footprint(frozenset({"S"}), False), "b": hooks.Footprint(frozenset({"S"}), False)},
    ],
    ids=["two-conversations", "two-reads"],
)
def test_commuting_steps_are_not_reordered(footprints) -> None:
    schedules, _ = _explore(footprints)
    assert len(schedules) == len(set(schedules)) == N + 1  # was C(2n, n) = 70
    unreduced, _ = _explore(footprints, reduce=False)
    assert len(unreduced) == comb(2 * N, N)


def test_under_a_bound_only_the_running_threads_step_sleeps() -> None:
    """Moving another thread's step first could cost a preemption the bound forbids."""
    apart = {"a": _writes("S"), "b": _writes("T")}
    together = {"a": _writes("S"), "b": _writes("S")}
    for bound in (0, 1, 2):
        reduced, _ = _explore(apart, preemption_bound=bound)
        every, logs = _explore(together, preemption_bound=bound)
        assert len(reduced) <= len(every) == len(logs)


def test_a_reduced_schedule_replays_exactly() -> None:
    apart = {"a": _writes("S"), "b": _writes("T")}
    schedules, _ = _explore(apart)
    for schedule in schedules:
        log: list[str] = []
        chooser = Replay(schedule)
        assert join(_threads(apart, chooser, log).decisions) == schedule and chooser.finished()
