"""Messages: validated, immutable values in the OpenAI chat shape."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from ._checks import check_count, check_text, encode_json_bounded
from ._usage import Usage
from .errors import InvalidMessageError, InvalidSessionIdError

__all__ = [
    "DEFAULT_MAX_CONTENT_BYTES",
    "MAX_CONTENT_LIMIT",
    "MAX_KEY_LENGTH",
    "MAX_SESSION_ID_LENGTH",
    "ROLES",
    "SUMMARY_PREFIX",
    "Message",
    "MessageState",
    "Role",
    "StoredMessage",
    "content_limit",
    "is_real_user_ask",
    "message_key",
    "set_content_limit",
    "transcripts_equal",
    "validate_session_id",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
MessageState = Literal["live", "compacted", "superseded", "retracted", "pruned"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})
MESSAGE_STATES: frozenset[str] = frozenset({"live", "compacted", "superseded", "retracted", "pruned"})

DEFAULT_MAX_CONTENT_BYTES = 1024 * 1024
#: The largest per-message content limit that can be configured (256 MiB).
MAX_CONTENT_LIMIT = 256 * 1024 * 1024
MAX_SESSION_ID_LENGTH = 128
#: The longest idempotency key a message may carry (`Message.key`).
MAX_KEY_LENGTH = 200
#: Content of a summary message written by a compressor starts with this marker.
SUMMARY_PREFIX = "[CONTEXT COMPACTION]"

# Set only by the deprecated `set_content_limit`; None: stores apply their own
# ``max_content_bytes`` and a message is checked against `MAX_CONTENT_LIMIT` alone.
_limit: dict[str, int | None] = {"bytes": None}


def content_limit() -> int:
    """The per-message content limit in UTF-8 bytes a store applies when it was given
    no ``max_content_bytes`` (`DEFAULT_MAX_CONTENT_BYTES`)."""
    return _limit["bytes"] or DEFAULT_MAX_CONTENT_BYTES


def set_content_limit(nbytes: int | None) -> int | None:
    """Deprecated: pass ``max_content_bytes=`` to the store instead.

    Sets a process-wide per-message content limit, checked when a message is
    constructed and used by stores given no ``max_content_bytes``; None removes it.
    Returns the previous one (None when none was set), so that passing it back
    restores the state before. It will be removed in the next release.
    """
    warnings.warn(
        "set_content_limit() is deprecated: pass max_content_bytes= to the store", DeprecationWarning, stacklevel=2
    )
    if nbytes is not None:
        check_count(nbytes, "content limit", minimum=1, maximum=MAX_CONTENT_LIMIT)
    previous, _limit["bytes"] = _limit["bytes"], nbytes
    return previous


# Characters refused in session ids: controls (Cc), line and paragraph separators
# (Zl, Zp), bidi controls, U+200B and U+FEFF spoof logs and terminals; lone
# surrogates cannot be stored. The zero-width joiner (U+200D) stays allowed.
_FORBIDDEN_IN_ID = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if valid, else raise `InvalidSessionIdError`.

    1-128 characters, no leading or trailing whitespace, and none of: control
    characters, line or paragraph separators, bidi controls (U+061C, U+200E,
    U+200F, U+202A-U+202E, U+2066-U+2069), U+200B, U+FEFF.
    """
    if not isinstance(session_id, str) or not 1 <= len(session_id) <= MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(session_id)
    if session_id != session_id.strip() or _FORBIDDEN_IN_ID.search(session_id):
        raise InvalidSessionIdError(session_id)
    return session_id


def check_key(key: object) -> None:
    """An idempotency key (a message's or a turn's): 1-`MAX_KEY_LENGTH` characters, the session-id
    rules (`InvalidMessageError` otherwise)."""
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= MAX_KEY_LENGTH
        or key != key.strip()
        or _FORBIDDEN_IN_ID.search(key)
    ):
        shown = repr(key) if not isinstance(key, str) or len(key) <= 40 else repr(key[:40]) + "..."
        raise InvalidMessageError(
            f"key must be 1-{MAX_KEY_LENGTH} characters without surrounding whitespace or control characters, "
            f"got {shown}"
        )


# Built once: json.dumps with options builds a new encoder on every call, which
# was a large part of constructing a message.
_STRICT_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _check_json(value: Any, what: str) -> bytes:
    """Serialize ``value`` strictly (no NaN, valid UTF-8, at most 64 levels deep) or
    raise InvalidMessageError; returns the UTF-8 bytes a store would write."""
    try:
        return encode_json_bounded(_STRICT_JSON.encode, value, what, error=InvalidMessageError).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError: a lone surrogate
        raise InvalidMessageError(f"{what} is not JSON-able: {exc}") from exc


def _utf8_size(text: str, what: str) -> int:
    """Byte length of ``text``; a lone surrogate cannot be stored, so it is invalid."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(f"{what} is not valid Unicode: {exc}") from exc


def _check_id_text(value: object, what: str) -> None:
    check_text(value, what, allow_empty=True, error=InvalidMessageError)
    _utf8_size(value, what)  # type: ignore[arg-type]  # check_text made sure it is a str


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message. Validated at construction; raises `InvalidMessageError`.

    ``content`` is a string or a list of JSON-able dicts (multi-part content), or
    None for an assistant message with non-empty ``tool_calls`` (the OpenAI shape).
    ``meta`` is a JSON-able mapping for application data (not sent to a model by us);
    ``meta["synthetic"]`` marks a message our role-alternation fix must not treat as
    a real user ask. ``key`` is an optional idempotency key (1-200 characters, the
    session-id character rules; e.g. the platform's message id): an append of a
    message whose key the conversation already stored writes nothing and returns the
    stored message. ``usage`` is the optional `Usage` of the model call that wrote
    the message (a mapping of ``input_tokens``, ``output_tokens`` and ``model`` is
    converted); `Store.usage` sums it. Neither ``key`` nor ``usage`` counts in
    `transcripts_equal`.
    """

    role: Role
    content: str | list[dict[str, Any]] | None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    usage: Usage | None = None

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "role",
        "content",
        "name",
        "tool_call_id",
        "tool_calls",
        "meta",
        "key",
        "usage",
    )

    def __post_init__(self) -> None:
        if type(self.role) is not str or self.role not in ROLES:  # an unhashable role: typed too
            raise InvalidMessageError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        self._validate_content()
        # stored as text columns: no NUL (PostgreSQL cannot store it)
        if self.name is not None:
            _check_id_text(self.name, "name")
        if self.tool_call_id is not None:
            _check_id_text(self.tool_call_id, "tool_call_id")
        if self.tool_calls is not None:
            _check_json(self.tool_calls, "tool_calls")
        meta = self.meta
        if type(meta) is not dict and not isinstance(meta, Mapping):  # dict first: ABC checks are slow
            raise InvalidMessageError(f"meta must be a mapping, got {type(meta).__name__}")
        if meta:  # an empty mapping is valid JSON: nothing to check
            if any(not isinstance(k, str) for k in meta):
                raise InvalidMessageError("meta keys must be strings")
            _check_json(dict(meta), "meta")
        if self.key is not None:
            check_key(self.key)
        if self.usage is not None:  # a mapping becomes a Usage; a sum is refused
            object.__setattr__(self, "usage", Usage.coerce(self.usage))

    def _validate_content(self) -> None:
        content = self.content
        if type(content) is str and content.isascii():  # O(1); its UTF-8 size is its length
            size = len(content)
        elif isinstance(content, str):
            size = _utf8_size(content, "content")
        elif isinstance(content, list) and all(isinstance(part, dict) for part in content):
            # encoded once: the check and the size come from the same bytes
            size = len(_check_json(content, "content"))
        elif content is None:
            if not (self.role == "assistant" and self.tool_calls):
                raise InvalidMessageError("content may be None only for an assistant message with tool_calls")
            return
        else:
            raise InvalidMessageError(f"content must be a str or a list of dicts, got {type(content).__name__}")
        limit = _limit["bytes"] or MAX_CONTENT_LIMIT  # a store checks its own limit
        if size > limit:
            raise InvalidMessageError(f"content is {size} bytes, over the {limit}-byte limit")

    @property
    def text(self) -> str:
        """The content as plain text (text parts joined) for counting and display."""
        if isinstance(self.content, str):
            return self.content
        if self.content is None:
            return ""
        return "\n".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI chat shape; optional fields only when set, ``meta`` when non-empty."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        for attr in ("name", "tool_call_id", "tool_calls"):
            value = getattr(self, attr)
            if value is not None:
                out[attr] = value
        if self.meta:
            out["meta"] = dict(self.meta)
        if self.key is not None:
            out["key"] = self.key
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from the OpenAI chat shape.

        ``content: null`` stays None for an assistant message with tool calls (as
        OpenAI sends it) and becomes ``""`` for any other message.
        """
        if not isinstance(data, Mapping):
            raise InvalidMessageError(f"expected a mapping, got {type(data).__name__}")
        # Fields we do not model are refused rather than dropped, except empty ones
        # such as OpenAI's ``"refusal": null``, which carry nothing to lose.
        unknown = {k for k, v in data.items() if k not in cls._FIELDS and v is not None}
        if unknown:
            raise InvalidMessageError(f"unknown message fields: {sorted(unknown, key=repr)}")
        if "role" not in data:
            raise InvalidMessageError("message has no role")
        content = data.get("content")
        if content is None and not (data["role"] == "assistant" and data.get("tool_calls")):
            content = ""
        return Message(
            role=data["role"],
            content=content,
            name=data.get("name"),
            tool_call_id=data.get("tool_call_id"),
            tool_calls=data.get("tool_calls"),
            meta=data.get("meta") or {},
            key=data.get("key"),
            usage=data.get("usage"),
        )

    def as_message(self) -> Message:
        """This message without store fields."""
        return Message(*(getattr(self, f) for f in self._FIELDS))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage(Message):
    """A message as the store holds it: ``seq`` is unique per session across all states."""

    session_id: str
    seq: int
    id: int
    created_at: float
    state: MessageState = "live"
    origin_id: int | None = None

    def __post_init__(self) -> None:
        # Rows come from the store, which validated them on the way in; re-checking
        # here would make a lowered content limit break reads of old rows.
        pass

    @classmethod
    def _trusted(
        cls,
        role: str,
        content: Any,
        name: str | None,
        tool_call_id: str | None,
        tool_calls: Any,
        meta: Mapping[str, Any],
        session_id: str,
        seq: int,
        id: int,
        created_at: float,
        state: str,
        origin_id: int | None,
        key: str | None = None,
        usage: Usage | None = None,
    ) -> StoredMessage:
        """The value ``StoredMessage(...)`` builds from these fields, for the stores.

        Several times cheaper: the frozen dataclass ``__init__`` sets each field
        through ``object.__setattr__``; this sets the slots directly. Nothing is
        checked (neither is it by ``__init__``): the store's values are trusted.
        """
        message = _new(cls)
        _set_role(message, role)
        _set_content(message, content)
        _set_name(message, name)
        _set_tool_call_id(message, tool_call_id)
        _set_tool_calls(message, tool_calls)
        _set_meta(message, meta)
        _set_key(message, key)
        _set_usage(message, usage)
        _set_session_id(message, session_id)
        _set_seq(message, seq)
        _set_id(message, id)
        _set_created_at(message, created_at)
        _set_state(message, state)
        _set_origin_id(message, origin_id)
        return message


# The slot setters `StoredMessage._trusted` uses, in field order: a field added to
# the class fails this unpacking at import, and the contract suite compares every
# field of what a store returns with the database row it read or wrote.
_new = object.__new__
(
    _set_role,
    _set_content,
    _set_name,
    _set_tool_call_id,
    _set_tool_calls,
    _set_meta,
    _set_key,
    _set_usage,
    _set_session_id,
    _set_seq,
    _set_id,
    _set_created_at,
    _set_state,
    _set_origin_id,
) = (getattr(StoredMessage, f.name).__set__ for f in fields(StoredMessage))


def message_key(message: Message) -> tuple[Any, ...]:
    """The fields that make two messages equal (store fields ignored)."""
    return (
        message.role,
        _canonical(message.content),
        message.name,
        message.tool_call_id,
        _canonical(message.tool_calls),
        _canonical(dict(message.meta)),
    )


def _canonical(value: Any) -> Any:
    if isinstance(value, (str, int, type(None))) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return json.dumps(value, sort_keys=True, allow_nan=False)


def transcripts_equal(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Same length and pairwise-equal ``(role, content, name, tool_call_id, tool_calls, meta)``."""
    return len(a) == len(b) and all(message_key(x) == message_key(y) for x, y in zip(a, b))


def is_real_user_ask(message: Message) -> bool:
    """A user message that is neither a compaction summary nor marked synthetic."""
    return message.role == "user" and not message.text.startswith(SUMMARY_PREFIX) and not message.meta.get("synthetic")
