"""`LLMCompressor`: summarize the middle of a transcript with an OpenAI-compatible model.

The result has the shape `HeadTailCompressor` produces (see `shape`): the leading system
prompt and the first real user ask are kept, the middle is replaced by one summary
message whose content starts with `SUMMARY_PREFIX`, and the kept tail stays verbatim.

The request is ``POST {base_url}/chat/completions`` over the standard library's
``http.client`` (no extra runtime dependency; see `transport`). A 429, a 5xx or a
dropped connection is retried up to ``max_retries`` times with jittered exponential
backoff that honours ``Retry-After`` (capped at 60 s); a set ``cancel`` stops it at
once, in flight or while backing off. Error texts never hold the key or any request
header, even when the endpoint echoes them back: they name the status and, at most, a
short error code from the reply.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from protocol import (
    SUMMARY_PREFIX,
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    Usage,
)
from protocol.errors import LLMCancelledError, LLMCompressorError, LLMTimeoutError

from ._base import Compressed
from ._shape import adopt_keep_last, split_transcript, summary_message
from ._transport import (
    Cancelled,
    Endpoint,
    Exchange,
    Failed,
    Reply,
    TimedOut,
    TooLarge,
    proxy_for,
)

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "LLMCancelledError",
    "LLMCompressor",
    "LLMCompressorError",
    "LLMTimeoutError",
]

log = logging.getLogger("session_actors.llm")

ENV_BASE_URL = "SESSION_ACTORS_LLM_BASE_URL"
ENV_MODEL = "SESSION_ACTORS_LLM_MODEL"
ENV_API_KEY = "SESSION_ACTORS_LLM_API_KEY"
#: The OpenAI SDK's variables: the fallback when ours are not set.
OPENAI_BASE_URL = "OPENAI_BASE_URL"
OPENAI_API_KEY = "OPENAI_API_KEY"

#: Messages kept verbatim at the end when neither the caller nor a policy says.
DEFAULT_KEEP_LAST = 6
DEFAULT_MAX_RETRIES = 3
#: Retries allowed at most (each waits up to `MAX_BACKOFF_S`).
_MAX_RETRIES_LIMIT = 20
#: First backoff before jitter; doubles per retry.
_BACKOFF_BASE_S = 0.5
#: No wait between tries is longer, whatever ``Retry-After`` says.
MAX_BACKOFF_S = 60.0
#: Characters per token of the rough budget we ask the model to stay under.
_CHARS_PER_TOKEN = 4
#: The smallest summary budget we request, however small ``target_tokens`` is.
_MIN_SUMMARY_TOKENS = 128
#: An error code from a reply is quoted only if it looks like one.
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")

_INSTRUCTIONS = (
    "You compact a chat transcript so the conversation can continue within a context budget. "
    "Write a faithful, dense summary of the conversation excerpt you are given: the user's goals, "
    "decisions made, facts and names established, tool results that matter, and open questions. "
    "Do not invent anything. Reply with the summary text only, in at most about {budget} tokens."
)


@dataclass(frozen=True, slots=True)
class _Config:
    base_url: str
    model: str
    api_key: str | None


def _resolve(base_url: str | None, model: str | None, api_key: str | None, env: Mapping[str, str]) -> _Config:
    """Arguments first, then ours, then the OpenAI SDK's variables.

    A key goes only to the base URL it was configured with: ``OPENAI_API_KEY`` only to
    ``OPENAI_BASE_URL``, ours only to our URL (or one given as an argument).
    """
    model = model or env.get(ENV_MODEL) or None
    if base_url:
        key = api_key or env.get(ENV_API_KEY) or None
    elif env.get(ENV_BASE_URL):
        base_url, key = env[ENV_BASE_URL], api_key or env.get(ENV_API_KEY) or None
    elif env.get(OPENAI_BASE_URL):
        base_url, key = env[OPENAI_BASE_URL], api_key or env.get(OPENAI_API_KEY) or None
    else:
        key = None
    if not base_url or not model:
        missing = [
            what
            for what, value in ((f"{ENV_BASE_URL} (or {OPENAI_BASE_URL})", base_url), (ENV_MODEL, model))
            if not value
        ]
        raise ConfigurationError(f"LLMCompressor needs a base URL and a model; set {' and '.join(missing)}")
    return _Config(base_url, model, key)


class LLMCompressor:
    """A `Compressor` backed by any OpenAI-compatible chat-completions endpoint.

    ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``), ``model`` and ``api_key`` come from
    the arguments, else ``SESSION_ACTORS_LLM_BASE_URL`` / ``_MODEL`` / ``_API_KEY``, else
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (a key only goes to the URL it came with).
    ``environ`` replaces ``os.environ`` for all of them and for the proxy variables
    (``http_proxy``, ``https_proxy``, ``all_proxy``, ``no_proxy``, either case). The key
    is optional (local servers rarely need one); no base URL or model is a
    `ConfigurationError`. ``timeout_s`` bounds one request; ``max_retries`` (0-20)
    retries after the first try; ``keep_last`` messages stay verbatim (the policy's
    when None). Stateless across calls.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        keep_last: int | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        for what, value in (("base_url", base_url), ("model", model), ("api_key", api_key)):
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(f"{what} must be a str or None, got {type(value).__name__}")
        if environ is not None and not isinstance(environ, Mapping):
            raise InvalidArgumentError(f"environ must be a mapping, got {type(environ).__name__}")
        env = os.environ if environ is None else environ
        config = _resolve(base_url, model, api_key, env)
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not math.isfinite(timeout_s)
            or not 0 < timeout_s <= 2_592_000
        ):
            raise InvalidArgumentError(f"timeout_s must be finite, > 0 and <= 30 days, got {timeout_s!r}")
        if keep_last is not None and (not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0):
            raise InvalidArgumentError(f"keep_last must be an int >= 0 or None, got {keep_last!r}")
        if (
            not isinstance(max_retries, int)
            or isinstance(max_retries, bool)
            or not 0 <= max_retries <= _MAX_RETRIES_LIMIT
        ):
            raise InvalidArgumentError(
                f"max_retries must be an int from 0 to {_MAX_RETRIES_LIMIT}, got {max_retries!r}"
            )
        self._endpoint = Endpoint.parse(config.base_url)
        self._proxy = proxy_for(self._endpoint, env)
        self.base_url = config.base_url
        self.model = config.model
        self._api_key = config.api_key
        self.timeout_s = float(timeout_s)
        self.keep_last = keep_last
        self.max_retries = max_retries

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def for_policy(self, policy: Any) -> LLMCompressor:
        """Adopt the policy's ``keep_last`` when none was given (see `bind_compressor`)."""
        return adopt_keep_last(self, policy)

    def __repr__(self) -> str:  # never shows the key
        return f"LLMCompressor(base_url={self.base_url!r}, model={self.model!r})"

    # -- the Compressor protocol ---------------------------------------------------

    def compress(self, messages: Sequence[Message], *, target_tokens: int, cancel: threading.Event) -> Compressed:
        """Return head + one summary message + the kept tail, with the reply's
        ``usage`` (its ``prompt_tokens`` and ``completion_tokens``, and its
        ``model``) when the endpoint reported one.

        A transcript with nothing between head and tail comes back unchanged.
        Raises `LLMCompressorError` (`LLMTimeoutError`, `LLMCancelledError`).
        """
        split = split_transcript(messages, self._keep_last())
        if not split.middle:
            return Compressed([*split.head, *split.tail])
        budget = self._summary_budget(split.head, split.tail, target_tokens)
        summary, usage = self._summarize(split.middle, budget, cancel)
        text = summary if summary.startswith(SUMMARY_PREFIX) else f"{SUMMARY_PREFIX}\n{summary}"
        return Compressed([*split.head, summary_message(text, split), *split.tail], usage)

    # -- shaping -------------------------------------------------------------------

    def _keep_last(self) -> int:
        return DEFAULT_KEEP_LAST if self.keep_last is None else self.keep_last

    @staticmethod
    def _summary_budget(head: list[Message], tail: list[Message], target_tokens: int) -> int:
        kept = sum(len(m.text) for m in (*head, *tail)) // _CHARS_PER_TOKEN
        return max(_MIN_SUMMARY_TOKENS, int(target_tokens) - kept)

    def _request_body(self, middle: list[Message], budget: int) -> bytes:
        excerpt = "\n\n".join(_render(m) for m in middle)
        payload = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": _INSTRUCTIONS.format(budget=budget)},
                {"role": "user", "content": excerpt},
            ],
            "max_tokens": budget,
            "temperature": 0,
            "stream": False,
        }
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")

    # -- the request, with retries ------------------------------------------------------

    def _summarize(self, middle: list[Message], budget: int, cancel: threading.Event) -> tuple[str, Usage | None]:
        body = self._request_body(middle, budget)
        for attempt in range(self.max_retries + 1):
            if cancel.is_set():
                raise LLMCancelledError("summary request cancelled")
            reply, error, retry_after = self._try_once(body, cancel)
            if reply is not None:
                return _parse_summary(reply.body), _parse_usage(reply.body, self.model)
            if retry_after is None or attempt == self.max_retries:
                raise error
            delay = backoff_delay(attempt, retry_after)
            log.info("LLM request failed (%s); retry %d of %d in %.2fs", error, attempt + 1, self.max_retries, delay)
            if cancel.wait(delay):
                raise LLMCancelledError("summary request cancelled while backing off")
        raise AssertionError("unreachable")  # the loop returns or raises

    def _try_once(self, body: bytes, cancel: threading.Event) -> tuple[Reply | None, LLMCompressorError, str | None]:
        """(reply, _, _) on success; else (None, error, Retry-After or "" if retryable)."""
        exchange = Exchange(self._endpoint, self._headers(len(body)), body, self.timeout_s, self._proxy)
        try:
            reply = exchange.run(cancel)
        except Cancelled:
            raise LLMCancelledError("summary request cancelled while in flight") from None
        except TimedOut:
            raise LLMTimeoutError(f"LLM endpoint did not answer within {self.timeout_s:g}s") from None
        except TooLarge:
            raise LLMCompressorError("LLM reply is over the size limit") from None
        except Failed as exc:
            error = LLMCompressorError(f"LLM request failed: {exc}")
            return None, error, "" if exc.retryable else None
        if 200 <= reply.status < 300:
            return reply, LLMCompressorError(), None
        error = LLMCompressorError(self._status_text(reply), status=reply.status)
        retryable = reply.status == 429 or 500 <= reply.status <= 599
        return None, error, (reply.retry_after or "") if retryable else None

    def _status_text(self, reply: Reply) -> str:
        """The status and, if the reply has one, a short error code: never its text,
        which may echo our headers or the key."""
        text = f"LLM endpoint answered HTTP {reply.status}"
        code = _error_code(reply.body)
        secrets = [s for s in (self._api_key, self._proxy and self._proxy.secret) if s]
        if code is not None and not any(code in s or s in code for s in secrets):
            text += f" ({code})"
        return text

    def _headers(self, length: int) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Content-Length": str(length),
            "User-Agent": "session-actors",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers


def backoff_delay(attempt: int, retry_after: str | None, *, now: float | None = None) -> float:
    """Seconds to wait before retry ``attempt + 1``: ``Retry-After`` when the endpoint
    gave one (seconds or an HTTP date), else jittered exponential; at most 60 s."""
    wait = _parse_retry_after(retry_after, time.time() if now is None else now)
    if wait is None:
        wait = _BACKOFF_BASE_S * (2 ** min(attempt, 16)) * random.uniform(0.5, 1.0)
    return max(0.0, min(wait, MAX_BACKOFF_S))


def _parse_retry_after(value: str | None, now: float) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - now
    return seconds if math.isfinite(seconds) else None


def _error_code(raw: bytes) -> str | None:
    """``error.code`` or ``error.type`` of an OpenAI-shaped error body, if identifier-like."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    error = document.get("error") if isinstance(document, dict) else None
    candidates = [error.get("code"), error.get("type")] if isinstance(error, dict) else [error]
    for candidate in candidates:
        if isinstance(candidate, str) and _ERROR_CODE.match(candidate):
            return candidate
    return None


def _render(message: Message) -> str:
    label = message.role if not message.name else f"{message.role} ({message.name})"
    text = message.text
    if message.tool_calls:
        text = f"{text}\n[tool calls] {json.dumps(message.tool_calls, ensure_ascii=False)}"
    return f"{label}: {text}"


def _parse_summary(raw: bytes) -> str:
    """``choices[0].message.content`` as non-empty text, else `LLMCompressorError`."""
    try:
        document: Any = json.loads(raw.decode("utf-8"))
        content = document["choices"][0]["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise LLMCompressorError(
            f"malformed reply from the LLM endpoint (expected choices[0].message.content): {exc!r}"
        ) from exc
    if isinstance(content, list):  # multi-part content: keep the text parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise LLMCompressorError("malformed reply from the LLM endpoint: empty summary")
    return content.strip()


def _parse_usage(raw: bytes, model: str) -> Usage | None:
    """The reply's ``usage`` as a `Usage` with the model that answered (else the one
    asked for; neither if no name is valid). None when it has no readable counts: a
    summary is never refused for its usage."""
    try:
        document = json.loads(raw.decode("utf-8"))
        counts = (document["usage"]["prompt_tokens"], document["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return None
    for name in [n for n in (document.get("model"), model) if n] + [None]:
        try:
            return Usage(*counts, name)
        except InvalidMessageError:  # a bad name, or bad counts (then every name fails)
            continue
    log.debug("the LLM reply's usage is unreadable: %r", counts)
    return None
