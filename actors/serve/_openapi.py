"""The OpenAPI 3.1 document clients are generated from: every route's request body and
answers as named schemas, the bearer security scheme and each documented error.

The routes read their bodies by hand (see `_body`), so FastAPI's own document knows
neither bodies nor answers: `document` takes FastAPI's paths and parameters and fills
in, from the table below, what each operation takes and answers.
"""

from __future__ import annotations

from typing import Any

from protocol._messages import ROLES

__all__ = ["document"]

#: What a session id and a key may not hold (`protocol._messages`' rules, as regex escapes).
_FORBIDDEN = r"\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff"


def _id_like(most: int) -> dict[str, Any]:
    """1-``most`` characters, none forbidden, no whitespace at either end."""
    edge = rf"[^\s{_FORBIDDEN}]"
    pattern = rf"^{edge}(?:[^{_FORBIDDEN}]{{0,{most - 2}}}{edge})?$"
    return {"type": "string", "minLength": 1, "maxLength": most, "pattern": pattern}


_SESSION_ID = _id_like(128)
_KEY = _id_like(200)
_SOURCE = {"type": "string", "minLength": 1, "pattern": "^[^\\u0000]+$"}
#: Parameter schemas by name, wherever the parameter appears.
_PARAMETERS: dict[str, dict[str, Any]] = {
    "session_id": _SESSION_ID,
    "idempotency-key": _KEY,
    "compaction_id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    "q": {"type": "string", "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"},
    "source": _SOURCE,
    "turn_id": {"type": "string", "minLength": 1},
}
_LIMITS = {"/v1/search": 1000, "/v1/sessions/{session_id}/messages": 2**31 - 1}
_NULLABLE_STRING = {"type": ["string", "null"]}
_OBJECT = {"type": "object"}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _object(properties: dict[str, Any], required: list[str], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, **extra}


_NO_NUL = {"type": "string", "pattern": "^[^\\u0000]*$"}
#: Metadata: JSON whose strings (keys included) hold no NUL.
_METADATA = {
    "type": "object",
    "propertyNames": _NO_NUL,
    "additionalProperties": {"$ref": "#/components/schemas/MetadataValue"},
}
_USAGE = {
    "type": "object",
    "properties": {
        "input_tokens": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
        "output_tokens": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
        "model": {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~](?:[ -~]*[!-~])?$"},
                {"type": "null"},
            ]
        },
    },
    "additionalProperties": False,
}

_MESSAGE_FIELDS: dict[str, Any] = {
    "role": {"type": "string", "enum": sorted(ROLES)},
    "content": {"anyOf": [{"type": "string"}, _array(_OBJECT), {"type": "null"}]},
    "name": _NULLABLE_STRING,
    "tool_call_id": _NULLABLE_STRING,
    "tool_calls": {"anyOf": [_array(_OBJECT), {"type": "null"}]},
    "meta": {"anyOf": [_METADATA, {"type": "null"}]},
    "key": {"anyOf": [_KEY, {"type": "null"}]},
    "usage": {"anyOf": [_USAGE, {"type": "null"}]},
}
_STORED_FIELDS: dict[str, Any] = {
    "id": {"type": "integer"},
    "session_id": {"type": "string"},
    "seq": {"type": "integer"},
    "state": {"type": "string"},
    "created_at": {"type": "number"},
    "origin_id": {"type": ["integer", "null"]},
}

SCHEMAS: dict[str, Any] = {
    "MetadataValue": {
        "anyOf": [
            _NO_NUL,
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": {"$ref": "#/components/schemas/MetadataValue"}},
            _METADATA,
        ]
    },
    "Error": _object({"error": {"type": "string"}, "message": {"type": "string"}}, ["error", "message"]),
    "Message": _object(_MESSAGE_FIELDS, ["role"], additionalProperties=False),
    "StoredMessage": _object(
        {**_MESSAGE_FIELDS, **_STORED_FIELDS},
        ["id", "session_id", "seq", "state"],
        description="A stored message; a token without the read scope gets id, session_id, seq, state, key only",
    ),
    "Messages": _object({"session_id": {"type": "string"}, "messages": _array(_ref("StoredMessage"))}, ["messages"]),
    "SessionInfo": _object(
        {
            "id": {"type": "string"},
            "live": {"type": "boolean"},
            "source": {"type": "string"},
            "parent_session_id": _NULLABLE_STRING,
            "created_at": {"type": "number"},
            "ended_at": {"type": ["number", "null"]},
            "end_reason": _NULLABLE_STRING,
            "epoch": {"type": "integer"},
            "metadata": _OBJECT,
            "live_id": {"type": "string"},
        },
        ["id", "live"],
        description="A session; a token without the read scope gets id and live only",
    ),
    "SessionPage": _object({"sessions": _array(_ref("SessionInfo")), "next": _NULLABLE_STRING}, ["sessions", "next"]),
    "SessionCreate": _object({"source": _SOURCE, "metadata": _METADATA}, [], additionalProperties=False),
    "MetadataPatch": _object({"metadata": _METADATA}, ["metadata"], additionalProperties=False),
    "TurnOpen": _object(
        {"on_busy": {"type": "string", "enum": ["enqueue", "reject", "interrupt", "rollback"]}},
        [],
        additionalProperties=False,
    ),
    "Turn": _object(
        {
            "turn": {"type": "string"},
            "session_id": {"type": "string"},
            "key": _NULLABLE_STRING,
            "replayed": {"type": "boolean"},
            "interrupted": {"type": "boolean"},
            "closed": {"type": "boolean"},
            "messages": _array(_ref("StoredMessage")),
        },
        [],
        description="An open turn (201), a keyed turn replayed (200, replayed and messages), its state or close",
    ),
    "CompactRequest": _object(
        {
            "force": {"type": "boolean"},
            "mode": {"type": ["string", "null"], "enum": ["rotate", "in_place", None]},
            "wait": {"type": "boolean"},
        },
        [],
        additionalProperties=False,
    ),
    "Outcome": _object(
        {"status": {"type": "string"}, "session_id": {"type": "string"}, "started": {"type": "boolean"}},
        [],
        description="A compaction's outcome (or, with wait false, that it started)",
    ),
    "Retracted": _object({"retracted": {"oneOf": [_ref("StoredMessage"), {"type": "null"}]}}, ["retracted"]),
    "Cancelled": _object({"cancelled": {"type": "boolean"}}, ["cancelled"]),
    "Erased": _object({"erased_messages": {"type": "integer"}}, ["erased_messages"]),
    "Compactions": _object({"compactions": _array(_OBJECT)}, ["compactions"]),
    "CompactionDetail": _object(
        {
            "compaction": _OBJECT,
            "complete": {"type": "boolean"},
            "replaced": _array(_ref("StoredMessage")),
            "summary": _array(_ref("StoredMessage")),
            "carried": _array(_ref("StoredMessage")),
        },
        ["compaction", "complete", "replaced", "summary", "carried"],
    ),
    "Lineage": _object(
        {
            "root": {"type": "string"},
            "asked": {"type": "string"},
            "forked": {"type": "boolean"},
            "live_id": _NULLABLE_STRING,
            "sessions": _array(_ref("SessionInfo")),
        },
        ["root", "asked", "forked", "live_id", "sessions"],
    ),
    "SearchHits": _object({"query": {"type": "string"}, "hits": _array(_OBJECT)}, ["query", "hits"]),
    "Usage": _object({"session_id": _NULLABLE_STRING, "source": _NULLABLE_STRING, "usage": _OBJECT}, ["usage"]),
    "Locks": _object(
        {"now": {"type": "number"}, "leases": _array(_OBJECT), "turns": _array(_OBJECT)}, ["now", "leases", "turns"]
    ),
    "Status": _object({"status": {"type": "string"}}, ["status"]),
}

#: What each status means, on every operation that can answer it.
_ERRORS = {
    "400": "Invalid input (InvalidArgumentError, InvalidMessageError, InvalidSessionIdError, ...)",
    "401": "No token, or an unknown one",
    "403": "The token lacks the scope or reaches another source",
    "404": "Unknown session, turn or compaction",
    "408": "The body's next chunk came too late",
    "409": "Busy, ended, held, or the turn's lease is gone (TurnLostError)",
    "413": "The body is too large",
    "422": "The body is not JSON, or nests too deep",
    "503": "The store is busy or the service is shutting down",
}
_APPEND_BODY = {"oneOf": [_ref("Message"), {"type": "array", "items": _ref("Message"), "minItems": 1}]}

#: (method, path) -> (request body schema or None, whether a body is required, {status: schema name}).
_OPERATIONS: dict[tuple[str, str], tuple[Any, bool, dict[str, str]]] = {
    ("get", "/v1/sessions"): (None, False, {"200": "SessionPage"}),
    ("put", "/v1/sessions/{session_id}"): (_ref("SessionCreate"), False, {"200": "SessionInfo", "201": "SessionInfo"}),
    ("get", "/v1/sessions/{session_id}"): (None, False, {"200": "SessionInfo"}),
    ("patch", "/v1/sessions/{session_id}"): (_ref("MetadataPatch"), True, {"200": "SessionInfo"}),
    ("delete", "/v1/sessions/{session_id}"): (None, False, {"200": "Erased"}),
    ("post", "/v1/sessions/{session_id}/messages"): (_APPEND_BODY, True, {"200": "Messages", "201": "Messages"}),
    ("get", "/v1/sessions/{session_id}/messages"): (None, False, {"200": "Messages"}),
    ("get", "/v1/sessions/{session_id}/compactions"): (None, False, {"200": "Compactions"}),
    ("get", "/v1/sessions/{session_id}/lineage"): (None, False, {"200": "Lineage"}),
    ("post", "/v1/sessions/{session_id}/turns"): (_ref("TurnOpen"), False, {"200": "Turn", "201": "Turn"}),
    ("get", "/v1/sessions/{session_id}/turns/{turn_id}"): (None, False, {"200": "Turn"}),
    ("delete", "/v1/sessions/{session_id}/turns/{turn_id}"): (None, False, {"200": "Turn"}),
    ("post", "/v1/sessions/{session_id}/compact"): (
        _ref("CompactRequest"),
        False,
        {"200": "Outcome", "202": "Outcome"},
    ),
    ("post", "/v1/sessions/{session_id}/interrupt"): (None, False, {"200": "Cancelled"}),
    ("post", "/v1/sessions/{session_id}/retract"): (None, False, {"200": "Retracted"}),
    ("get", "/v1/locks"): (None, False, {"200": "Locks"}),
    ("get", "/v1/search"): (None, False, {"200": "SearchHits"}),
    ("get", "/v1/compactions/{compaction_id}"): (None, False, {"200": "CompactionDetail"}),
    ("get", "/v1/usage"): (None, False, {"200": "Usage"}),
    ("get", "/healthz"): (None, False, {"200": "Status"}),
    ("get", "/readyz"): (None, False, {"200": "Status", "503": "Status"}),
}
_PUBLIC = {"/healthz", "/readyz"}
_RESPONSE_HEADERS_FREE = {"/v1/events", "/metrics"}


def document(generated: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's ``generated`` document with bodies, answers, errors and security."""
    doc = dict(generated)
    doc["components"] = {
        "schemas": SCHEMAS,
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "a token of the token file"}},
    }
    doc["security"] = [{"bearer": []}]
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            _fill(path, method, operation)
    return doc


def _fill(path: str, method: str, operation: dict[str, Any]) -> None:
    body, required, answers = _OPERATIONS.get((method, path), (None, False, {}))
    if body is not None:
        operation["requestBody"] = {"required": required, "content": {"application/json": {"schema": body}}}
    responses: dict[str, Any] = {}
    for status, name in answers.items():
        responses[status] = {"description": name, "content": {"application/json": {"schema": _ref(name)}}}
    for parameter in operation.get("parameters", []):
        _parameter(path, parameter)
    if path == "/v1/events":
        event = _object({"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}}, [])
        responses["200"] = {"description": "Server-sent events", "content": {"text/event-stream": {"schema": event}}}
    elif path == "/metrics":
        responses["200"] = {"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}}
    if path in _PUBLIC:
        operation["security"] = []
    else:
        for status, meaning in _ERRORS.items():
            if status == "408" and body is None:
                continue
            responses.setdefault(
                status, {"description": meaning, "content": {"application/json": {"schema": _ref("Error")}}}
            )
    operation["responses"] = responses


def _parameter(path: str, parameter: dict[str, Any]) -> None:
    name = parameter["name"].lower()
    if name == "limit":
        parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": _LIMITS.get(path, 1000)}
    elif name in _PARAMETERS and parameter["in"] == "query" and name in ("session_id", "source"):
        parameter["schema"] = {"anyOf": [_PARAMETERS[name], {"type": "string", "maxLength": 0}]}  # empty: none
    elif name in _PARAMETERS:
        parameter["schema"] = _PARAMETERS[name]
    if name == "q":
        parameter["required"] = True
