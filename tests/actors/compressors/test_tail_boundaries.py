"""Both shipped compressors keep their tail on a safe boundary and end where the input ends."""

from __future__ import annotations

import threading

import pytest

from actors.compressors import HeadTailCompressor, LLMCompressor
from protocol import SUMMARY_PREFIX, Message
from protocol._transcript import invalid_tool_pairing, is_tail_boundary
from tests.tool_messages import call, result

pytestmark = pytest.mark.timeout(60)


def tool_heavy() -> list[Message]:
    """Turns of user, parallel calls (one message and two messages), results, reasoning, answer."""
    out = [Message("system", "be useful")]
    for t in range(4):
        out += [
            Message("user", f"ask {t}"),
            call(f"a{t}", f"b{t}"),
            result(f"b{t}"),
            result(f"a{t}"),
            Message("assistant", f"thinking {t}", meta={"keep_with_next": True}),
            call(f"c{t}"),
            call(f"d{t}"),
            result(f"c{t}"),
            result(f"d{t}"),
            Message("assistant", f"answer {t}"),
        ]
    return out


def kept_tail_start(before: list[Message], after: list[Message]) -> int:
    """Index in ``before`` where the verbatim suffix of ``after`` starts."""
    k = 0
    while k < min(len(before), len(after)) and before[-1 - k] == after[-1 - k]:
        k += 1
    return len(before) - k


@pytest.fixture(params=["head-tail", "llm"])
def make(request, llm_server):
    if request.param == "head-tail":
        return lambda keep_last: HeadTailCompressor(keep_last=keep_last)
    return lambda keep_last: LLMCompressor(base_url=llm_server.base_url, model="m", keep_last=keep_last, environ={})


def test_kept_tail_starts_on_a_boundary_at_every_keep_last(make):
    messages = tool_heavy()
    for keep_last in range(len(messages) + 2):
        out = list(make(keep_last).compress(messages, target_tokens=400, cancel=threading.Event()))
        assert out[-1] == messages[-1], keep_last  # the transcript ends where it did
        if out == messages:
            continue
        start = kept_tail_start(messages, out)
        assert is_tail_boundary(messages, start), (keep_last, start)
        assert len(messages) - start >= min(max(keep_last, 1), len(messages) - 2)
        summary = out[len(out) - (len(messages) - start) - 1]
        assert summary.text.startswith(SUMMARY_PREFIX)
        assert invalid_tool_pairing(out, messages) is None, keep_last


def test_a_tail_that_would_start_mid_run_grows_to_the_run_start(make):
    messages = tool_heavy()
    out = list(make(2).compress(messages, target_tokens=400, cancel=threading.Event()))
    # the last two are [result d3, answer 3]: the tail grows back to the reasoning item
    assert out[-6:] == messages[-6:] and out[-6].meta.get("keep_with_next")
    assert out[-7].text.startswith(SUMMARY_PREFIX)
