"""The harness's checks of a schedule's history (double_compaction, retracted_in_summary,
rollback_middle, dangling_tool_call), `HarnessView` checks, and `SlowCompressor`."""

from __future__ import annotations

import sqlite3
import time

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, HarnessView, SlowCompressor, mutation
from protocol import CompressionStatus, InvalidArgumentError, Message

pytestmark = pytest.mark.timeout(300)

POLICY = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=6.0)
PREFILL = [Message("user" if i % 2 == 0 else "assistant", f"earlier {i}") for i in range(6)]


def _in_place(h):
    h.compress(force=True, mode="in_place")


def test_two_in_place_summaries_of_one_snapshot_are_a_double_compaction() -> None:
    paths = {"a": _in_place, "b": _in_place}
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=PREFILL) as harness:
        harness.explore(paths, exhaustive=True).assert_ok()
        with mutation("fencing", "join"):  # both attempts summarize the one snapshot and commit
            report = harness.explore(paths, exhaustive=True)
    assert report.complete and report.failures
    assert {f.invariant for f in report.failures} == {"double_compaction"}
    assert "2 in-place summaries of the snapshot" in report.failures[0].detail


def _retract_during_a_slow_summary() -> tuple[Harness, dict]:
    slow = SlowCompressor(HeadTailCompressor(keep_last=2), seconds=20.0)  # renewed 3 times meanwhile

    def user(h):
        h.append("user", "a secret to take back")
        h.retract()

    return Harness(compressor=slow, policy=POLICY, prefill=PREFILL), {"main": _in_place, "user": user}


def test_a_retract_during_a_slow_summary_never_comes_back_unless_the_fence_is_off() -> None:
    harness, paths = _retract_during_a_slow_summary()
    with harness:
        report = harness.explore(paths, exhaustive=True)
        report.assert_ok()
        with mutation("snapshot"):  # the commit no longer refuses a snapshot a retract reached into
            broken = harness.explore(paths, exhaustive=True)
            failure = next(f for f in broken.failures if f.invariant == "retracted_in_summary")
            with pytest.raises(AssertionError, match="retracted_in_summary"):
                harness.replay(paths, failure.schedule)
    assert "'a secret to take back'" in failure.detail and "written by a compaction" in failure.detail


def test_a_rollback_that_took_a_row_from_the_middle_is_reported(tmp_path) -> None:
    """The store never does that, so the path plants it: the first of two rows marked
    retracted after the second was written."""

    def main(h):
        first = h.append("user", "first")
        h.append("assistant", "second")
        (db,) = tmp_path.glob("schedule-*.db")
        with sqlite3.connect(db, timeout=10) as conn:
            conn.execute(
                "UPDATE messages SET state = 'retracted', archived_at = "
                "(SELECT max(created_at) + 1 FROM messages) WHERE id = ?",
                (first.id,),
            )
        conn.close()

    with Harness(policy=POLICY, store=tmp_path, prefill=PREFILL[:2]) as harness:
        report = harness.explore({"main": main}, schedules=1)
    assert "rollback_middle" in {f.invariant for f in report.failures}
    detail = next(f.detail for f in report.failures if f.invariant == "rollback_middle")
    assert "taken back while" in detail


def test_a_retract_of_the_last_message_is_no_rollback_from_the_middle(tmp_path) -> None:
    def main(h):
        h.append("user", "first")
        h.append("assistant", "second")
        h.retract()
        h.append("assistant", "second, again")

    with Harness(policy=POLICY, store=tmp_path, prefill=PREFILL[:2]) as harness:
        harness.explore({"main": main}, schedules=1).assert_ok()


def test_a_tool_call_left_without_its_result_is_dangling() -> None:
    def main(h):
        h.append(Message("assistant", None, tool_calls=[{"id": "c1", "type": "function"}]))

    def answered(h):
        with h.turn():
            h.append(Message("assistant", None, tool_calls=[{"id": "c2", "type": "function"}]))
            h.append(Message("tool", "42", tool_call_id="c2"))

    with Harness(policy=POLICY, prefill=PREFILL[:2]) as harness:
        report = harness.explore({"main": main, "answered": answered}, schedules=3)
        assert {f.invariant for f in report.failures} == {"dangling_tool_call"}
        assert "calls 'c1'" in report.failures[0].detail and "c2" not in report.failures[0].detail
        harness.explore({"answered": answered}, schedules=1).assert_ok()


def test_a_check_annotated_harness_view_sees_the_history() -> None:
    harness, paths = _retract_during_a_slow_summary()
    seen: list[HarnessView] = []

    def check(view: HarnessView) -> None:
        seen.append(view)
        texts = [m.text for m in view.transcript]
        assert "a secret to take back" not in texts
        (taken,) = [m for m in view.ledger["user"]]
        assert taken.text == "a secret to take back"
        assert any(m.id == taken.id and m.state == "retracted" for m in view.archive)
        assert len(view.outcomes["main"]) == 1

    def plain(transcript) -> None:  # one positional parameter: the live transcript
        assert all(hasattr(m, "seq") for m in transcript)

    with harness:
        harness.explore(paths, exhaustive=True, check=check).assert_ok()
        harness.explore(paths, schedules=2, check=plain).assert_ok()
    statuses = {o.status for view in seen for o in view.outcomes["main"]}
    assert {CompressionStatus.CANCELLED, CompressionStatus.COMPACTED} <= statuses


def test_a_slow_compressor_takes_virtual_time_only() -> None:
    """A 600 s summary with a 6 s lease: renewed all along, the tail appended meanwhile
    carried, no real second spent waiting."""
    ends: list[float] = []

    def main(h):
        assert h.compress(force=True, mode="rotate").status is CompressionStatus.ROTATED

    def user(h):
        h.append("user", "one")
        h.append("assistant", "two")
        ends.append(time.monotonic())

    def tail_kept(transcript) -> None:
        assert [m.text for m in transcript][-2:] == ["one", "two"]

    started = time.monotonic()
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=6.0, max_compaction_s=900.0)
    slow = SlowCompressor(HeadTailCompressor(keep_last=2), seconds=600.0)
    with Harness(compressor=slow, policy=policy, prefill=PREFILL) as harness:
        report = harness.explore({"main": main, "user": user}, exhaustive=True, check=tail_kept)
    report.assert_ok()
    assert report.complete and time.monotonic() - started < 120
    with pytest.raises(InvalidArgumentError):
        SlowCompressor(HeadTailCompressor(), seconds=-1)
    with pytest.raises(InvalidArgumentError):
        SlowCompressor(object(), seconds=1)


def test_a_summary_slower_than_max_compaction_s_is_cancelled_on_the_virtual_clock() -> None:
    statuses: list[CompressionStatus] = []

    def main(h):
        statuses.append(h.compress(force=True).status)

    policy = CompactionPolicy(max_tokens=None, keep_last=2, max_compaction_s=30.0)
    with Harness(HeadTailCompressor(keep_last=2), policy, prefill=PREFILL) as fast:
        fast.explore({"main": main}, schedules=1).assert_ok()
    with Harness(SlowCompressor(HeadTailCompressor(keep_last=2), 60.0), policy, prefill=PREFILL) as slow:
        slow.explore({"main": main}, schedules=1).assert_ok()
    assert statuses == [CompressionStatus.COMPACTED, CompressionStatus.CANCELLED]
