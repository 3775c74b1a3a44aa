"""The upstream regression suite's incidents, as harness scenarios explored exhaustively.

Upstream staged each interleaving by hand (sleeps inside a compressor so two
rotations overlap). Here each incident is a handful of paths, and the harness runs
every order their steps can take, checking after each that nothing forked, every
acknowledged message is there exactly once, turns stayed whole, tool results follow
their calls, seqs have no gap, no lease leaked and fsck is clean.
"""

from __future__ import annotations

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, ScriptedCompressor, summary_only
from protocol import CompressionStatus, Message

pytestmark = pytest.mark.timeout(600)

#: Every scenario must be explored to the end within this many schedules.
BOUND = 5_000
POLICY = CompactionPolicy(max_tokens=None, keep_last=2)


def prefill(n: int = 4) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", f"earlier {i}") for i in range(n)]


def explore_all(harness: Harness, paths, **kwargs):
    report = harness.explore(paths, exhaustive=True, max_schedules=BOUND, **kwargs)
    report.assert_ok()
    assert report.complete, f"not every schedule was run within {BOUND}"
    assert len(report.schedules) == report.schedules_run  # each run took a schedule of its own
    return report


@pytest.fixture
def harness():
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=prefill()) as h:
        yield h


@pytest.mark.parametrize("mode", ["rotate", "in_place"])
def test_two_paths_compressing_at_once_never_fork(harness, mode) -> None:
    outcomes: list[CompressionStatus] = []

    def gateway(h):
        outcomes.append(h.compress(force=True, mode=mode).status)
        h.append("user", "after the gateway's compaction")

    def cron(h):
        outcomes.append(h.compress(force=True, mode=mode).status)

    def one_summary(transcript):
        summaries = [m for m in transcript if m.meta.get("synthetic")]
        assert len(summaries) <= 1 or mode == "in_place", [m.text for m in transcript]

    report = explore_all(harness, {"gateway": gateway, "cron": cron}, check=one_summary)
    assert report.schedules_run > 1
    assert any(status.committed for status in outcomes)


def test_review_appending_during_a_rotation_lands_in_the_live_session(harness) -> None:
    def main(h):
        with h.turn():
            h.append("user", "what is 2+2?")
            h.append("assistant", "4")
        h.compress(force=True, mode="rotate")

    def review(h):
        h.append("assistant", "background note")

    def note_is_live(transcript):  # as itself, or inside the summary that replaced it
        assert any("background note" in m.text for m in transcript), [m.text for m in transcript]

    explore_all(harness, {"main": main, "review": review}, review={"review"}, check=note_is_live)


def test_a_gateway_caching_the_id_follows_the_rotation(harness) -> None:
    cached: list[str] = []

    def gateway(h):
        cached.append(h.session_id)  # the id the gateway keeps in its own table
        h.append("user", "first")
        h.append("assistant", "second")

    def compactor(h):
        h.compress(force=True, mode="rotate")

    def both_live(transcript):
        texts = [m.text for m in transcript]
        assert texts[-2:] == ["first", "second"] or {"first", "second"} <= set(texts), texts

    explore_all(harness, {"gateway": gateway, "compactor": compactor}, check=both_live)
    assert "S" in cached and len(set(cached)) == 2  # it read the id before and after the rotation


def test_interrupt_during_a_summary_releases_everything(harness) -> None:
    interrupted: list[bool] = []

    def main(h):
        h.compress(force=True, mode="rotate")
        h.append("user", "after the compaction")

    def stop_button(h):
        interrupted.append(h.interrupt())
        h.append("assistant", "after the interrupt")

    def writable(transcript):
        texts = [m.text for m in transcript]
        assert {"after the compaction", "after the interrupt"} <= set(texts), texts

    explore_all(harness, {"main": main, "stop": stop_button}, check=writable)
    assert True in interrupted and False in interrupted  # it landed both before and after the commit


def test_a_slow_compressor_with_appends_keeps_every_message() -> None:
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=6.0)
    with Harness(compressor=HeadTailCompressor(keep_last=2), policy=policy, prefill=prefill()) as harness:

        def main(h):
            h.compress(force=True, mode="rotate")

        def user(h):
            h.append("user", "one")
            h.advance(5.0)  # the compressor is slow: the lease must be renewed meanwhile
            h.append("assistant", "two")

        def tail_kept(transcript):
            assert [m.text for m in transcript][-2:] == ["one", "two"]

        explore_all(harness, {"main": main, "user": user}, check=tail_kept)


def test_a_failed_compaction_rolls_back_and_the_next_one_commits() -> None:
    compressor = ScriptedCompressor(RuntimeError("the model is down"), summary_only)
    with Harness(compressor=compressor, policy=POLICY, prefill=prefill()) as harness:
        statuses: list[CompressionStatus] = []

        def main(h):
            statuses.append(h.compress(force=True, mode="rotate").status)
            statuses.append(h.compress(force=True, mode="rotate").status)

        def user(h):
            h.append("user", "during the failure")

        def no_half_child(transcript):
            assert "during the failure" in [m.text for m in transcript]

        explore_all(harness, {"main": main, "user": user}, check=no_half_child)
        assert statuses[0] is CompressionStatus.FAILED and any(s.committed for s in statuses)
