"""Faults inside a schedule: `PathHandle.crash` and `PathHandle.freeze`."""

from __future__ import annotations

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, HarnessView
from protocol import InvalidArgumentError, Message, TranscriptError

pytestmark = pytest.mark.timeout(300)

POLICY = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
PREFILL = [Message("user", "earlier ask"), Message("assistant", "earlier answer")]
PROCESSES = {"processes": {"holder": "p1", "other": "p2"}}


def other(h):
    h.append("user", "another ask")


def _harness() -> Harness:
    return Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=PREFILL)


def test_a_crash_inside_a_turn_holds_the_others_until_its_lease_lapses() -> None:
    waited: list[float] = []

    def holder(h):
        with h.turn():
            h.append("user", "an ask whose holder dies")
            h.crash()
            h.append("assistant", "never written")  # pragma: no cover - a crash never returns

    def check(view: HarnessView) -> None:
        texts = [m.text for m in view.transcript]
        assert "never written" not in texts
        (turn_row,) = [m for m in view.transcript if m.text == "an ask whose holder dies"]
        (late,) = [m for m in view.transcript if m.text == "another ask"]
        if late.seq > turn_row.seq:  # held behind the dead turn: it waited for the lapse
            waited.append(late.created_at - turn_row.created_at)

    with _harness() as harness:
        report = harness.explore({"holder": holder, "other": other}, exhaustive=True, check=check, **PROCESSES)
    report.assert_ok()  # no path_error for the crash, no leaked lease for the dead holder
    assert report.complete and waited and all(w >= POLICY.lease_ttl_s for w in waited)


def test_a_crash_stops_every_path_of_its_process() -> None:
    def crasher(h):
        h.crash()

    def sibling(h):  # same process: stops wherever it was when the process died
        for i in range(3):
            h.append("user", f"sibling {i}")

    def check(view: HarnessView) -> None:
        written = [m.text for m in view.transcript if m.text.startswith("sibling")]
        assert written == [m.text for m in view.ledger.get("sibling", [])]  # nothing unacknowledged landed
        counts.add(len(written))

    counts: set[int] = set()
    with _harness() as harness:
        report = harness.explore({"crasher": crasher, "sibling": sibling}, exhaustive=True, check=check)
    report.assert_ok()
    assert report.complete and 0 in counts and 3 in counts  # it died before, or after, every append


def test_a_freeze_past_the_turn_lease_loses_the_turn_to_the_other_process() -> None:
    errors: list[str] = []

    def holder(h):
        try:
            with h.turn():
                h.append("user", "ask")
                h.freeze(25)  # no renewal for 25 s: the 10 s lease lapses
                h.append("assistant", "late answer")
        except TranscriptError as exc:
            errors.append(type(exc).__name__)

    def short(h):
        with h.turn():
            h.append("user", "ask")
            h.freeze(2)  # well within the lease: nothing happens
            h.append("assistant", "answer")

    with _harness() as harness:
        harness.explore({"holder": holder, "other": other}, exhaustive=True, **PROCESSES).assert_ok()
        assert errors and set(errors) == {"TurnLostError"}
        harness.explore({"holder": short, "other": other}, exhaustive=True, **PROCESSES).assert_ok()

        def bad(h):
            h.freeze(0)

        report = harness.explore({"bad": bad}, schedules=1)
        assert [f.invariant for f in report.failures] == ["path_error"]
        assert "InvalidArgumentError" in report.failures[0].detail
    assert issubclass(InvalidArgumentError, TranscriptError)
