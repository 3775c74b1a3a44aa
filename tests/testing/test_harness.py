"""`actors.testing.Harness`: determinism, exhaustive exploration, replay, the virtual
clock, every invariant it reports, and typed errors for bad input."""

from __future__ import annotations

import sqlite3
import time

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import (
    INVARIANTS,
    Harness,
    ScheduleMismatchError,
    ScriptedCompressor,
    mutation,
)
from protocol import InvalidArgumentError, Message, TranscriptError
from tests.pg import PG_URL

pytestmark = pytest.mark.timeout(300)

POLICY = CompactionPolicy(max_tokens=None, keep_last=2)
PREFILL = [Message("user", "earlier ask"), Message("assistant", "earlier answer")]


def main(h):
    with h.turn():
        h.append("user", "what is 2+2?")
        h.append("assistant", "4")
    h.compress()


def review(h):
    h.append("assistant", "background note")


PATHS = {"main": main, "review": review}


@pytest.fixture
def harness(tmp_path):
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, store=tmp_path, prefill=PREFILL) as h:
        yield h


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request, tmp_path):
    """Where a harness keeps its databases: SQLite files, or a schema per schedule on PostgreSQL."""
    if request.param == "sqlite":
        return tmp_path
    request.getfixturevalue("pg_url")  # skips (or fails under REQUIRE_PG) without a server
    return PG_URL


def test_one_seed_gives_the_same_schedules_and_results(harness) -> None:
    seen: list[list[list[str]]] = [[], []]
    for run in seen:
        report = harness.explore(
            PATHS, review={"review"}, schedules=15, seed=7, check=lambda t, run=run: run.append([m.text for m in t])
        )
        report.assert_ok()
        assert report.schedules_run == 15
    assert seen[0] == seen[1]
    first = harness.explore(PATHS, review={"review"}, schedules=15, seed=7)
    again = harness.explore(PATHS, review={"review"}, schedules=15, seed=7)
    assert first.schedules == again.schedules and len(first.schedules) > 1


def test_exhaustive_visits_every_schedule_once_and_says_it_finished(any_store) -> None:
    harness = Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, store=any_store, prefill=PREFILL)
    report = harness.explore(PATHS, review={"review"}, exhaustive=True)
    transcripts = {tuple(m.text for m in harness.replay(PATHS, s, review={"review"})) for s in report.schedules}
    assert len(transcripts) > 1  # the note lands in different places in different orders
    report.assert_ok()
    assert report.complete
    assert report.schedules_run == len(report.schedules) > 5
    # every random schedule is one of them
    assert harness.explore(PATHS, review={"review"}, schedules=30, seed=3).schedules <= report.schedules
    bounded = harness.explore(PATHS, review={"review"}, exhaustive=True, max_schedules=3)
    assert bounded.schedules_run == 3 and not bounded.complete


def test_replay_returns_the_transcript_of_that_schedule(harness) -> None:
    finals: dict[str, list[str]] = {}
    report = harness.explore(PATHS, review={"review"}, exhaustive=True)
    for schedule in sorted(report.schedules):
        finals[schedule] = [m.text for m in harness.replay(PATHS, schedule, review={"review"})]
        assert [m.text for m in harness.replay(PATHS, schedule, review={"review"})] == finals[schedule]
    # the orders differ in where the review note landed: the transcripts say so
    assert len({tuple(t) for t in finals.values()}) > 1
    assert all(any("background note" in text for text in t) for t in finals.values())


def test_a_schedule_that_does_not_fit_is_a_typed_error(harness) -> None:
    with pytest.raises(ScheduleMismatchError):
        harness.replay(PATHS, "nobody start > main start", review={"review"})
    assert issubclass(ScheduleMismatchError, TranscriptError)


def _racing_rotations() -> tuple[Harness, dict]:
    prefill = [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(4)]
    harness = Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=prefill)

    def a(h):
        h.compress(force=True, mode="rotate")

    def b(h):
        h.compress(force=True, mode="rotate")

    return harness, {"a": a, "b": b}


def test_with_fencing_and_the_join_disabled_the_harness_finds_the_fork_and_replays_it() -> None:
    harness, paths = _racing_rotations()
    with harness:
        assert harness.explore(paths, exhaustive=True).failures == []
        with mutation("fencing", "join"):
            report = harness.explore(paths, schedules=200, stop_at_first=True)
            assert report.failures and report.failures[0].invariant == "fork"
            schedule = report.failures[0].schedule
            with pytest.raises(AssertionError, match="fork"):
                harness.replay(paths, schedule)
            with pytest.raises(AssertionError, match=schedule.split(" > ")[0]):
                report.assert_ok()
        # with the checks back, that order cannot even happen: the second call joins the first
        with pytest.raises(ScheduleMismatchError):
            harness.replay(paths, schedule)


def test_the_join_alone_is_backed_by_the_lease() -> None:
    """With the join off, the second attempt meets the first one's lease and skips."""
    harness, paths = _racing_rotations()
    with harness, mutation("join"):
        report = harness.explore(paths, exhaustive=True)
        report.assert_ok()
        assert report.complete


def _stale_holder() -> tuple[Harness, dict, dict]:
    """Two processes rotating; p1 may freeze (SIGSTOP) for longer than the lease."""
    prefill = [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(4)]
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    harness = Harness(compressor=HeadTailCompressor(keep_last=2), policy=policy, prefill=prefill)

    def w1(h):
        h.compress(force=True, mode="rotate")

    def w2(h):
        h.advance(20)  # later than w1's lease would last
        h.compress(force=True, mode="rotate")

    options = {"processes": {"w1": "p1", "w2": "p2"}, "pauses": {"p1": 100.0}}
    return harness, {"w1": w1, "w2": w2}, options


def test_a_holder_frozen_at_its_commit_is_stopped_by_the_fence_alone() -> None:
    harness, paths, options = _stale_holder()
    with harness:
        clean = harness.explore(paths, exhaustive=True, **options)
        clean.assert_ok()
        assert clean.complete and any("pause p1" in s for s in clean.schedules)
        with mutation("fencing"):
            report = harness.explore(paths, exhaustive=True, **options)
            forks = [f for f in report.failures if f.invariant == "fork"]
            assert report.complete and forks
            # the fork needs the freeze between the decision to commit and the commit
            assert all("pause p1" in f.schedule for f in forks)
            with pytest.raises(AssertionError, match="fork"):
                harness.replay(paths, forks[0].schedule, **options)
        harness.replay(paths, forks[0].schedule, **options)  # with the fence: the same order, no fork


def test_a_holder_frozen_past_max_turn_s_is_a_schedule_not_a_sleep(tmp_path) -> None:
    policy = CompactionPolicy(max_tokens=None, keep_last=2, max_turn_s=60)
    entered: list[float] = []

    def holder(h):
        with h.turn():
            h.append("user", "ask")
            h.advance(90.0)  # frozen for longer than max_turn_s: the actor closes the turn
            h.append("assistant", "late answer")

    def other(h):
        with h.turn():
            entered.append(time.monotonic())
            h.append("user", "other ask")

    started = time.monotonic()
    with Harness(policy=policy, store=tmp_path) as harness:
        report = harness.explore({"holder": holder, "other": other}, exhaustive=True)
    report.assert_ok()
    assert report.complete and entered
    assert time.monotonic() - started < 60  # 90 virtual seconds per schedule took no such real time


def test_a_keyed_redelivery_that_returns_a_carried_copy_is_no_turn_split(tmp_path) -> None:
    """A compaction whose snapshot was taken before the turn carries the turn's keyed rows
    and the next ask as copies. Redelivering a key then returns the carried copy: the
    message the turn already appended, not a new one written after the next ask."""
    prefill = [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(6)]
    copies: list[bool] = []  # per schedule: did the redelivery return a carried copy?

    def main(h):
        with h.turn():
            ask = h.append(Message("user", "ask", key="ask-1"))
            h.append(Message("assistant", "answer", key="answer-1"))
        h.append("user", "next ask")
        again = h.append(Message("user", "ask (redelivered)", key="ask-1"))
        assert again.key == "ask-1" and again.text == "ask"  # the stored message, not a new one
        copies.append(again.id != ask.id)

    def compact(h):
        h.compress(force=True)

    paths = {"main": main, "compact": compact}
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, store=tmp_path, prefill=prefill) as harness:
        report = harness.explore(paths, exhaustive=True)
        assert report.complete
        assert any(copies)  # some orders carried the turn's rows before the redelivery
        report.assert_ok()


def test_a_turn_split_in_the_database_is_reported(tmp_path) -> None:
    """Another writer's message inside a turn, as the database records it, is a
    ``turn_split``; the turn's rows being keyed changes nothing. The store never writes
    that, so the path plants it: the second turn's row is marked as the first turn's."""

    def main(h):
        with h.turn():
            h.append(Message("user", "ask", key="ask-1"))
        h.append("assistant", "another writer's note")
        with h.turn():
            h.append(Message("assistant", "answer", key="answer-1"))
        (db,) = tmp_path.glob("schedule-*.db")  # this schedule's database
        with sqlite3.connect(db, timeout=10) as conn:
            conn.execute(
                "UPDATE messages SET turn = (SELECT turn FROM messages WHERE key = 'ask-1') WHERE key = 'answer-1'"
            )
        conn.close()

    with Harness(policy=POLICY, store=tmp_path, prefill=PREFILL) as harness:
        report = harness.explore({"main": main}, schedules=1)
    assert [f.invariant for f in report.failures] == ["turn_split"]
    assert "another path wrote inside the turn" in report.failures[0].detail


def test_every_invariant_name_is_documented() -> None:
    assert set(INVARIANTS) == {
        "fork", "lost", "duplicate", "turn_split", "tool_pair", "seq_gap", "leaked_lease", "fsck",
        "double_compaction", "retracted_in_summary", "rollback_middle", "dangling_tool_call",
        "path_error", "deadlock", "check",
    }  # fmt: skip


def test_a_path_raising_is_a_path_error_and_the_others_run_on(harness) -> None:
    def broken(h):
        h.append("user", "one")
        raise ValueError("the gateway's own bug")

    report = harness.explore({"broken": broken, "review": review}, review={"review"}, schedules=3)
    assert {f.invariant for f in report.failures} == {"path_error"}
    assert "ValueError: the gateway's own bug" in report.failures[0].detail
    with pytest.raises(AssertionError, match="path_error"):
        report.assert_ok()


def test_a_failing_check_is_reported_with_its_schedule(harness) -> None:
    def no_notes(transcript):
        assert not any("background note" in m.text for m in transcript), "the note is there"

    report = harness.explore(PATHS, review={"review"}, schedules=5, check=no_notes)
    assert report.failures and {f.invariant for f in report.failures} == {"check"}
    assert "the note is there" in report.failures[0].detail
    with pytest.raises(AssertionError, match="check"):
        harness.replay(PATHS, report.failures[0].schedule, review={"review"}, check=no_notes)


def test_a_failed_compaction_is_no_failure_of_the_run(harness) -> None:
    with Harness(compressor=ScriptedCompressor(RuntimeError("down")), policy=POLICY, prefill=PREFILL) as h:
        h.explore(PATHS, review={"review"}, exhaustive=True).assert_ok()


def test_bad_input_is_a_typed_error(harness, tmp_path) -> None:
    with pytest.raises(InvalidArgumentError):
        Harness(store=tmp_path / "missing")
    with pytest.raises(InvalidArgumentError):
        Harness(prefill=["not a message"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        harness.explore({})
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, review={"nobody"})
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, schedules=0)
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, processes={"nobody": "p1"})
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, processes={"main": "p1"}, pauses={"p2": 1.0})
    with pytest.raises(InvalidArgumentError):
        harness.explore(PATHS, pauses={"main": 0})
    with pytest.raises(InvalidArgumentError):
        harness.advance(1.0)  # not from a path
    with pytest.raises(InvalidArgumentError):
        with mutation("no-such-check"):
            pass

    def bad_advance(h):
        h.advance(-1)

    report = harness.explore({"p": bad_advance}, schedules=1)
    assert [f.invariant for f in report.failures] == ["path_error"]
    assert "InvalidArgumentError" in report.failures[0].detail


def test_the_pytest_plugin_fixture_builds_harnesses_in_tmp_path(session_harness, tmp_path) -> None:
    harness = session_harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=PREFILL)
    harness.explore(PATHS, review={"review"}, schedules=2).assert_ok()
    assert any(p.name == "harness-1" for p in tmp_path.iterdir())


def test_one_harness_runs_at_a_time_in_a_process(harness) -> None:
    def nested(h):
        harness.explore(PATHS, review={"review"}, schedules=1)  # from inside a running schedule

    report = harness.explore({"nested": nested}, schedules=1)
    assert [f.invariant for f in report.failures] == ["path_error"]
    assert "ConfigurationError" in report.failures[0].detail and "one at a time" in report.failures[0].detail
