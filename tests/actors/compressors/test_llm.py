"""`LLMCompressor` against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import threading
import time

import pytest

from actors.compressors import Compressed
from actors.compressors._llm import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    LLMCancelledError,
    LLMCompressor,
    LLMCompressorError,
    LLMTimeoutError,
)
from protocol import SUMMARY_PREFIX, ConfigurationError, Message, TranscriptError, Usage
from tests.llm_server import FakeLLM

pytestmark = pytest.mark.timeout(30)


def transcript(n_middle: int = 10) -> list[Message]:
    msgs = [Message("system", "You are helpful."), Message("user", "Plan a trip to Lisbon.")]
    for i in range(n_middle):
        msgs.append(Message("assistant" if i % 2 == 0 else "user", f"turn {i}"))
    msgs += [Message("user", "last ask"), Message("assistant", "last answer")]
    return msgs


def test_good_reply_keeps_head_and_tail_and_summarizes_the_middle(llm_server: FakeLLM) -> None:
    comp = LLMCompressor(base_url=llm_server.base_url, model="m1", api_key="k-123", keep_last=2)
    msgs = transcript()
    out = comp.compress(msgs, target_tokens=500, cancel=threading.Event())

    assert [m.content for m in out[:2]] == ["You are helpful.", "Plan a trip to Lisbon."]
    assert out[2].content.startswith(SUMMARY_PREFIX)
    assert "They planned a trip." in out[2].content
    assert out[2].role == "assistant"  # between two user messages: never user next to user
    assert list(out[3:]) == msgs[-2:]
    assert len(out) == 5
    request = llm_server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "m1"
    assert "turn 0" in request["messages"][-1]["content"]
    assert "last ask" not in request["messages"][-1]["content"]  # the tail is kept, not sent
    assert llm_server.headers_seen[0]["Authorization"] == "Bearer k-123"


def test_configuration_from_environment(llm_server: FakeLLM, monkeypatch) -> None:
    monkeypatch.setenv(ENV_BASE_URL, llm_server.base_url)
    monkeypatch.setenv(ENV_MODEL, "env-model")
    monkeypatch.delenv(ENV_API_KEY, raising=False)
    comp = LLMCompressor()
    assert comp.name == "llm:env-model"
    out = comp.compress(transcript(), target_tokens=500, cancel=threading.Event())
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert llm_server.requests[0]["model"] == "env-model"
    assert "Authorization" not in llm_server.headers_seen[0]


def test_keep_last_comes_from_the_policy_when_not_given(llm_server: FakeLLM) -> None:
    from actors.compaction._policy import CompactionPolicy, bind_compressor

    comp = bind_compressor(LLMCompressor(base_url=llm_server.base_url, model="m"), CompactionPolicy(keep_last=3))
    msgs = transcript()
    out = comp.compress(msgs, target_tokens=500, cancel=threading.Event())
    assert list(out[-3:]) == msgs[-3:] and len(out) == 2 + 1 + 3


def test_missing_configuration_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=ENV_MODEL):
        LLMCompressor(base_url="http://127.0.0.1:1/v1", environ={})
    with pytest.raises(ConfigurationError, match=ENV_BASE_URL):
        LLMCompressor(model="m", environ={})
    with pytest.raises(ConfigurationError):
        LLMCompressor(base_url="ftp://x/v1", model="m", environ={})


def test_nothing_between_head_and_tail_is_returned_unchanged(llm_server: FakeLLM) -> None:
    comp = LLMCompressor(base_url=llm_server.base_url, model="m", keep_last=6)
    msgs = [Message("system", "s"), Message("user", "q"), Message("assistant", "a")]
    out = comp.compress(msgs, target_tokens=100, cancel=threading.Event())
    assert list(out) == msgs
    assert llm_server.requests == []  # no call made


def test_http_500_raises_a_clear_error(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "error"
    comp = LLMCompressor(base_url=llm_server.base_url, model="m")
    with pytest.raises(LLMCompressorError, match="HTTP 500") as info:
        comp.compress(transcript(), target_tokens=100, cancel=threading.Event())
    assert info.value.status == 500
    assert isinstance(info.value, TranscriptError)


@pytest.mark.parametrize("behaviour", ["malformed", "not_json"])
def test_malformed_body_raises(llm_server: FakeLLM, behaviour: str) -> None:
    llm_server.behaviour = behaviour
    comp = LLMCompressor(base_url=llm_server.base_url, model="m")
    with pytest.raises(LLMCompressorError, match="malformed"):
        comp.compress(transcript(), target_tokens=100, cancel=threading.Event())


def test_reply_slower_than_timeout_raises_timeout(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "slow"  # the handler holds until `release`, set in teardown
    comp = LLMCompressor(base_url=llm_server.base_url, model="m", timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError):
        comp.compress(transcript(), target_tokens=100, cancel=threading.Event())
    assert llm_server.arrived.is_set()
    assert time.monotonic() - started < 5


def test_cancel_while_in_flight_returns_promptly(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "slow"
    comp = LLMCompressor(base_url=llm_server.base_url, model="m", timeout_s=60)
    cancel = threading.Event()
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            comp.compress(transcript(), target_tokens=100, cancel=cancel)
        except BaseException as exc:  # recorded for the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    assert llm_server.arrived.wait(10), "request never reached the server"
    cancelled_at = time.monotonic()
    cancel.set()
    worker.join(5)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 2
    assert isinstance(outcome.get("error"), LLMCancelledError)


def test_cancel_before_sending_makes_no_request(llm_server: FakeLLM) -> None:
    cancel = threading.Event()
    cancel.set()
    comp = LLMCompressor(base_url=llm_server.base_url, model="m")
    with pytest.raises(LLMCancelledError):
        comp.compress(transcript(), target_tokens=100, cancel=cancel)
    assert llm_server.requests == []


def test_unreachable_endpoint_raises() -> None:
    # Bind then close a port so nothing listens on it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    comp = LLMCompressor(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5, max_retries=0)
    with pytest.raises(LLMCompressorError, match="failed"):
        comp.compress(transcript(), target_tokens=100, cancel=threading.Event())


def test_the_reply_usage_comes_back_with_the_summary(llm_server: FakeLLM) -> None:
    comp = LLMCompressor(base_url=llm_server.base_url, model="m1", keep_last=2)
    llm_server.reply_extra = {"model": "m1-2026", "usage": {"prompt_tokens": 812, "completion_tokens": 64}}
    out = comp.compress(transcript(), target_tokens=500, cancel=threading.Event())
    assert isinstance(out, Compressed) and out.usage == Usage(812, 64, "m1-2026")
    assert out[2].text.startswith(SUMMARY_PREFIX) and len(out) == 5  # still a sequence of messages
    llm_server.reply_extra = {"model": "bad\nname", "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    assert comp.compress(transcript(), target_tokens=500, cancel=threading.Event()).usage == Usage(5, 1, "m1")


@pytest.mark.parametrize("extra", [{}, {"usage": None}, {"usage": {"prompt_tokens": -3, "completion_tokens": 1}}])
def test_a_reply_without_readable_usage_still_summarizes(llm_server: FakeLLM, extra) -> None:
    llm_server.reply_extra = extra
    out = LLMCompressor(base_url=llm_server.base_url, model="m1", keep_last=2).compress(
        transcript(), target_tokens=500, cancel=threading.Event()
    )
    assert out.usage is None and out[2].text.startswith(SUMMARY_PREFIX)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_compaction_records_the_compressors_usage(llm_server: FakeLLM, store_url: str) -> None:
    from actors import SessionRegistry
    from persistence import open_store

    llm_server.reply_extra = {"usage": {"prompt_tokens": 300, "completion_tokens": 20}}
    store = open_store(store_url)
    try:
        comp = LLMCompressor(base_url=llm_server.base_url, model="m1", keep_last=2)
        with SessionRegistry(store, compressor=comp) as registry:
            handle = registry.session("u")
            handle.append([*transcript()[:-1], Message("assistant", "last answer", usage=Usage(40, 9, "chat"))])
            outcome = handle.compress(force=True)
        assert outcome.record is not None and outcome.record.usage == Usage(300, 20, "m1")
        total = store.usage("u")
        assert (total.input_tokens, total.output_tokens, total.compactions) == (340, 29, Usage(300, 20))
        assert [m.usage for m in store.transcript("u")][-1] is None  # the carried copy records none
    finally:
        store.close()
