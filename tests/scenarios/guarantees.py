"""Scenarios aimed at one guarantee each, written for the bugs of
tests/scenarios/mutants.py that the upstream incidents let through: a lease taken
while held, the in-flight join, the check of a summary's tool pairs, the tail cut
and the snapshot's cut around tool runs, and a snapshot's cut before another
process's turn.

Each is an `Incident` of tests/scenarios/incidents.py, written with the public
harness API only. `GUARANTEES` maps a name to its builder, as `INCIDENTS` does.
"""

from __future__ import annotations

from collections.abc import Callable

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, HarnessView, ScriptedCompressor, summary_only
from protocol import CompressionStatus, Message

from .incidents import POLICY, Incident, _head_tail, prefill

#: A lease of 10 virtual seconds.
LEASED = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)


def compress_at_once(processes: bool) -> Incident:
    """Two paths compact together, in two processes or in one (where the second joins
    the first's attempt), and no time passes: nobody's lease lapses, so nobody loses
    it, and one commits."""
    statuses: list[CompressionStatus] = []

    def compact(h):
        statuses.append(h.compress(force=True, mode="in_place").status)

    def nobody_lost_a_lease(view: HarnessView):
        lost = [o for outcomes in view.outcomes.values() for o in outcomes if o.status is CompressionStatus.LEASE_LOST]
        assert not lost, lost

    def after():
        assert CompressionStatus.COMPACTED in statuses

    options = {"processes": {"p1": "p1", "p2": "p2"}} if processes else {}
    return Incident(
        _head_tail(LEASED), {"p1": compact, "p2": compact}, check=nobody_lost_a_lease, after=after, options=options
    )


CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}


def _tool_run() -> list[Message]:
    return [
        Message("user", "what is the weather?"),
        Message("assistant", None, tool_calls=[CALL]),
        Message("tool", "sunny", tool_call_id="c1"),
        Message("assistant", "it is sunny"),
        Message("user", "thanks"),
        Message("assistant", "you are welcome"),
    ]


def a_summary_that_orphans_a_tool_result() -> Incident:
    """The compressor keeps a tool result and drops its call: the result is refused
    (FAILED, invalid_result), never committed, while a note lands beside it."""
    statuses: list[CompressionStatus] = []

    def orphaned(messages):
        return [
            Message("assistant", "[summary] the user asked for the weather"),
            Message("tool", "sunny", tool_call_id="c1"),
        ]

    def compact(h):
        statuses.append(h.compress(force=True, mode="in_place").status)

    def note(h):
        h.append("assistant", "a note")

    def after():
        assert statuses and set(statuses) == {CompressionStatus.FAILED}

    harness = Harness(compressor=ScriptedCompressor(orphaned), policy=POLICY, prefill=_tool_run())
    return Incident(harness, {"compact": compact, "note": note}, {"note"}, after=after)


def a_tool_result_still_coming() -> Incident:
    """An agent's tool call waits for its result (no turn) while a summary of
    everything commits: the call stays out of the snapshot, so its result never lands
    after a summary that swallowed it."""

    def agent(h):
        h.append(Message("assistant", None, tool_calls=[CALL]))
        h.append(Message("tool", "sunny", tool_call_id="c1"))
        h.append("assistant", "it is sunny")

    def compact(h):
        h.compress(force=True, mode="in_place")

    harness = Harness(compressor=ScriptedCompressor(summary_only), policy=POLICY, prefill=prefill())
    return Incident(harness, {"agent": agent, "compact": compact})


def a_summary_whose_tail_starts_in_a_tool_run() -> Incident:
    """``keep_last=2`` would start the kept tail at a tool result: the tail grows to
    take its call, and the summary commits (a tail cut inside the run would orphan the
    result, and the result's check would refuse the whole summary)."""
    statuses: list[CompressionStatus] = []

    def compact(h):
        statuses.append(h.compress(force=True, mode="in_place").status)

    def reader(h):
        h.transcript()

    def after():
        assert statuses and set(statuses) == {CompressionStatus.COMPACTED}, statuses

    harness = Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=prefill() + _tool_run()[:4])
    return Incident(harness, {"compact": compact, "reader": reader}, after=after)


def a_summary_beside_another_process_turn() -> Incident:
    """A process compacts while another holds a turn: its snapshot stops before the
    turn's first message (the store says where it starts, its own count of the turn
    is 0), so the summary commits. A snapshot into the turn would be refused."""
    statuses: list[CompressionStatus] = []

    def turn(h):
        with h.turn():
            h.append("user", "ask")
            h.append("assistant", "answer")

    def compact(h):
        statuses.append(h.compress(force=True, mode="in_place").status)

    def after():
        assert statuses and set(statuses) == {CompressionStatus.COMPACTED}, statuses

    options = {"processes": {"turn": "p1", "compact": "p2"}, "preemption_bound": 0}
    return Incident(_head_tail(), {"turn": turn, "compact": compact}, after=after, options=options)


GUARANTEES: dict[str, Callable[[], Incident]] = {
    "two processes compress at once": lambda: compress_at_once(processes=True),
    "two paths of one process compress at once": lambda: compress_at_once(processes=False),
    "a summary that orphans a tool result": a_summary_that_orphans_a_tool_result,
    "a tool result still coming": a_tool_result_still_coming,
    "a summary whose tail starts in a tool run": a_summary_whose_tail_starts_in_a_tool_run,
    "a summary beside another process's turn (preemption bound 0)": a_summary_beside_another_process_turn,
}
