"""The upstream regression suite's incidents as harness scenarios.

Upstream staged each interleaving by hand (sleeps inside a compressor so two
rotations overlap). Here each incident is a handful of paths; the harness runs every
order their steps can take. `INCIDENTS` maps a name to a builder of an `Incident`:
its harness, paths and check, and ``after``, which asserts on what the paths saw
over all schedules. Used by tests/scenarios/test_upstream_incidents.py and
tests/benchmarks/bench_harness.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, HarnessView, ScriptedCompressor, SlowCompressor, summary_only
from protocol import CompressionStatus, Message, TranscriptError

POLICY = CompactionPolicy(max_tokens=None, keep_last=2)


def prefill(n: int = 4) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", f"earlier {i}") for i in range(n)]


def _nothing() -> None:
    return None


@dataclass
class Incident:
    harness: Harness
    paths: dict[str, Callable]
    review: set[str] = field(default_factory=set)
    check: Callable | None = None
    after: Callable[[], None] = _nothing
    options: dict = field(default_factory=dict)  # processes=, pauses= for explore and replay

    def explore_every_order(self, bound: int, **extra: Any) -> Any:
        """Every schedule of the paths, up to ``bound``, in the incident's own harness
        (closed after); the report, already checked to hold every invariant."""
        with self.harness as harness:
            report = harness.explore(
                self.paths,
                review=self.review,
                exhaustive=True,
                max_schedules=bound,
                check=self.check,
                **self.options,
                **extra,
            )
        report.assert_ok()
        return report


def _head_tail(policy: CompactionPolicy = POLICY) -> Harness:
    return Harness(compressor=HeadTailCompressor(keep_last=2), policy=policy, prefill=prefill())


def two_paths_compressing(mode: str = "rotate") -> Incident:
    outcomes: list[CompressionStatus] = []

    def gateway(h):
        outcomes.append(h.compress(force=True, mode=mode).status)
        h.append("user", "after the gateway's compaction")

    def cron(h):
        outcomes.append(h.compress(force=True, mode=mode).status)

    def one_summary(transcript):
        if mode == "rotate":  # each rotation starts its child with one summary
            assert sum(1 for m in transcript if m.meta.get("synthetic")) <= 1, [m.text for m in transcript]

    def after():
        assert any(status.committed for status in outcomes)

    return Incident(_head_tail(), {"gateway": gateway, "cron": cron}, check=one_summary, after=after)


def review_fork() -> Incident:
    def main(h):
        with h.turn():
            h.append("user", "what is 2+2?")
            h.append("assistant", "4")
        h.compress(force=True, mode="rotate")

    def review(h):
        h.append("assistant", "background note")

    def note_kept(transcript):  # as itself, or inside the summary that replaced it
        assert any("background note" in m.text for m in transcript), [m.text for m in transcript]

    return Incident(_head_tail(), {"main": main, "review": review}, {"review"}, note_kept)


def three_paths() -> Incident:
    """The user's turn, a background review's note and a cron rotation at once: the
    seed's three-path incident, too many orders to run them all (bounded search does)."""
    rotated: list[CompressionStatus] = []

    def main(h):
        with h.turn():
            h.append("user", "what is 2+2?")
            h.append("assistant", "4")

    def review(h):
        h.append("assistant", "background note")

    def cron(h):
        rotated.append(h.compress(force=True, mode="rotate").status)

    def whole(transcript):
        texts = [m.text for m in transcript]
        assert any("background note" in t for t in texts), texts
        assert texts.index("what is 2+2?") + 1 == texts.index("4"), texts  # the turn stays whole

    def after():
        assert CompressionStatus.ROTATED in rotated

    paths = {"main": main, "review": review, "cron": cron}
    return Incident(_head_tail(), paths, {"review"}, whole, after, {"preemption_bound": 0})


def rotation_while_the_gateway_caches_the_id() -> Incident:
    cached: list[str] = []

    def gateway(h):
        cached.append(h.session_id)  # the id the gateway keeps in its own table
        h.append("user", "first")
        cached.append(h.session_id)
        h.append("assistant", "second")

    def compactor(h):
        h.compress(force=True, mode="rotate")

    def both_live(transcript):
        assert {"first", "second"} <= {m.text for m in transcript}, [m.text for m in transcript]

    def after():
        assert "S" in cached and len(set(cached)) == 2  # it read the id before and after the rotation

    return Incident(_head_tail(), {"gateway": gateway, "compactor": compactor}, check=both_live, after=after)


def interrupt_during_a_summary() -> Incident:
    interrupted: list[bool] = []

    def main(h):
        h.compress(force=True, mode="rotate")
        h.append("user", "after the compaction")

    def stop_button(h):
        interrupted.append(h.interrupt())
        h.append("assistant", "after the interrupt")

    def writable(transcript):
        assert {"after the compaction", "after the interrupt"} <= {m.text for m in transcript}

    def after():
        assert True in interrupted and False in interrupted  # before the commit, and after it

    return Incident(_head_tail(), {"main": main, "stop": stop_button}, check=writable, after=after)


def slow_compressor_and_appends() -> Incident:
    """The summary takes 20 s of the harness's clock, the lease 6: renewed meanwhile
    (its keeper's steps are scheduled too) while the user's appends land as its tail."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=6.0)
    slow = SlowCompressor(HeadTailCompressor(keep_last=2), seconds=20.0)
    statuses: list[CompressionStatus] = []

    def main(h):
        statuses.append(h.compress(force=True, mode="rotate").status)

    def user(h):
        h.append("user", "one")
        h.advance(5.0)
        h.append("assistant", "two")

    def tail_kept(transcript):
        assert [m.text for m in transcript][-2:] == ["one", "two"]

    def after():
        assert statuses and all(s is CompressionStatus.ROTATED for s in statuses)  # never lost to a lapse

    harness = Harness(compressor=slow, policy=policy, prefill=prefill())
    return Incident(harness, {"main": main, "user": user}, check=tail_kept, after=after)


def retract_during_a_summary() -> Incident:
    """A retract pops the snapshot's last message while the summary is slow: the commit
    must refuse (CANCELLED), or the message comes back inside the compacted set."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=6.0)
    slow = SlowCompressor(HeadTailCompressor(keep_last=2), seconds=20.0)
    statuses: list[CompressionStatus] = []

    def main(h):
        statuses.append(h.compress(force=True, mode="in_place").status)

    def user(h):
        h.append("user", "a secret to take back")
        h.retract()

    def after():
        assert CompressionStatus.CANCELLED in statuses and CompressionStatus.COMPACTED in statuses

    harness = Harness(compressor=slow, policy=policy, prefill=prefill())
    return Incident(harness, {"main": main, "user": user}, after=after)


def rollback_of_a_failed_child() -> Incident:
    compressor = ScriptedCompressor(RuntimeError("the model is down"), summary_only)
    harness = Harness(compressor=compressor, policy=POLICY, prefill=prefill())
    statuses: list[CompressionStatus] = []

    def main(h):
        statuses.append(h.compress(force=True, mode="rotate").status)
        statuses.append(h.compress(force=True, mode="rotate").status)

    def user(h):
        h.append("user", "during the failure")

    def kept(transcript):
        assert "during the failure" in [m.text for m in transcript]

    def after():
        assert statuses[0] is CompressionStatus.FAILED and any(s.committed for s in statuses)

    return Incident(harness, {"main": main, "user": user}, check=kept, after=after)


def stale_holder_frozen_past_its_lease(mode: str = "rotate") -> Incident:
    """Two processes compact; the first may freeze for 100 s (its lease lasts 10) at any
    moment, its commit's moment included. Upstream this was a holder paused by GC. In
    place, only the commit's fence stops the stale summary (a rotation's parent has
    ended too)."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    statuses: list[CompressionStatus] = []

    def w1(h):
        statuses.append(h.compress(force=True, mode=mode).status)

    def w2(h):
        h.advance(20)
        statuses.append(h.compress(force=True, mode=mode).status)

    def after():
        assert CompressionStatus.LEASE_LOST in statuses  # the stale commit was refused, not forked

    options = {"processes": {"w1": "p1", "w2": "p2"}, "pauses": {"p1": 100.0}}
    return Incident(_head_tail(policy), {"w1": w1, "w2": w2}, after=after, options=options)


def turns_across_processes() -> Incident:
    """A turn in one process, a plain append and another turn in a second: the store's
    turn lease keeps the first turn whole against a writer its registry never saw."""

    def w1(h):
        with h.turn():
            h.append("user", "w1 asks")
            h.append("assistant", "w1 answered")

    def note(h):
        h.append("assistant", "a note from p2")

    def w2(h):
        with h.turn():
            h.append("user", "w2 asks")

    def whole(transcript):
        texts = [m.text for m in transcript]
        assert texts.index("w1 asks") + 1 == texts.index("w1 answered"), texts
        assert {"a note from p2", "w2 asks"} <= set(texts), texts

    paths = {"w1": w1, "note": note, "w2": w2}
    options = {"processes": {"w1": "p1", "note": "p2", "w2": "p2"}, "preemption_bound": 1}
    return Incident(_head_tail(), paths, check=whole, options=options)


def keyed_redelivery() -> Incident:
    """A keyed ask redelivered after its turn, while a compaction carries the turn's rows:
    the redelivery answers with the stored message (or its carried copy), never a new one."""
    again = []

    def main(h):
        with h.turn():
            h.append(Message("user", "ask", key="ask-1"))
            h.append(Message("assistant", "answer", key="answer-1"))
        again.append(h.append(Message("user", "ask (redelivered)", key="ask-1")).text)

    def compact(h):
        h.compress(force=True, mode="in_place")

    def once(t):
        texts = [m.text for m in t]
        assert texts.count("ask") <= 1 and "ask (redelivered)" not in texts, texts

    def after():
        assert again and set(again) == {"ask"}

    return Incident(
        _head_tail(), {"main": main, "compact": compact}, check=once, after=after, options={"preemption_bound": 1}
    )


def tool_runs_with_a_summarizing_compressor() -> Incident:
    """A turn with a tool run while an in-place summary keeping one message commits: the
    kept tail never starts between a call and its result, the open turn stays out."""
    policy = CompactionPolicy(max_tokens=None, keep_last=1)

    def main(h):
        with h.turn():
            h.append("user", "what is the weather?")
            h.append(
                Message(
                    "assistant",
                    None,
                    tool_calls=[{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
                )
            )
            h.append(Message("tool", "sunny", tool_call_id="c1"))
            h.append("assistant", "it is sunny")

    def compact(h):
        h.compress(force=True, mode="in_place")

    harness = Harness(compressor=HeadTailCompressor(keep_last=1), policy=policy, prefill=prefill())
    return Incident(harness, {"main": main, "compact": compact}, options={"preemption_bound": 1})


def rollback_behind_a_held_note() -> Incident:
    """A turn, a review note held behind it, and a redelivered ask that rolls the turn
    back: the rollback takes the turn's rows only while they are at the end."""

    def main(h):
        try:
            with h.turn():
                h.append("user", "a long ask")
                h.append("assistant", "a partial answer")
        except TranscriptError:  # rolled back under it
            pass

    def review(h):
        h.append("assistant", "background note")

    def retry(h):
        with h.turn(on_busy="rollback"):
            h.append("user", "the ask, again")

    def check(view: HarnessView):
        texts = [m.text for m in view.transcript]
        assert "background note" in texts and "the ask, again" in texts, texts
        turn = [t for t in ("a long ask", "a partial answer") if t in texts]
        assert turn in ([], ["a long ask", "a partial answer"]), texts

    return Incident(
        _head_tail(),
        {"main": main, "review": review, "retry": retry},
        {"review"},
        check,
        options={"preemption_bound": 1},
    )


def a_dead_turn_sealed() -> Incident:
    """A holder's process dies inside its turn (`PathHandle.crash`): its lease lapses 10 s
    later on the harness's clock, and the other process's append, held behind the dead
    turn until then, lands after it; nothing is split, lost or leaked."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    landed: list[str] = []

    def holder(h):
        with h.turn():
            h.append("user", "an ask whose holder dies")
            h.crash()

    def other(h):
        landed.append(h.append("user", "another ask").text)

    def after_the_turn(view: HarnessView):  # before the turn opened, or once its lease lapsed
        (turn_row,) = [m for m in view.transcript if m.text == "an ask whose holder dies"]
        (late,) = [m for m in view.transcript if m.text == "another ask"]
        if late.seq > turn_row.seq:
            assert late.created_at - turn_row.created_at >= policy.lease_ttl_s, (late, turn_row)
        assert not view.outcomes and len(view.ledger["holder"]) == 1

    def after():
        assert landed == ["another ask"] * len(landed) and landed

    options = {"processes": {"holder": "p1", "other": "p2"}}
    return Incident(
        _head_tail(policy), {"holder": holder, "other": other}, check=after_the_turn, after=after, options=options
    )


def a_holder_frozen_inside_its_turn() -> Incident:
    """A holder stops for 25 s inside its turn (`PathHandle.freeze`; the lease lasts 10)
    while another process appends: its turn is lost, and its late append refused."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    refused: list[str] = []
    answered: list[bool] = []

    def holder(h):
        try:
            with h.turn():
                h.append("user", "ask")
                h.freeze(25)
                h.append("assistant", "late answer")
            answered.append(True)
        except TranscriptError as exc:
            refused.append(type(exc).__name__)

    def other(h):
        h.append("user", "another ask")

    def after():
        assert refused and not answered and set(refused) == {"TurnLostError"}

    options = {"processes": {"holder": "p1", "other": "p2"}}
    return Incident(_head_tail(policy), {"holder": holder, "other": other}, after=after, options=options)


def a_turn_lapsing_during_a_slow_rotation() -> Incident:
    """A holder's process stops for 25 s inside its turn (the lease lasts 10) while another
    process's rotation summarizes for 20 s: the turn lapses during the summary, the commit
    carries it dead to the continuation (or the holder's turn opens on one), and the
    holder's late answer is refused wherever its turn now lives."""
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    slow = SlowCompressor(HeadTailCompressor(keep_last=2), seconds=20.0)
    refused: list[str] = []
    rotated: list[CompressionStatus] = []

    def holder(h):
        try:
            with h.turn():
                h.append("user", "ask")
                h.freeze(25)
                h.append("assistant", "late answer")
        except TranscriptError as exc:
            refused.append(type(exc).__name__)

    def cron(h):
        rotated.append(h.compress(force=True, mode="rotate").status)

    def no_late_answer(transcript):
        assert "late answer" not in [m.text for m in transcript], [m.text for m in transcript]

    def after():
        assert refused and set(refused) == {"TurnLostError"}, refused
        assert CompressionStatus.ROTATED in rotated, rotated

    harness = Harness(compressor=slow, policy=policy, prefill=prefill())
    options = {"processes": {"holder": "p1", "cron": "p2"}}
    return Incident(harness, {"holder": holder, "cron": cron}, check=no_late_answer, after=after, options=options)


INCIDENTS: dict[str, Callable[[], Incident]] = {
    "two paths compressing (rotate)": two_paths_compressing,
    "two paths compressing (in place)": lambda: two_paths_compressing("in_place"),
    "review fork": review_fork,
    "three paths (preemption bound 0)": three_paths,
    "rotation while the gateway caches the id": rotation_while_the_gateway_caches_the_id,
    "interrupt during a summary": interrupt_during_a_summary,
    "slow compressor and appends": slow_compressor_and_appends,
    "retract during a summary": retract_during_a_summary,
    "rollback of a failed child": rollback_of_a_failed_child,
    "stale holder frozen past its lease": stale_holder_frozen_past_its_lease,
    "stale holder frozen past its lease (in place)": lambda: stale_holder_frozen_past_its_lease("in_place"),
    "turns across processes (preemption bound 1)": turns_across_processes,
    "keyed redelivery (preemption bound 1)": keyed_redelivery,
    "tool runs with a summarizing compressor (preemption bound 1)": tool_runs_with_a_summarizing_compressor,
    "rollback behind a held note (preemption bound 1)": rollback_behind_a_held_note,
    "a dead turn sealed": a_dead_turn_sealed,
    "a holder frozen inside its turn": a_holder_frozen_inside_its_turn,
    "a turn lapsing during a slow rotation": a_turn_lapsing_during_a_slow_rotation,
}
