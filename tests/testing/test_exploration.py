"""Bounded and reduced exploration, shrunk and saved failures, and coverage."""

from __future__ import annotations

import json

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, mutation
from protocol import InvalidArgumentError, Message

pytestmark = pytest.mark.timeout(600)

POLICY = CompactionPolicy(max_tokens=None, keep_last=2)
PREFILL = [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(4)]


def main(h):
    with h.turn():
        h.append("user", "what is 2+2?")
        h.append("assistant", "4")
    h.compress()


def review(h):
    h.append("assistant", "background note")


def rotate(h):
    h.compress(force=True, mode="rotate")


PATHS = {"main": main, "review": review}
RACE = {"a": rotate, "b": rotate}


@pytest.fixture
def harness():
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=PREFILL) as h:
        yield h


def test_a_preemption_bound_covers_a_smaller_space_completely(harness) -> None:
    counts = []
    every = harness.explore(PATHS, review={"review"}, exhaustive=True)
    for bound in (0, 1):
        report = harness.explore(PATHS, review={"review"}, exhaustive=True, preemption_bound=bound)
        report.assert_ok()
        assert report.complete and report.schedules <= every.schedules
        counts.append(report.schedules_run)
    assert 1 < counts[0] < counts[1] < every.schedules_run


def test_a_bounded_search_finds_the_fork_in_a_fraction_of_the_space(harness) -> None:
    """Two rotations fork with the fence and the join off. Threads block at every ask,
    so the fork needs no preemption at all: the bound-0 space holds it."""
    with mutation("fencing", "join"):
        bounded = harness.explore(RACE, exhaustive=True, preemption_bound=0, failures_dir=None)
        every = harness.explore(RACE, exhaustive=True, failures_dir=None)
    assert bounded.complete and every.complete
    assert "fork" in {f.invariant for f in bounded.failures}
    assert bounded.schedules_run < every.schedules_run and bounded.schedules <= every.schedules


def test_pct_depth_changes_the_random_schedules_and_is_checked(harness) -> None:
    shallow = harness.explore(PATHS, review={"review"}, schedules=20, seed=5, pct_depth=1)
    deep = harness.explore(PATHS, review={"review"}, schedules=20, seed=5, pct_depth=6)
    assert shallow.schedules != deep.schedules
    assert len(shallow.schedules) < len(deep.schedules)  # depth 1: priorities alone, few orders
    for bad in (0, True, 1.5):
        with pytest.raises(InvalidArgumentError):
            harness.explore(PATHS, review={"review"}, pct_depth=bad)
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, review={"review"}, exhaustive=True, preemption_bound=-1)


def test_restarts_spend_a_truncated_budget_beyond_one_corner(harness) -> None:
    corner = harness.explore(PATHS, review={"review"}, exhaustive=True, max_schedules=12, restarts=False)
    spread = harness.explore(PATHS, review={"review"}, exhaustive=True, max_schedules=12, restarts=True)
    assert not corner.complete and not spread.complete
    assert corner.schedules_run == spread.schedules_run == 12

    def firsts(report):  # the first two decisions: which corner of the tree
        return {tuple(s.split(" > ")[:2]) for s in report.schedules}

    assert len(firsts(spread)) > len(firsts(corner))


def test_a_failure_is_shrunk_and_both_schedules_replay_it(harness) -> None:
    with mutation("fencing", "join"):
        report = harness.explore(RACE, schedules=60, seed=3, stop_at_first=True, failures_dir=None)
        (failure,) = [f for f in report.failures if f.invariant == "fork"][:1]
        assert failure.seed == 3 and failure.original
        assert len(failure.schedule.split(" > ")) <= len(failure.original.split(" > "))
        for schedule in (failure.schedule, failure.original):
            with pytest.raises(AssertionError, match="fork"):
                harness.replay(RACE, schedule)


def test_failures_are_saved_and_replayed_first(harness, tmp_path) -> None:
    folder = tmp_path / "failures"
    with mutation("fencing", "join"):
        first = harness.explore(RACE, schedules=40, seed=1, stop_at_first=True, failures_dir=folder)
        assert first.failures
        (saved,) = folder.glob("*.json")
        schedules = json.loads(saved.read_text())["schedules"]
        assert first.failures[0].schedule in schedules
        again = harness.explore(RACE, schedules=3, seed=99, failures_dir=folder)
        assert again.schedules_run == 3  # the saved ones count in the budget
        assert again.failures[0].schedule == again.failures[0].original == schedules[0]  # run first
    fixed = harness.explore(RACE, schedules=1, seed=99, failures_dir=folder)  # the order no longer exists
    fixed.assert_ok()
    assert not list(folder.glob("*.json"))  # nothing left to replay


def test_coverage_counts_points_and_orders(harness) -> None:
    report = harness.explore(PATHS, review={"review"}, exhaustive=True)
    points, orders = report.coverage["points"], report.coverage["orders"]
    assert points["main start"] == report.schedules_run and points["review start"] == report.schedules_run
    assert orders and all(n > 0 for n in orders.values())
    both = report.both_orders()
    assert ("main start", "review start") in both or ("review start", "main start") in both
    one = harness.explore(PATHS, review={"review"}, schedules=1)
    assert one.coverage["points"] and len(one.both_orders()) <= len(both)
