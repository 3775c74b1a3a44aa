"""`LLMCompressor` retries, configuration, proxies and secrets, against real servers on 127.0.0.1."""

from __future__ import annotations

import base64
import threading
import time
from email.utils import formatdate

import pytest

from actors import CompactionPolicy, SessionRegistry
from actors.compressors._llm import (
    MAX_BACKOFF_S,
    LLMCancelledError,
    LLMCompressor,
    LLMCompressorError,
    backoff_delay,
)
from persistence import open_store
from protocol import (
    SUMMARY_PREFIX,
    CompressionStatus,
    ConfigurationError,
    InvalidArgumentError,
    Message,
)
from tests.llm_server import FakeLLM, running_proxy

pytestmark = pytest.mark.timeout(60)

KEY = "sk-test-SECRET-4f9a2c"


def transcript() -> list[Message]:
    msgs = [Message("system", "s"), Message("user", "Plan a trip.")]
    msgs += [Message("assistant" if i % 2 == 0 else "user", f"turn {i}") for i in range(8)]
    return msgs + [Message("user", "last ask"), Message("assistant", "last answer")]


def compressor(server: FakeLLM, **kwargs) -> LLMCompressor:
    return LLMCompressor(base_url=server.base_url, model="m", api_key=KEY, keep_last=2, environ={}, **kwargs)


def run(comp: LLMCompressor, cancel: threading.Event | None = None):
    return comp.compress(transcript(), target_tokens=300, cancel=cancel or threading.Event())


@pytest.mark.parametrize("first", ["rate_limited", "error", "drop"])
def test_429_5xx_and_dropped_connections_are_retried(llm_server: FakeLLM, first: str) -> None:
    llm_server.script = [first, first]
    out = run(compressor(llm_server))
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert len(llm_server.requests) == 3


def test_retries_stop_after_max_retries(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "error"
    with pytest.raises(LLMCompressorError, match="HTTP 500") as info:
        run(compressor(llm_server, max_retries=2))
    assert info.value.status == 500
    assert len(llm_server.requests) == 3  # the first try and two retries
    llm_server.requests.clear()
    with pytest.raises(LLMCompressorError):
        run(compressor(llm_server, max_retries=0))
    assert len(llm_server.requests) == 1


def test_a_client_error_is_not_retried(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "echo"  # 401
    with pytest.raises(LLMCompressorError, match="HTTP 401"):
        run(compressor(llm_server))
    assert len(llm_server.requests) == 1


def test_retry_after_is_honoured(llm_server: FakeLLM) -> None:
    llm_server.script = ["rate_limited"]
    llm_server.retry_after = "1"
    run(compressor(llm_server))
    first, second = llm_server.arrival_times
    assert second - first >= 0.95


def test_cancel_stops_a_backoff_at_once(llm_server: FakeLLM) -> None:
    llm_server.behaviour = "rate_limited"
    llm_server.retry_after = "3600"  # capped to 60 s: the cancel must cut it short
    cancel = threading.Event()
    box: dict[str, BaseException] = {}

    def call() -> None:
        try:
            run(compressor(llm_server), cancel)
        except BaseException as exc:  # recorded for the assertions
            box["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    assert llm_server.arrived.wait(10)
    cancelled_at = time.monotonic()
    cancel.set()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - cancelled_at < 1.0
    assert isinstance(box["error"], LLMCancelledError)
    assert len(llm_server.requests) == 1


def test_backoff_delays() -> None:
    assert backoff_delay(0, "3600") == MAX_BACKOFF_S == 60.0
    assert backoff_delay(0, "2") == 2.0 and backoff_delay(5, "0") == 0.0
    now = time.time()
    assert 9 <= backoff_delay(0, formatdate(now + 10, usegmt=True), now=now) <= 10
    for attempt in range(4):  # jittered exponential: within [base/2, base] * 2**attempt
        delays = {backoff_delay(attempt, None) for _ in range(20)}
        assert all(0.25 * 2**attempt <= d <= 0.5 * 2**attempt for d in delays)
        assert len(delays) > 1  # jittered
    assert backoff_delay(30, "not a date") == MAX_BACKOFF_S
    with pytest.raises(InvalidArgumentError):
        LLMCompressor(base_url="http://127.0.0.1:1/v1", model="m", max_retries=-1, environ={})


# -- configuration -------------------------------------------------------------------------

OURS = {"SESSION_ACTORS_LLM_MODEL": "env-model"}


def authorization(server: FakeLLM) -> str | None:
    return server.headers_seen[-1].get("Authorization")


def test_our_variables_configure_everything(llm_server: FakeLLM) -> None:
    env = {
        **OURS,
        "SESSION_ACTORS_LLM_BASE_URL": llm_server.base_url,
        "SESSION_ACTORS_LLM_API_KEY": "ours",
        "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "OPENAI_API_KEY": "theirs",
    }
    run(LLMCompressor(environ=env))
    assert authorization(llm_server) == "Bearer ours"
    assert llm_server.requests[-1]["model"] == "env-model"


def test_openai_variables_are_the_fallback(llm_server: FakeLLM) -> None:
    env = {**OURS, "OPENAI_BASE_URL": llm_server.base_url, "OPENAI_API_KEY": "theirs"}
    run(LLMCompressor(environ=env))
    assert authorization(llm_server) == "Bearer theirs"


def test_the_openai_key_never_goes_to_our_host(llm_server: FakeLLM) -> None:
    env = {**OURS, "SESSION_ACTORS_LLM_BASE_URL": llm_server.base_url, "OPENAI_API_KEY": "theirs"}
    run(LLMCompressor(environ=env))
    assert authorization(llm_server) is None
    run(LLMCompressor(base_url=llm_server.base_url, environ=env))  # nor to an argument URL
    assert authorization(llm_server) is None


def test_environ_replaces_os_environ(llm_server: FakeLLM, monkeypatch) -> None:
    monkeypatch.setenv("SESSION_ACTORS_LLM_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("SESSION_ACTORS_LLM_MODEL", "m")
    assert LLMCompressor().model == "m"
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL"):
        LLMCompressor(environ={})
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")  # unreachable: must not be used
    run(LLMCompressor(environ={**OURS, "SESSION_ACTORS_LLM_BASE_URL": llm_server.base_url}))


# -- proxies ---------------------------------------------------------------------------------


def test_http_proxy_from_the_environment_is_used(llm_server: FakeLLM) -> None:
    with running_proxy() as proxy:
        proxied = proxy.url.replace("http://", "http://user:p%40ss@")
        env = {**OURS, "SESSION_ACTORS_LLM_BASE_URL": llm_server.base_url, "HTTP_PROXY": proxied}
        out = run(LLMCompressor(environ=env))
        assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)
        method, target, auth = proxy.seen[-1]
        assert (method, target) == ("POST", llm_server.base_url + "/chat/completions")
        assert auth == "Basic " + base64.b64encode(b"user:p@ss").decode()
        assert "Proxy-Authorization" not in llm_server.headers_seen[-1]
        bypass = {**env, "no_proxy": "localhost,127.0.0.1"}
        run(LLMCompressor(environ=bypass))
        assert len(proxy.seen) == 1 and len(llm_server.requests) == 2


def test_https_goes_through_a_connect_tunnel_and_errors_hold_no_credentials() -> None:
    with running_proxy() as proxy:
        env = {
            **OURS,
            "SESSION_ACTORS_LLM_BASE_URL": "https://llm.example.test:8443/v1",
            "https_proxy": proxy.url.replace("http://", "http://user:hunter2@"),
        }
        with pytest.raises(LLMCompressorError) as info:
            run(LLMCompressor(api_key=KEY, max_retries=0, environ=env))
        assert proxy.seen[0][:2] == ("CONNECT", "llm.example.test:8443")
        assert proxy.seen[0][2] == "Basic " + base64.b64encode(b"user:hunter2").decode()
        assert "hunter2" not in str(info.value) and KEY not in str(info.value)


def test_unsupported_proxy_schemes_are_configuration_errors() -> None:
    env = {**OURS, "SESSION_ACTORS_LLM_BASE_URL": "http://127.0.0.1:1/v1", "ALL_PROXY": "socks5://127.0.0.1:1080"}
    with pytest.raises(ConfigurationError, match="socks5"):
        LLMCompressor(environ=env)


# -- secrets ---------------------------------------------------------------------------------


def compact_once(store_url: str, comp):
    """One compaction of a fresh session: its outcome and the cooldown it left."""
    store = open_store(store_url)
    try:
        with SessionRegistry(store, compressor=comp, policy=CompactionPolicy(keep_last=2)) as registry:
            s = registry.session("secret")
            s.append(transcript())
            return s.compress(), store.cooldown(s.session_id)
    finally:
        store.close()


def test_an_echoed_key_never_reaches_the_outcome_or_the_cooldown(llm_server: FakeLLM, store_url: str) -> None:
    llm_server.behaviour = "echo"  # 401 with every request header in the body
    outcome, cooldown = compact_once(store_url, compressor(llm_server))
    assert outcome.status is CompressionStatus.FAILED and "401" in outcome.error
    assert "invalid_api_key" in outcome.error  # the cause is still named
    for text in (outcome.error, cooldown.error):
        for leaked in (KEY, "Bearer", "Authorization", "User-Agent", "session-actors"):
            assert leaked not in text, (leaked, text)


def test_credentials_in_any_compressor_error_are_masked(store_url: str) -> None:
    from actors.testing import ScriptedCompressor

    echo = RuntimeError(
        '401 from proxy: {"Authorization": "Bearer sk-live-123"}, api_key=sk-x Proxy-Authorization: Basic dXNlcjpwYXNz'
    )
    outcome, cooldown = compact_once(store_url, ScriptedCompressor(echo))
    assert outcome.status is CompressionStatus.FAILED and outcome.error.startswith("RuntimeError: 401")
    for text in (outcome.error, cooldown.error):
        for leaked in ("sk-live-123", "sk-x", "dXNlcjpwYXNz"):
            assert leaked not in text, (leaked, text)


def test_credentials_under_prefixed_names_are_masked(store_url: str) -> None:
    """SDK clients name the key with a prefix (``openai_api_key=...`` in a settings
    repr, ``OPENAI_API_KEY=`` from an environment dump, ``x-goog-api-key:``)."""
    from actors.testing import ScriptedCompressor

    echo = RuntimeError(
        "client settings openai_api_key=sk-live-123 OPENAI_API_KEY=sk-env-456 headers {'x-goog-api-key': 'AIza-789'}"
    )
    outcome, cooldown = compact_once(store_url, ScriptedCompressor(echo))
    assert outcome.status is CompressionStatus.FAILED and "client settings" in outcome.error
    for text in (outcome.error, cooldown.error):
        for leaked in ("sk-live-123", "sk-env-456", "AIza-789"):
            assert leaked not in text, (leaked, text)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": 8080},
        {"model": ["m"]},
        {"api_key": b"k"},
        {"environ": [("A", "b")]},
        {"max_retries": True},
        {"max_retries": 21},
        {"timeout_s": float("inf")},
    ],
)
def test_bad_arguments_are_typed_errors(kwargs) -> None:
    base = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "environ": {}}
    with pytest.raises(InvalidArgumentError):
        LLMCompressor(**{**base, **kwargs})
