"""Item 12: the committed compacted set keeps the latest real ask and never has two
user messages in a row, whatever the compressor returns (the last step before the commit)."""

from __future__ import annotations

import threading

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import SUMMARY_PREFIX, CompressionStatus, Message

pytestmark = pytest.mark.timeout(60)

ASK = "REAL HUMAN ASK: please fix the build"


def transcript_with_ask() -> list[Message]:
    return [
        Message("system", "you are helpful"),
        Message("user", "first question"),
        Message("assistant", "first answer"),
        Message("user", "[System: your previous response was truncated]", meta={"synthetic": True}),
        Message("assistant", "retrying"),
        Message("user", ASK),
        Message("assistant", "working on it"),
        Message("user", f"{SUMMARY_PREFIX} an older summary"),
    ]


def no_user_pairs(messages) -> bool:
    roles = [m.role for m in messages]
    return not any(a == b == "user" for a, b in zip(roles, roles[1:]))


def has_ask(messages) -> bool:
    return any(m.role == "user" and ASK in m.text for m in messages)


SYNTHETIC = {"synthetic": True}
RESULTS = {
    "drops_every_user_turn": lambda ms: [m.as_message() for m in ms if m.role != "user"],
    "leading_synthetic_user_then_summary": lambda ms: [
        Message("user", "[System: Your previous response was truncated ...]", meta=SYNTHETIC),
        Message("assistant", "summary"),
        Message("user", "[Your active task list was preserved]", meta=SYNTHETIC),
    ],
    "scaffolding_only": lambda ms: [
        Message("user", "[Your active task list was preserved]", meta=SYNTHETIC),
    ],
    "summary_led_user_pair": lambda ms: [
        Message("user", f"{SUMMARY_PREFIX} summary"),
        Message("user", "tail"),
    ],
    "summary_led_then_assistant": lambda ms: [
        Message("user", f"{SUMMARY_PREFIX} summary"),
        Message("assistant", "compacted tail"),
    ],
    "three_users": lambda ms: [
        Message("user", "a"),
        Message("user", "b"),
        Message("user", "c"),
    ],
}


@pytest.mark.parametrize("shape", sorted(RESULTS))
def test_compacted_set_keeps_latest_ask_and_alternates(make_registry, store, shape):
    session = make_registry(ScriptedCompressor(RESULTS[shape])).session(f"roles-{shape}")
    session.append(transcript_with_ask())

    outcome = session.compress()

    assert outcome.status is CompressionStatus.COMPACTED
    live = store.transcript(session.session_id)
    assert len(live) == outcome.messages_after  # no tail: the live rows are the set
    assert has_ask(live), [m.content for m in live]
    assert no_user_pairs(live), [(m.role, m.content) for m in live]


def test_scaffolding_only_merges_with_the_ask_first(make_registry, store):
    session = make_registry(ScriptedCompressor(RESULTS["scaffolding_only"])).session("roles-merge")
    session.append(transcript_with_ask())
    session.compress()
    live = store.transcript("roles-merge")
    assert len(live) == 1
    assert live[0].role == "user" and live[0].text.startswith(ASK)
    assert not live[0].meta.get("synthetic")


def test_tail_user_turn_is_carried_verbatim_after_the_set(make_registry, store):
    """A user message appended during the summary may follow a user one (the tail)."""
    gated = GatedCompressor(RESULTS["scaffolding_only"])
    session = make_registry(gated).session("roles-tail")
    session.append(transcript_with_ask())
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("o", session.compress()))
    thread.start()
    assert gated.wait_started(10)
    session.append("user", "arrived during the summary")
    gated.release()
    thread.join(20)
    assert box["o"].status is CompressionStatus.COMPACTED
    live = store.transcript("roles-tail")
    assert [m.role for m in live] == ["user", "user"]
    assert live[0].text.startswith(ASK)
    assert live[1].content == "arrived during the summary"
