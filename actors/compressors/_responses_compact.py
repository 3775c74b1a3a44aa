"""`ResponsesCompactCompressor`: OpenAI's ``responses.compact`` as a compressor.

It runs where every compressor runs: inside the attempt's lease, its result committed
by the fenced commit, so nothing another path appends meanwhile is lost (the SDK's own
compaction session clears the session and re-adds outside any guard).

The transcript keeps the shape the other compressors give it (see `shape`): the head
(system prompt and first real ask) and the kept tail stay as they are. The head and the
middle go to ``responses.compact`` as Responses input items (`message_to_items`, so a
stored item is sent exactly as it came, an earlier compaction item included); the
reply is every user message followed by one opaque ``compaction`` item. A user message
that repeats one of the head's is dropped (the head is kept), one that repeats a
middle message is that message as stored, and the compaction item is stored whole in
``meta["agents_item"]``, so `AgentsSession.get_items()` returns it exactly and the
next compaction sends it back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import ConfigurationError, InvalidArgumentError, InvalidMessageError, Message, Usage
from protocol._response_items import item_to_message, message_to_items
from protocol.errors import LLMCancelledError, LLMCompressorError, LLMTimeoutError

from ._base import Compressed
from ._shape import adopt_keep_last, split_transcript

__all__ = ["ResponsesCompactCompressor"]

log = logging.getLogger("session_actors.llm")

#: Read when no ``model`` is given (as `LLMCompressor` reads it).
ENV_MODEL = "SESSION_ACTORS_LLM_MODEL"
DEFAULT_KEEP_LAST = 6
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class ResponsesCompactCompressor:
    """A `Compressor` that compacts with OpenAI's ``responses.compact``.

    ``client`` is an ``openai.AsyncOpenAI`` (used on the registry's event loop) or an
    ``openai.OpenAI`` (called in a worker thread); None builds an ``AsyncOpenAI`` from
    the ``OPENAI_*`` variables. ``model`` falls back to ``SESSION_ACTORS_LLM_MODEL``.
    ``keep_last`` messages stay verbatim (the policy's when None); ``timeout_s`` bounds
    one request (the client's own ``max_retries`` applies). Use it with
    ``CompactionPolicy(merge_user_messages=False)``: the Responses API needs no role
    alternation, and unmerged user messages keep their items.
    """

    def __init__(
        self,
        client: Any = None,
        model: str | None = None,
        *,
        keep_last: int | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        if model is not None and not isinstance(model, str):
            raise InvalidArgumentError(f"model must be a str or None, got {type(model).__name__}")
        model = model or os.environ.get(ENV_MODEL) or None
        if not model:
            raise ConfigurationError(f"ResponsesCompactCompressor needs a model; pass model= or set {ENV_MODEL}")
        if keep_last is not None and (not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0):
            raise InvalidArgumentError(f"keep_last must be an int >= 0 or None, got {keep_last!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 2_592_000:
            raise InvalidArgumentError(f"timeout_s must be finite, > 0 and <= 30 days, got {timeout_s!r}")
        if not math.isfinite(timeout_s):
            raise InvalidArgumentError(f"timeout_s must be finite, got {timeout_s!r}")
        self._openai = _import_openai()
        self._client = client if client is not None else _default_client(self._openai)
        if not callable(getattr(getattr(self._client, "responses", None), "compact", None)):
            raise InvalidArgumentError("client must be an openai.OpenAI or openai.AsyncOpenAI (no responses.compact)")
        self.model = model
        self.keep_last = keep_last
        self.timeout_s = float(timeout_s)

    @property
    def name(self) -> str:
        return f"responses-compact:{self.model}"

    def for_policy(self, policy: Any) -> ResponsesCompactCompressor:
        """Adopt the policy's ``keep_last`` when none was given (see `bind_compressor`)."""
        return adopt_keep_last(self, policy)

    def __repr__(self) -> str:  # the client holds the key: never shown
        return f"ResponsesCompactCompressor(model={self.model!r})"

    async def compress(self, messages: Sequence[Message], *, target_tokens: int, cancel: threading.Event) -> Compressed:
        """Head + the reply's new items + the kept tail, with the reply's usage.

        A transcript with nothing between head and tail comes back unchanged. Raises
        `LLMCompressorError` (`LLMTimeoutError`, `LLMCancelledError`).
        """
        split = split_transcript(messages, DEFAULT_KEEP_LAST if self.keep_last is None else self.keep_last)
        if not split.middle:
            return Compressed([*split.head, *split.tail])
        if cancel.is_set():
            raise LLMCancelledError("responses.compact request cancelled")
        sent = [item for message in (*split.head, *split.middle) for item in message_to_items(message)]
        reply = await self._request(sent)
        kept = _reply_messages(_output_items(reply), split.head, split.middle)
        return Compressed([*split.head, *kept, *split.tail], _usage(reply, self.model))

    async def _request(self, items: list[dict[str, Any]]) -> Any:
        compact = self._client.responses.compact
        arguments = {"model": self.model, "input": items, "timeout": self.timeout_s}
        try:
            if inspect.iscoroutinefunction(compact):
                return await compact(**arguments)
            return await asyncio.to_thread(compact, **arguments)
        except self._openai.APITimeoutError:
            raise LLMTimeoutError(f"responses.compact did not answer within {self.timeout_s:g}s") from None
        except self._openai.APIStatusError as exc:
            raise LLMCompressorError(self._status_text(exc), status=exc.status_code) from None
        except self._openai.APIConnectionError:
            raise LLMCompressorError("responses.compact: the endpoint could not be reached") from None
        except self._openai.OpenAIError as exc:  # message texts may quote the request
            raise LLMCompressorError(f"responses.compact failed ({type(exc).__name__})") from None

    def _status_text(self, exc: Any) -> str:
        """The status and a short error code: never the reply's text, which may echo the key."""
        text = f"responses.compact answered HTTP {exc.status_code}"
        code = getattr(exc, "code", None)
        key = getattr(self._client, "api_key", None) or ""
        if isinstance(code, str) and _ERROR_CODE.match(code) and not (key and (code in key or key in code)):
            text += f" ({code})"
        return text


def _import_openai() -> Any:
    try:
        import openai
    except ImportError:
        raise ConfigurationError(
            "ResponsesCompactCompressor needs the openai client: pip install 'session-actors[openai-agents]'"
        ) from None
    return openai


def _default_client(openai: Any) -> Any:
    try:
        return openai.AsyncOpenAI()
    except openai.OpenAIError as exc:  # no key configured: say so without echoing anything
        raise ConfigurationError(f"ResponsesCompactCompressor could not build an OpenAI client: {exc}") from None


def _output_items(reply: Any) -> list[dict[str, Any]]:
    """The reply's output as plain item dicts, checked for its one compaction item."""
    output = getattr(reply, "output", None)
    if not isinstance(output, list):
        raise LLMCompressorError("malformed reply from responses.compact: no output list")
    items = [item if isinstance(item, Mapping) else _dump(item) for item in output]
    if not any(item.get("type") == "compaction" for item in items):
        raise LLMCompressorError("malformed reply from responses.compact: no compaction item")
    return [dict(item) for item in items]


def _dump(item: Any) -> dict[str, Any]:
    # The reply's user messages carry input_text parts the output model's literal
    # types do not expect: dump without pydantic's warnings, only the fields sent.
    try:
        return item.model_dump(mode="json", exclude_unset=True, warnings=False)
    except AttributeError:
        raise LLMCompressorError(f"malformed reply from responses.compact: a {type(item).__name__} item") from None


def _reply_messages(items: list[dict[str, Any]], head: list[Message], middle: list[Message]) -> list[Message]:
    """The reply's items as messages: head asks dropped, middle ones as they were stored."""
    head_texts = [_user_text(m) for m in head if m.role == "user"]
    middle_users = [m for m in middle if m.role == "user"]
    reasoning = any(item.get("type") == "reasoning" for item in items)
    kept: list[Message] = []
    for item in items:
        try:
            if _is_user(item):
                text = _user_text(item)
                if text in head_texts:
                    head_texts.remove(text)
                    continue
                stored = next((m for m in middle_users if _user_text(m) == text), None)
                if stored is not None:
                    middle_users.remove(stored)
                kept.append(stored if stored is not None else Message("user", text))
            elif item.get("type") == "compaction":
                message = item_to_message(item)
                kept.append(dataclasses.replace(message, meta={**message.meta, "synthetic": True, "compaction": True}))
            else:
                kept.append(item_to_message(_without_orphan_id(item, reasoning)))
        except InvalidMessageError as exc:
            raise LLMCompressorError(f"malformed item from responses.compact: {exc}") from None
    return kept


def _is_user(item: Mapping[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _user_text(source: Message | Mapping[str, Any]) -> str:
    content = source.content if isinstance(source, Message) else source.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _without_orphan_id(item: dict[str, Any], reasoning: bool) -> dict[str, Any]:
    """An assistant message's ``id`` names the reasoning item it followed; without that
    item in the reply, sending the id back is refused by the API, so it goes."""
    if reasoning or item.get("role") != "assistant" or "id" not in item:
        return item
    return {k: v for k, v in item.items() if k != "id"}


def _usage(reply: Any, model: str) -> Usage | None:
    """The reply's token counts; None when unreadable (a compaction is never refused for it)."""
    usage = getattr(reply, "usage", None)
    try:
        return Usage(int(usage.input_tokens), int(usage.output_tokens), model)  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError, InvalidMessageError):
        log.debug("responses.compact reported no readable usage")
        return None
