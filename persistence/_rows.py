"""Conversions between protocol values and database rows, shared by every backend.

Rows are mappings (``sqlite3.Row``, psycopg ``dict_row``); JSON columns hold text.
Input checks live here too, so every backend rejects the same bad input the
same way, before it writes anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    MODES,
    CompactionRecord,
    Cooldown,
    DeadTurnError,
    InvalidArgumentError,
    InvalidMessageError,
    Lease,
    Message,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    TranscriptError,
    TurnHeldError,
    TurnLease,
    TurnLostError,
    Usage,
    validate_session_id,
)
from protocol._checks import (
    check_count,
    check_duration,
    check_text,
    encode_json_bounded,
)
from protocol._messages import (
    MAX_CONTENT_LIMIT,
    MAX_SESSION_ID_LENGTH,
    ROLES,
    check_key,
    content_limit,
)
from protocol._turns import SEAL_MODES
from protocol._usage import usage_from_json, usage_json

from ._metadata import check_metadata, metadata_from_column

#: A database row as the backends hand it over: psycopg's dict rows or ``sqlite3.Row``.
RowLike = Mapping[str, Any] | sqlite3.Row

__all__ = [
    "check_commit_args",
    "check_cooldown_error",
    "check_cooldown_seconds",
    "check_incarnation",
    "check_lease",
    "check_messages",
    "check_open_flags",
    "check_snapshot",
    "check_store_options",
    "check_ttl",
    "check_watermark",
    "checked_session_id",
    "compaction_from_row",
    "cooldown_from_row",
    "derive_child_id",
    "lease_from_row",
    "message_params",
    "new_incarnation",
    "other_incarnation",
    "session_from_row",
    "stored_from_params",
    "stored_message_from_row",
]


#: The largest integer both backends store (a 64-bit signed INTEGER / bigint).
MAX_SQL_INT = 2**63 - 1

# One prebuilt encoder: json.dumps with options builds a new encoder per call,
# which is most of the cost of an append on the caller's side.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
_DECODER = json.JSONDecoder()


def _dumps(value: Any, what: str, *, utf8_checked: bool = False) -> str:
    try:
        if utf8_checked:  # a str already checked: no depth to bound, no lone surrogate
            return _ENCODER.encode(value)
        # a container (mutable after the Message was built): bound its depth
        text = encode_json_bounded(_ENCODER.encode, value, what, error=InvalidMessageError)
        text.encode("utf-8")  # lone surrogates cannot be stored as text
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(f"{what} is not storable JSON: {exc}") from exc
    return text


def _content_json(message: Message, limit: int) -> str:
    """The content as JSON text, checked for shape, encodability and size."""
    content = message.content
    if type(content) is str:
        return _text_json(content, limit)
    if content is None and message.role == "assistant" and message.tool_calls:
        return "null"  # the OpenAI shape of a tool-call message: round-trips as null
    if isinstance(content, str):  # a str subclass: the general path
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(f"content is not valid UTF-8 text: {exc}") from exc
        text = _dumps(content, "content", utf8_checked=True)
    elif isinstance(content, list) and all(isinstance(p, dict) for p in content):
        text = _dumps(content, "content")
        size = len(text.encode("utf-8"))
    else:
        raise InvalidMessageError(f"content must be a str or a list of dicts, got {type(content).__name__}")
    if size > limit:
        raise InvalidMessageError(f"content is {size} bytes, over the store's {limit}-byte limit")
    return text


#: Every byte JSON escapes in a string (a control character below 0x20, '"' or
#: '\\') maps to 0x80, every other ASCII byte to itself: ASCII text still ASCII
#: after this translation needs no escape. ``str.isprintable`` answered the same
#: (DEL aside, which JSON leaves as it is) at twice the cost: it looks each
#: character up in the Unicode database (0.64 vs 0.38 us for 220 characters here).
_ESCAPED_TO_HIGH = bytes(0x80 if byte < 0x20 or byte in b'"\\' else byte for byte in range(256))


def _text_json(content: str, limit: int) -> str:
    """Text content as a JSON string, size-checked: the encoder's exact output.

    Most content is ASCII with nothing to escape (no quote, backslash or control
    character): its JSON is the text in quotes and its UTF-8 size its length, found
    with two C passes over its bytes (`_ESCAPED_TO_HIGH`) instead of the encoder's
    character-by-character loop.
    """
    if content.isascii():  # O(1): a flag of the str object
        size = len(content)
        if content.encode().translate(_ESCAPED_TO_HIGH).isascii():
            text = '"' + content + '"'
        else:
            text = _ENCODER.encode(content)
    else:
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate cannot be stored as text
            raise InvalidMessageError(f"content is not valid UTF-8 text: {exc}") from exc
        text = _ENCODER.encode(content)
    if size > limit:
        raise InvalidMessageError(f"content is {size} bytes, over the store's {limit}-byte limit")
    return text


def message_params(message: Message, max_content_bytes: int | None) -> dict[str, Any]:
    """The column values of ``message``; re-validates what a store must not trust.

    Raises: `InvalidMessageError` for a non-Message, a bad role, content that is
    not a str or a list of dicts, non-JSON values, or content over the limit.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
    role, content, name, tool_call_id, tool_calls, meta = (
        message.role,
        message.content,
        message.name,
        message.tool_call_id,
        message.tool_calls,
        message.meta,
    )
    if type(role) is not str or role not in ROLES:
        raise InvalidMessageError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    if name is not None:
        check_text(name, "name", allow_empty=True, error=InvalidMessageError)
    if tool_call_id is not None:
        check_text(tool_call_id, "tool_call_id", allow_empty=True, error=InvalidMessageError)
    if type(meta) is not dict and not isinstance(meta, Mapping):  # dict first: ABC checks are slow
        raise InvalidMessageError("meta must be a mapping")
    limit = content_limit() if max_content_bytes is None else max_content_bytes
    # plain text, most messages: straight to its fast path (one call less per append)
    text = _text_json(content, limit) if type(content) is str else _content_json(message, limit)
    return {
        "role": role,
        "content": text,
        "name": name,
        "tool_call_id": tool_call_id,
        "tool_calls": None if tool_calls is None else _dumps(tool_calls, "tool_calls"),
        "meta": _dumps(dict(meta), "meta") if meta else "{}",
        "key": None if message.key is None else _checked_key(message.key),
        "usage": None if message.usage is None else usage_json(_checked_usage(message.usage, InvalidMessageError)),
    }


def _checked_usage(usage: object, error: type[TranscriptError]) -> Usage:
    """A recorded call's usage, checked again (a frozen value can still be forged)."""
    try:
        checked = Usage.coerce(usage)
        return Usage(checked.input_tokens, checked.output_tokens, checked.model)
    except InvalidMessageError as exc:
        raise error(str(exc)) from None


def check_usage(usage: object) -> str | None:
    """A `commit_compaction` ``usage`` argument (None, a `Usage` or a mapping) as its
    column text; `InvalidArgumentError` if it is not a recorded call's usage."""
    return None if usage is None else usage_json(_checked_usage(usage, InvalidArgumentError))


def _checked_key(key: str) -> str:
    check_key(key)
    return key


def check_messages(messages: Message | Sequence[Message], max_content_bytes: int | None) -> list[dict[str, Any]]:
    """Normalize one message or a sequence of them to column values (all checked first)."""
    if isinstance(messages, Message):
        return [message_params(messages, max_content_bytes)]
    kind = type(messages)
    if (
        kind is not list
        and kind is not tuple
        and (isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence))
    ):
        raise InvalidMessageError(f"expected a Message or a sequence of them, got {type(messages).__name__}")
    if len(messages) == 1:  # most appends: no comprehension (a frame of its own) for one
        return [message_params(messages[0], max_content_bytes)]
    return [message_params(m, max_content_bytes) for m in messages]


def check_new_sessions(session_ids: object, source: object, metadata: object) -> tuple[list[str], str]:
    """A `create_sessions` call's arguments: its ids (`checked_new_ids`) and the
    metadata's column text."""
    ids = checked_new_ids(session_ids)
    check_text(source, "source")
    return ids, check_metadata(metadata)


def checked_new_ids(session_ids: object) -> list[str]:
    """The ids of a `create_sessions` call: a sequence (not a str) of valid ids, each
    once (`SessionExistsError` for the first given twice)."""
    if isinstance(session_ids, (str, bytes)) or not isinstance(session_ids, Sequence):
        raise InvalidArgumentError(f"session_ids must be a sequence of session ids, got {type(session_ids).__name__}")
    ids = [checked_session_id(sid) for sid in session_ids]
    seen: set[str] = set()
    for sid in ids:
        if sid in seen:
            raise SessionExistsError(sid)
        seen.add(sid)
    return ids


def checked_session_id(session_id: object) -> str:
    """`validate_session_id`, remembered for valid strings: hot paths see the same
    few ids over and over, and the check walks every character."""
    if type(session_id) is not str:
        return validate_session_id(session_id)  # raises
    return _valid_session_id(session_id)


@functools.lru_cache(maxsize=4096)
def _valid_session_id(session_id: str) -> str:
    return validate_session_id(session_id)  # an invalid id raises: never cached


def check_open_flags(**flags: object) -> None:
    """The on/off options of a store constructor (``readonly``, ``migrate``, ...) are bools."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


def check_store_options(*, patience_s: object, max_content_bytes: object) -> None:
    """Options every backend takes: ``patience_s`` a duration (0: never wait) and
    ``max_content_bytes`` None or 1 byte to `MAX_CONTENT_LIMIT`."""
    check_duration(patience_s, "patience_s", allow_zero=True)
    if max_content_bytes is not None:
        check_count(max_content_bytes, "max_content_bytes", minimum=1, maximum=MAX_CONTENT_LIMIT)


def check_ttl(ttl_s: object) -> float:
    """A lease TTL: finite, > 0 and at most 30 days, else `InvalidArgumentError`."""
    return check_duration(ttl_s, "ttl_s")


def check_turn(lease: object) -> int:
    """A `TurnLease` argument; its token."""
    if not isinstance(lease, TurnLease):
        raise InvalidArgumentError(f"expected a TurnLease, got {type(lease).__name__}")
    return lease.token


def check_token(token: object) -> None:
    """A turn token argument: None or a positive int."""
    if token is not None and (type(token) is not int or token < 1):
        raise InvalidArgumentError(f"a turn token is a positive int, got {token!r}")


def keyed(params: Sequence[Mapping[str, Any]]) -> bool:
    """Does a message of the append carry an idempotency key?"""
    for p in params:
        if p["key"] is not None:
            return True
    return False


def check_lease(lease: object) -> Lease:
    """A `Lease` whose fields can be sent to a database (a forged one may not)."""
    if not isinstance(lease, Lease):
        raise InvalidArgumentError(f"expected a Lease, got {type(lease).__name__}")
    validate_session_id(lease.session_id)
    check_text(lease.holder, "lease holder")
    check_count(lease.token, "lease token", maximum=MAX_SQL_INT)
    return lease


def check_cooldown_seconds(seconds: object) -> float:
    """A cooldown length: a duration, 0 allowed (no cooldown)."""
    return check_duration(seconds, "seconds", allow_zero=True)


def check_cooldown_error(error: object) -> str | None:
    """A cooldown's error text: None, or a str without NUL (empty allowed)."""
    return None if error is None else check_text(error, "error", allow_empty=True)


def check_snapshot(session_id: str, snapshot: object) -> Cooldown | None:
    """A cooldown snapshot to restore: None, or a `Cooldown` of this session."""
    if snapshot is None:
        return None
    if not isinstance(snapshot, Cooldown):
        raise InvalidArgumentError(f"snapshot must be a Cooldown or None, got {type(snapshot).__name__}")
    if snapshot.session_id != session_id:
        raise InvalidArgumentError(f"snapshot is for {snapshot.session_id!r}, not {session_id!r}")
    until = snapshot.until
    if isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until):
        raise InvalidArgumentError(f"snapshot.until must be a finite number, got {until!r}")
    check_cooldown_error(snapshot.error)
    return snapshot


def check_commit_args(
    lease: object,
    *,
    watermark: object,
    compacted: object,
    mode: object,
    child_session_id: object,
    compressor: object,
    max_content_bytes: int | None,
) -> list[dict[str, Any]]:
    """Validate every `commit_compaction` argument before anything is written;
    returns the compacted set as column values (without keys)."""
    check_lease(lease)
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    check_count(watermark, "watermark", maximum=MAX_SQL_INT)
    if isinstance(compacted, (str, bytes, Mapping, Message)) or not isinstance(compacted, Sequence):
        raise InvalidArgumentError("compacted must be a sequence of Message")
    if not compacted:
        raise InvalidArgumentError("compacted must hold at least one message")
    if child_session_id is not None:
        validate_session_id(child_session_id)
        if mode != "rotate":
            raise InvalidArgumentError("child_session_id is only meaningful in rotate mode")
    check_text(compressor, "compressor", allow_empty=True)
    # a summary carries no idempotency key and no usage: both stay with the row it
    # replaced (the compressor's usage is the commit's own ``usage``)
    return [{**p, "key": None, "usage": None} for p in check_messages(list(compacted), max_content_bytes)]


def check_watermark(session_id: str, watermark: int, next_seq: int) -> None:
    """Inside the commit: a watermark past the last assigned seq names messages that
    do not exist (a confused caller); refusing it rolls the commit back."""
    if watermark >= next_seq:
        raise InvalidArgumentError(f"watermark {watermark} is past the last seq ({next_seq - 1}) of {session_id!r}")


def _loads(text: str | None) -> Any:
    """``json.loads`` of a column, the same values and errors; cheaper for what the
    stores write (compact JSON, an empty meta most often)."""
    if text is None:
        return None
    if type(text) is not str:  # bytes (a BLOB another tool wrote): json.loads decodes them
        return json.loads(text)
    if text == "{}":
        return {}
    try:
        value, end = _DECODER.raw_decode(text)  # skips json.loads' per-call checks
    except ValueError:  # leading whitespace, or not JSON: json.loads decides
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def stored_message_from_row(row: RowLike) -> StoredMessage:
    return _stored(
        row["role"],
        _loads(row["content"]),
        row["name"],
        row["tool_call_id"],
        _loads(row["tool_calls"]),
        _loads(row["meta"]) or {},
        row["session_id"],
        row["seq"],
        row["id"],
        row["created_at"],
        row["state"],
        row["origin_id"],
        row["key"],
        usage_from_json(row["usage"]),
    )


def check_incarnation(incarnation: object) -> None:
    """An incarnation argument: None (any) or a `SessionInfo.incarnation` string."""
    if incarnation is not None and (not isinstance(incarnation, str) or len(incarnation) > 64):
        raise InvalidArgumentError(
            f"incarnation must be None or a session's incarnation string, got {incarnation!r:.80}"
        )


def other_incarnation(session_id: str) -> SessionNotFoundError:
    """The error for a write meant for a conversation that was erased, when the id
    now names a new one."""
    return SessionNotFoundError(session_id, f"session {session_id!r} was erased (the id now names a new conversation)")


def new_incarnation() -> str:
    """A fresh lineage's incarnation: random, so a lineage started again under an
    erased id never matches the one it replaced."""
    return secrets.token_hex(8)


def session_from_row(row: RowLike) -> SessionInfo:
    return SessionInfo(
        id=row["id"],
        source=row["source"],
        parent_session_id=row["parent_session_id"],
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        epoch=row["epoch"],
        cooldown_until=row["cooldown_until"],
        cooldown_error=row["cooldown_error"],
        metadata=metadata_from_column(row["metadata"]),
        incarnation=row["incarnation"],
        branch_of=None if row["branch_of_session"] is None else (row["branch_of_session"], row["branch_of_seq"]),
    )


def lease_from_row(row: RowLike) -> Lease:
    return Lease(
        session_id=row["session_id"],
        holder=row["holder"],
        token=row["token"],
        acquired_at=row["acquired_at"],
        expires_at=row["expires_at"],
    )


def turn_lease_from_row(
    row: RowLike, *, rolled_back: int = 0, first_seq: int | None = None, key: str | None = None
) -> TurnLease:
    """A session row's turn columns (``id`` and ``turn_*``) as a `TurnLease`."""
    return TurnLease(
        row["id"],
        row["turn_holder"],
        int(row["turn_token"]),
        float(row["turn_expires_at"]),
        bool(row["turn_interrupted"]),
        rolled_back,
        first_seq,
        key,
    )


def turn_refusal(session_id: str, row: RowLike, *, live: bool, turn: int | None) -> TurnHeldError | TurnLostError:
    """Why the turn lease of ``row`` refused a write carrying ``turn`` (None: none): the
    row holds a dead turn, whose lease lapsed before its holder closed it
    (`DeadTurnError`, whoever writes), another holder's lease is live
    (`TurnHeldError`), or the write's own lease is not (`TurnLostError`)."""
    args = (session_id, row["turn_holder"], row["turn_expires_at"], row["turn_token"])
    if row["turn_holder"] is not None and not live:
        return DeadTurnError(*args)
    if turn is not None and not (live and row["turn_token"] != turn):
        return TurnLostError(*args, message=f"the turn lease {turn} on {session_id!r} lapsed")
    return TurnHeldError(*args)


def check_open_turn(holder: object, ttl_s: object, incarnation: object, rollback: object, key: object = None) -> float:
    """`Store.open_turn`'s arguments past the session id; the TTL. ``key`` follows a
    message key's rules (`InvalidMessageError`)."""
    check_text(holder, "holder")
    ttl = check_ttl(ttl_s)
    check_incarnation(incarnation)
    check_token(rollback)
    if key is not None:
        check_key(key)
    return ttl


def check_seal(mode: object, lease: object) -> int | None:
    """`Store.seal_turn`'s ``mode`` (one of `SEAL_MODES`) and ``lease`` (None or a
    `TurnLease`); the lease's token."""
    if not isinstance(mode, str) or mode not in SEAL_MODES:
        raise InvalidArgumentError(f"mode must be one of {SEAL_MODES}, got {mode!r}")
    return None if lease is None else check_turn(lease)


def cooldown_from_row(row: RowLike) -> Cooldown:
    return Cooldown(session_id=row["session_id"], until=row["until"], error=row["error"])


def compaction_from_row(row: RowLike) -> CompactionRecord:
    return CompactionRecord(
        id=row["id"],
        session_id=row["session_id"],
        child_session_id=row["child_session_id"],
        mode=row["mode"],
        token=row["token"],
        holder=row["holder"],
        watermark=row["watermark"],
        archived_count=row["archived_count"],
        tail_count=row["tail_count"],
        compressor=row["compressor"],
        started_at=row["started_at"],
        committed_at=row["committed_at"],
        usage=usage_from_json(row["usage"]),
    )


_GENERATION_SUFFIX = re.compile(r"^(?P<root>.*)~g(?P<generation>\d+)-[0-9a-f]{12}$", re.S)


def derive_child_id(parent_id: str, epoch: int) -> str:
    """The child id of a rotation: ``<root>~g<generation>-<hash>``.

    ``root`` is the lineage's first id (a suffix this function added is stripped, so
    ids do not grow with every rotation), ``generation`` counts rotations from the
    root, and the hash is of ``(parent_id, epoch)``. Deterministic, so two
    continuations of one parent at one epoch collide on the primary key; distinct
    parents give distinct ids. Always within the 128-character limit.
    """
    match = _GENERATION_SUFFIX.match(parent_id)
    root, generation = (match["root"], int(match["generation"])) if match else (parent_id, 0)
    digest = hashlib.sha256(f"{parent_id}\x00{epoch}".encode("utf-8", "surrogatepass")).hexdigest()
    suffix = f"~g{generation + 1}-{digest[:12]}"
    if len(suffix) > MAX_SESSION_ID_LENGTH // 2:  # a counter grown absurdly wide: count again from 1
        root, suffix = parent_id, f"~g1-{digest[:12]}"
    return root[: MAX_SESSION_ID_LENGTH - len(suffix)].rstrip() + suffix


def stored_from_params(
    message: Message,
    params: Mapping[str, Any],
    session_id: str,
    seq: int,
    id: int,
    created_at: float,
) -> StoredMessage:
    """The `StoredMessage` a just-appended ``message`` reads back as (``params`` from
    `message_params`); JSON values are re-read from their stored text so the caller's
    mutable objects are not shared. Every append builds these: pass the arguments
    by position (keywords cost a dict per call)."""
    content, tool_calls = message.content, params["tool_calls"]
    if content is not None and type(content) is not str:
        content = _loads(params["content"])
    return _stored(
        params["role"],
        content,
        params["name"],
        params["tool_call_id"],
        None if tool_calls is None else _loads(tool_calls),
        _loads(params["meta"]) if message.meta else {},
        session_id,
        seq,
        id,
        created_at,
        "live",
        None,
        params["key"],
        message.usage if params["usage"] is not None else None,
    )


#: Builds a `StoredMessage` from trusted store values, field by field in order.
_stored = StoredMessage._trusted
