"""Property: generated tool-call transcripts, both shipped compressors, every keep_last.

For every transcript and every ``keep_last``, the published result (the compressor's
output after rule 9) keeps every tool pair valid and ends with the message the
transcript ended with (rule 9's merge may prepend text to a trailing user message, so
the last message then ends with the old one and records it in ``merged_from``). One
run per compressor also goes through a real registry and store, with a tail appended
while the summary is in flight.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actors import CompactionPolicy, HeadTailCompressor, LLMCompressor, SessionRegistry
from actors.compaction._roles import latest_real_ask, restore_real_user_ask
from persistence import open_store
from protocol import CompressionStatus, Message, transcripts_equal
from protocol._transcript import invalid_tool_pairing
from tests.llm_server import running_llm_server

pytestmark = pytest.mark.timeout(600)


@st.composite
def turns(draw, prefix: str = "") -> list[Message]:
    """One user turn: an ask, rounds of tool calls (parallel as one or several assistant
    messages, results in any order, an optional reasoning item first), an answer."""
    n = f"{prefix}{draw(st.integers(0, 10_000))}"
    out = [Message("user", f"ask {n}", meta={"platform_msg_id": n})]
    for r in range(draw(st.integers(0, 2))):
        ids = [f"c{n}-{r}-{i}" for i in range(draw(st.integers(1, 3)))]
        if draw(st.booleans()):
            out.append(Message("assistant", f"thinking {n}", meta={"keep_with_next": True}))
        calls = [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]
        if draw(st.booleans()):
            out.append(Message("assistant", None, tool_calls=calls))
        else:
            out += [Message("assistant", None, tool_calls=[c]) for c in calls]
        out += [Message("tool", f"r {i}", tool_call_id=i) for i in draw(st.permutations(ids))]
    if draw(st.booleans()) or not out[-1].role == "user":
        out.append(Message("assistant", f"answer {n}"))
    return out


@st.composite
def transcripts(draw) -> list[Message]:
    out = [Message("system", "be useful")] if draw(st.booleans()) else []
    for turn in draw(st.lists(turns(), min_size=1, max_size=6)):
        out += turn
    return out


def check_published(before: list[Message], after: list[Message]) -> None:
    assert invalid_tool_pairing(after, before) is None
    last, new_last = before[-1], after[-1]
    if new_last.role == "user" and "merged_from" in new_last.meta:
        assert new_last.text.endswith(last.text) and new_last.meta["merged_from"][-1] == dict(last.meta)
    else:
        assert transcripts_equal([new_last], [last])
    ask = latest_real_ask(before)
    if ask is not None:
        assert any(m.role == "user" and ask.text in m.text for m in after)


@pytest.fixture(scope="module")
def llm_base_url():
    with running_llm_server() as server:
        yield server.base_url


def shipped(name: str, keep_last: int, base_url: str):
    if name == "head-tail":
        return HeadTailCompressor(keep_last=keep_last)
    return LLMCompressor(base_url=base_url, model="m", keep_last=keep_last, max_retries=0, environ={})


@pytest.mark.parametrize("name", ["head-tail", "llm"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=transcripts(), merge=st.booleans())
def test_every_keep_last_gives_a_valid_result_ending_where_it_ended(name, llm_base_url, before, merge):
    for keep_last in range(len(before) + 2):
        compressed = shipped(name, keep_last, llm_base_url).compress(
            before, target_tokens=200, cancel=threading.Event()
        )
        if transcripts_equal(compressed, before):
            continue
        check_published(before, restore_real_user_ask(before, compressed, merge=merge))


class AppendsATail:
    """Wraps a shipped compressor: a new turn lands while the summary is in flight."""

    def __init__(self, inner, tail: list[Message]) -> None:
        self.inner, self.tail, self.handle = inner, tail, None
        self.name = inner.name

    def compress(self, messages, *, target_tokens, cancel):
        self.handle.append(self.tail)
        return self.inner.compress(messages, target_tokens=target_tokens, cancel=cancel)


@pytest.mark.parametrize("name", ["head-tail", "llm"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=transcripts(), tail=turns(prefix="tail-"), data=st.data())
def test_through_a_registry_with_a_tail(name, llm_base_url, store_url, before, tail, data):
    assume(len(before) >= 2)  # fewer is SKIPPED ("nothing_to_do") before the compressor runs
    keep_last = data.draw(st.integers(0, len(before) + 1), label="keep_last")
    merge = data.draw(st.booleans(), label="merge_user_messages")
    compressor = AppendsATail(shipped(name, keep_last, llm_base_url), tail)
    store = open_store(store_url)
    try:
        with SessionRegistry(
            store, compressor=compressor, policy=CompactionPolicy(merge_user_messages=merge)
        ) as registry:
            s = compressor.handle = registry.session(f"prop-{len(store.sessions())}")
            s.append(before)
            outcome = s.compress()
            live = [m.as_message() for m in s.transcript()]
    finally:
        store.close()
    assert outcome.status in (CompressionStatus.COMPACTED, CompressionStatus.UNCHANGED), outcome
    assert invalid_tool_pairing(live, [*before, *tail]) is None
    assert transcripts_equal(live[-len(tail) :], tail)  # the tail, verbatim and last
    if outcome.status is CompressionStatus.COMPACTED:
        check_published(before, live[: -len(tail)])
