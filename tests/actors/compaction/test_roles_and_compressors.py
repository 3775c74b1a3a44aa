"""Role alternation, the head-tail compressor, the policy and the test compressors."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.compaction._policy import CompactionPolicy, bind_compressor, estimate_tokens
from actors.compaction._roles import latest_real_ask, restore_real_user_ask
from actors.compressors import HeadTailCompressor
from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import SUMMARY_PREFIX, InvalidArgumentError, Message


def no_user_pairs(messages) -> bool:
    return all(not (a.role == b.role == "user") for a, b in zip(messages, messages[1:]))


ANCHOR = Message("user", "REAL HUMAN ASK")


def test_anchor_after_leading_synthetic_turn_keeps_alternation():
    compacted = [
        Message("user", "[System: Your previous response was truncated ...]", meta={"synthetic": True}),
        Message("assistant", "summary"),
        Message("user", "[Your active task list was preserved]", meta={"synthetic": True}),
    ]
    result = restore_real_user_ask([ANCHOR], compacted)
    assert no_user_pairs(result)
    assert any(m.text.startswith("REAL HUMAN ASK") for m in result)


def test_scaffolding_only_transcript_merges_the_anchor_in_front():
    compacted = [Message("user", "[task list preserved]", meta={"synthetic": True})]
    result = restore_real_user_ask([ANCHOR], compacted)
    assert len(result) == 1
    assert result[0].text.startswith("REAL HUMAN ASK")
    assert not result[0].meta.get("synthetic")


def test_summary_led_user_pair_is_merged():
    # the upstream compressor stub: two user messages in a row
    compacted = [Message("user", f"{SUMMARY_PREFIX} summary"), Message("user", "tail")]
    snapshot = [Message("user", f"m{i}") for i in range(3)]
    result = restore_real_user_ask(snapshot, compacted)
    assert no_user_pairs(result)
    assert result[0].text.startswith(SUMMARY_PREFIX)
    assert "m2" in result[-1].text


def test_dropped_ask_is_appended_after_an_assistant_message():
    snapshot = [Message("user", "first"), Message("assistant", "a"), Message("user", "latest ask")]
    result = restore_real_user_ask(snapshot, [Message("assistant", f"{SUMMARY_PREFIX} s")])
    assert [m.role for m in result] == ["assistant", "user"]
    assert result[-1].content == "latest ask"


def test_an_ask_inside_an_older_longer_ask_is_not_taken_as_kept():
    snapshot = [
        Message("user", "please fix the login bug"),
        Message("assistant", "which one?"),
        Message("user", "login bug"),
        Message("assistant", "fixed"),
    ]
    compacted = [Message("user", "please fix the login bug"), Message("assistant", f"{SUMMARY_PREFIX} s")]
    result = restore_real_user_ask(snapshot, compacted, merge=False)
    # answered: it goes back right before the summary that holds its answer
    assert result[1] == Message("user", "login bug") and len(result) == 3
    ok = [Message("user", "ok let's start"), Message("assistant", "sure"), Message("user", "ok")]
    result = restore_real_user_ask(ok, [Message("user", "ok let's start"), Message("assistant", "[s]")])
    assert result[-1].content == "ok"  # not answered yet: it stays last


def test_a_merged_ask_counts_as_kept():
    ask = Message("user", "the ask")
    merged = [Message("assistant", "s"), Message("user", "the ask\n\nscaffold")]
    assert restore_real_user_ask([ask], merged) == merged


def test_summaries_and_synthetic_turns_are_never_the_ask():
    snapshot = [
        Message("user", "the real one"),
        Message("user", f"{SUMMARY_PREFIX} old"),
        Message("user", "bg event", meta={"synthetic": True}),
    ]
    assert latest_real_ask(snapshot).content == "the real one"
    assert latest_real_ask([Message("assistant", "x")]) is None


def test_multipart_contents_merge_as_parts():
    ask = Message("user", [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}])
    result = restore_real_user_ask([ask], [Message("user", "scaffold", meta={"synthetic": True})])
    assert len(result) == 1 and isinstance(result[0].content, list)
    assert result[0].content[0] == {"type": "text", "text": "look"}


roles = st.sampled_from(["system", "user", "assistant", "tool"])
message_st = st.builds(
    lambda role, text, synthetic: Message(role, text, meta={"synthetic": True} if synthetic else {}),
    roles,
    st.text(max_size=8),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(snapshot=st.lists(message_st, max_size=12), compacted=st.lists(message_st, max_size=12))
def test_restored_sets_never_pair_users_and_keep_the_ask(snapshot, compacted):
    result = restore_real_user_ask(snapshot, compacted)
    assert no_user_pairs(result)
    ask = latest_real_ask(snapshot)
    if ask is not None:
        sep = "\n\n"
        assert any(
            m.role == "user"
            and (
                m.text == ask.text
                or m.text.startswith(ask.text + sep)
                or m.text.endswith(sep + ask.text)
                or f"{sep}{ask.text}{sep}" in m.text
            )
            for m in result
        )


def conversation(n: int) -> list[Message]:
    out = [Message("system", "sys"), Message("user", "first ask")]
    out += [Message("assistant" if i % 2 == 0 else "user", f"turn {i}") for i in range(n)]
    return out


def test_head_tail_keeps_system_first_ask_and_last_messages():
    messages = conversation(20)
    result = HeadTailCompressor(keep_last=4).compress(messages, target_tokens=500, cancel=threading.Event())
    assert result[:2] == messages[:2]
    assert result[2].text.startswith(SUMMARY_PREFIX)
    assert result[3:] == messages[-4:]
    assert no_user_pairs(result)


def test_head_tail_is_deterministic_and_respects_cancel():
    messages = conversation(30)
    a = HeadTailCompressor(3).compress(messages, target_tokens=100, cancel=threading.Event())
    b = HeadTailCompressor(3).compress(messages, target_tokens=100, cancel=threading.Event())
    assert a == b and len(a) < len(messages)
    cancelled = threading.Event()
    cancelled.set()
    assert HeadTailCompressor(3).compress(messages, target_tokens=100, cancel=cancelled) == messages


def test_head_tail_returns_short_transcripts_unchanged():
    messages = conversation(2)
    assert HeadTailCompressor(10).compress(messages, target_tokens=100, cancel=threading.Event()) == messages


def test_head_tail_never_orphans_a_tool_result():
    messages = conversation(10) + [
        Message(
            "assistant", "", tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        ),
        Message("tool", "result", tool_call_id="c"),
    ]
    result = HeadTailCompressor(keep_last=1).compress(messages, target_tokens=100, cancel=threading.Event())
    assert result[-2].tool_calls and result[-1].role == "tool"


def test_head_tail_summary_fits_the_target():
    messages = [Message("system", "s"), Message("user", "ask")] + [Message("assistant", "x" * 400) for _ in range(200)]
    result = HeadTailCompressor(2).compress(messages, target_tokens=200, cancel=threading.Event())
    assert estimate_tokens(result[2:3]) <= 400


def test_head_tail_takes_keep_last_from_the_policy():
    bound = bind_compressor(HeadTailCompressor(), CompactionPolicy(keep_last=2))
    result = bound.compress(conversation(20), target_tokens=500, cancel=threading.Event())
    assert result[-2:] == conversation(20)[-2:] and len(result) == 5
    explicit = HeadTailCompressor(5)
    assert bind_compressor(explicit, CompactionPolicy(keep_last=2)) is explicit
    assert bind_compressor(None, CompactionPolicy()) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"keep_last": -1},
        {"mode": "sideways"},
        {"lease_ttl_s": 0},
        {"lease_ttl_s": float("inf")},
        {"ask_timeout_s": -1},
        {"cooldown_s": float("nan")},
        {"max_resident": 0},
        {"token_counter": 5},
        {"max_turn_s": 0},
        {"max_turn_s": True},
        {"max_turn_s": float("inf")},
    ],
)
def test_policy_rejects_out_of_range_values(kwargs):
    with pytest.raises(InvalidArgumentError):
        CompactionPolicy(**kwargs)


def test_policy_timings_follow_the_ttl():
    policy = CompactionPolicy(lease_ttl_s=9.0, cooldown_s=600, max_compaction_s=10, ask_timeout_s=2)
    assert policy.renew_interval_s == 3.0
    assert policy.self_fence_s == pytest.approx(8.1)
    assert CompactionPolicy(lease_ttl_s=600).self_fence_s == 595
    assert policy.auto_retry_after_s == 30 and policy.compress_wait_s == 12
    assert CompactionPolicy().max_turn_s == 300
    assert CompactionPolicy(max_turn_s=5, ask_timeout_s=2).held_wait_s == 7
    assert not CompactionPolicy().over_budget(conversation(1000))
    assert CompactionPolicy(max_tokens=10).over_budget(conversation(10))


def test_gated_compressor_blocks_until_released_and_honours_cancel():
    gated = GatedCompressor()
    cancel = threading.Event()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(gated.compress([Message("user", "x")], target_tokens=10, cancel=cancel))
    )
    worker.start()
    assert gated.wait_started(5)
    assert worker.is_alive() and not results
    gated.release()
    worker.join(5)
    assert results and results[0][-1].text.startswith(SUMMARY_PREFIX) and gated.calls == 1

    blocked = GatedCompressor()
    errors = []

    def run():
        try:
            blocked.compress([Message("user", "x")], target_tokens=10, cancel=cancel)
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert blocked.wait_started(5)
    cancel.set()
    worker.join(5)
    assert errors and type(errors[0]).__name__ == "CompressorCancelled"


def test_scripted_compressor_plays_its_steps():
    scripted = ScriptedCompressor(RuntimeError("boom"), [{"role": "user", "content": "y"}])
    with pytest.raises(RuntimeError, match="boom"):
        scripted.compress([], target_tokens=1, cancel=threading.Event())
    for _ in range(2):
        assert scripted.compress([], target_tokens=1, cancel=threading.Event()) == [Message("user", "y")]
    assert scripted.calls == 3
