"""`ResponsesCompactCompressor` with the real ``openai`` client against a real stub of
``POST /v1/responses/compact`` on 127.0.0.1, directly and through a registry."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

from protocol import (
    CompressionStatus,
    ConfigurationError,
    InvalidArgumentError,
    Message,
    Usage,
)
from tests.llm_server import FakeLLM

from ..helpers import result_of, run_in_thread

openai = pytest.importorskip("openai", reason="the openai-agents extra is not installed")

from actors.compressors import Compressed, ResponsesCompactCompressor  # noqa: E402
from actors.compressors._responses_compact import ENV_MODEL  # noqa: E402
from protocol.errors import LLMCompressorError, LLMTimeoutError  # noqa: E402

pytestmark = pytest.mark.timeout(60)

KEY = "sk-secret-123"


def client(server: FakeLLM, **kwargs: Any) -> Any:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, **kwargs)


def compress(compressor: ResponsesCompactCompressor, messages: list[Message]) -> Compressed:
    return asyncio.run(compressor.compress(messages, target_tokens=100, cancel=threading.Event()))


def transcript() -> list[Message]:
    return [
        Message("system", "Be brief."),
        Message("user", "Plan a trip to Lisbon."),
        Message("assistant", "Which month?"),
        Message("user", "May.", meta={"channel": "discord"}),
        Message("assistant", "Booked a hotel."),
        Message("user", "last ask"),
        Message("assistant", "last answer"),
    ]


def test_the_head_and_middle_are_sent_and_the_reply_replaces_the_middle(llm_server: FakeLLM) -> None:
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=2)
    messages = transcript()
    out = compress(compressor, messages)

    (request,) = llm_server.requests
    assert request["path"] == "/v1/responses/compact"
    assert request["model"] == "gpt-test"
    assert [item["content"] for item in request["input"]] == [m.content for m in messages[:5]]  # tail not sent
    assert list(out[:2]) == messages[:2]  # the head as it was
    assert out[2] == messages[3]  # a middle user message as stored, its meta included
    compaction = out[3]
    assert compaction.role == "assistant"
    assert compaction.meta["agents_item"] == {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc-1"}
    assert compaction.meta["synthetic"] is True
    assert list(out[4:]) == messages[-2:]
    assert len(out) == 6
    assert out.usage == Usage(500, 7, "gpt-test")
    assert compressor.name == "responses-compact:gpt-test"
    assert KEY not in repr(compressor)


def test_a_transcript_with_no_middle_comes_back_unchanged_without_a_request(llm_server: FakeLLM) -> None:
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=6)
    messages = transcript()[:3]
    out = compress(compressor, messages)
    assert list(out) == messages
    assert llm_server.requests == []


def test_a_synchronous_client_is_called_off_the_event_loop(llm_server: FakeLLM) -> None:
    sync = openai.OpenAI(base_url=llm_server.base_url, api_key=KEY, max_retries=0)
    try:
        out = compress(ResponsesCompactCompressor(sync, "gpt-test", keep_last=2), transcript())
    finally:
        sync.close()
    assert any(m.meta.get("agents_item", {}).get("type") == "compaction" for m in out)
    assert out.usage is not None and out.usage.input_tokens == 500


@pytest.mark.parametrize(
    ("behaviour", "status", "code"),
    [("error", 500, None), ("rate_limited", 429, "rate_limit_exceeded"), ("echo", 401, "invalid_api_key")],
)
def test_an_error_status_is_typed_and_never_carries_the_key(llm_server: FakeLLM, behaviour, status, code) -> None:
    llm_server.behaviour = behaviour
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=2)
    with pytest.raises(LLMCompressorError) as raised:
        compress(compressor, transcript())
    assert raised.value.status == status
    assert KEY not in str(raised.value) and "Bearer" not in str(raised.value)
    assert raised.value.__cause__ is None  # the client's exception, with its request, is not chained
    if code:
        assert f"({code})" in str(raised.value)


def test_a_reply_without_a_compaction_item_fails(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "malformed"
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=2)
    with pytest.raises(LLMCompressorError, match="no compaction item"):
        compress(compressor, transcript())


def test_a_slow_endpoint_times_out(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "slow"
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=2, timeout_s=0.3)
    with pytest.raises(LLMTimeoutError, match=r"0\.3s"):
        compress(compressor, transcript())


def test_configuration_errors_are_typed(llm_server: FakeLLM, monkeypatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    with pytest.raises(ConfigurationError, match=ENV_MODEL):
        ResponsesCompactCompressor(client(llm_server))
    monkeypatch.setenv(ENV_MODEL, "env-model")
    assert ResponsesCompactCompressor(client(llm_server)).name == "responses-compact:env-model"
    for bad in ({"keep_last": -1}, {"keep_last": True}, {"timeout_s": 0}, {"timeout_s": float("inf")}):
        with pytest.raises(InvalidArgumentError):
            ResponsesCompactCompressor(client(llm_server), **bad)
    with pytest.raises(InvalidArgumentError, match=r"responses\.compact"):
        ResponsesCompactCompressor(object(), "gpt-test")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OpenAI client"):
        ResponsesCompactCompressor(None, "gpt-test")


def test_without_the_openai_client_construction_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # the fault: "not installed"
    with pytest.raises(ConfigurationError, match=r"session-actors\[openai-agents\]"):
        ResponsesCompactCompressor(None, "gpt-test")


# -- through a registry, on every backend ------------------------------------------------------


def test_a_registry_compaction_commits_it_with_usage_and_interrupt_cancels_it(make_registry, llm_server) -> None:
    compressor = ResponsesCompactCompressor(client(llm_server), "gpt-test", keep_last=2)
    registry = make_registry(compressor, merge_user_messages=False)
    handle = registry.session("rc")
    handle.append(transcript())

    outcome = handle.compress()
    assert outcome.status is CompressionStatus.COMPACTED, outcome
    assert outcome.record is not None
    assert outcome.record.compressor == "responses-compact:gpt-test"
    assert outcome.record.usage == Usage(500, 7, "gpt-test")
    live = handle.transcript()
    assert [m.meta.get("agents_item", {}).get("id") for m in live].count("cmp_1") == 1

    llm_server.behaviour = "slow"
    handle.append([Message("user", "more"), Message("assistant", "and more")])
    llm_server.arrived.clear()
    thread, box = run_in_thread(lambda: handle.compress(force=True))
    assert llm_server.arrived.wait(10)
    handle.interrupt()
    cancelled = result_of(thread, box)
    assert cancelled.status is CompressionStatus.CANCELLED, cancelled
    assert [m.content for m in handle.transcript()] == [m.content for m in live] + ["more", "and more"]
