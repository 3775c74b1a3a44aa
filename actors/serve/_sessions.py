"""``/v1/sessions``: create, get, list, update and erase sessions; append and read
their messages; their compaction records and lineage."""

# no `from __future__ import annotations`: FastAPI reads these signatures at runtime

import asyncio
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.routing import Route

from persistence import Store
from persistence.internal import root_of, walk
from protocol import (
    InvalidArgumentError,
    Message,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
)
from protocol._checks import check_count
from protocol._jsonable import json_scalar, message_dict, session_dict, to_jsonable

from .. import SessionHandle
from ._body import json_body, messages_of, only, option
from ._gone import unless_gone
from ._service import Service
from ._tokens import Token

__all__ = ["session_routes"]

#: The largest page ``GET /sessions`` serves.
MAX_PAGE = 1000
#: ``POST .../messages``' parameters, as FastAPI documents a ``str`` path parameter and
#: a ``str | None`` query parameter and header (`_openapi` gives each its schema).
_APPEND_PARAMETERS = [
    {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string", "title": "Session Id"}},
    *(
        {
            "name": name,
            "in": where,
            "required": False,
            "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": title},
        }
        for name, where, title in [("turn", "query", "Turn"), ("idempotency-key", "header", "Idempotency-Key")]
    ),
]


def session_routes(service: Service, who: Any) -> APIRouter:
    router = APIRouter(prefix="/v1")
    Who = Annotated[Token, Depends(who)]

    # The busiest route reads its session id, token, ``?turn=`` and ``Idempotency-Key``
    # by hand, as FastAPI would (the last ``turn``, the first header), and is served as
    # a plain Starlette route, first in line: FastAPI's per-request machinery
    # (dependencies, parameters, exit stacks) cost more CPU than the append itself.
    # FastAPI's route of it documents it (`_APPEND_PARAMETERS`, as FastAPI did).
    async def append(request: Request) -> Any:
        session_id, token = request.path_params["session_id"], await who(request)
        service.require(token, "write")
        messages = messages_of(await json_body(request), request.headers.get("idempotency-key"))
        turn = request.query_params.get("turn")
        if turn is not None:
            writer = (await service.turn(token, session_id, turn, "write")).append
        else:
            writer = _appender(await service.handle(token, session_id))
        # keyed messages may all be stored already: then the answer is 200, not 201
        asked = await service.store_now() if all(m.key is not None for m in messages) else None
        try:
            stored = await writer(request, messages)
        except SessionNotFoundError:
            service.forget(session_id)
            raise
        replayed = asked is not None and all(m.created_at < asked for m in stored)
        body = {"messages": service.messages_view(token, stored)}
        return JSONResponse(body, status_code=200 if replayed else 201)

    path = "/sessions/{session_id:sid}/messages"
    router.routes.append(Route(router.prefix + path, append, methods=["POST"], include_in_schema=False))
    router.add_api_route(
        path,
        append,
        methods=["POST"],
        status_code=201,
        summary="Append a message or a list of them",
        openapi_extra={"parameters": _APPEND_PARAMETERS},
    )

    @router.get("/sessions", summary="Sessions newest first: source, live, meta.KEY=VALUE filters; keyset paging")
    async def list_sessions(request: Request, token: Who) -> Any:
        service.require(token, "read")
        query = request.query_params
        source = query.get("source")  # a source-limited token's view confines it
        metadata = {k.removeprefix("meta."): json_scalar(v) for k, v in query.multi_items() if k.startswith("meta.")}
        limit = _count(query.get("limit", "50"), "limit", MAX_PAGE)
        live = _live(query.get("live"))
        infos = await asyncio.to_thread(
            service.store_for(token).sessions,
            live=live,
            source=source,
            metadata=metadata or None,
            after=query.get("after"),
            limit=limit + 1,
        )
        page = infos[:limit]
        more = len(infos) > limit
        return {"sessions": [session_dict(i) for i in page], "next": page[-1].id if more and page else None}

    @router.put("/sessions/{session_id:sid}", summary="Create the session, or get it when it exists (201 or 200)")
    async def put_session(session_id: str, request: Request, token: Who) -> Any:
        service.require(token, "write")
        body = only(await json_body(request, empty={}), "source", "metadata")
        source = option(body, "source", str, token.source or "api")
        metadata = option(body, "metadata", dict, None)
        # the token's view refuses another source, to create or to get
        info, created = await asyncio.to_thread(_create_or_get, service.store_for(token), session_id, source, metadata)
        return JSONResponse(service.session_view(token, info), status_code=201 if created else 200)

    @router.get("/sessions/{session_id:sid}", summary="The session, with the live id of its lineage")
    async def get_session(session_id: str, token: Who) -> Any:
        service.require(token, "read")
        info = await service.info(token, session_id)
        live_id = await asyncio.to_thread(service.store_for(token).resolve, session_id)
        return session_dict(info) | {"live_id": live_id}

    @router.patch("/sessions/{session_id:sid}", summary="Merge a metadata patch (a key set to null is removed)")
    async def patch_session(session_id: str, request: Request, token: Who) -> Any:
        service.require(token, "write")
        patch = option(only(await json_body(request), "metadata"), "metadata", dict, None)
        if patch is None:
            raise InvalidArgumentError('the body is {"metadata": {...}}')
        await service.info(token, session_id)
        info = await asyncio.to_thread(service.store_for(token).update_metadata, session_id, patch)
        return service.session_view(token, info)

    @router.delete("/sessions/{session_id:sid}", summary="ERASE the whole lineage: every session, message and record")
    async def delete_session(session_id: str, token: Who) -> Any:
        service.require(token, "admin")
        await service.info(token, session_id)
        erased = await service.registry.delete_async(session_id)
        service.forget(session_id)
        return {"erased_messages": erased}

    @router.get(
        "/sessions/{session_id:sid}/messages",
        summary="The live transcript of the lineage, or (archived=true) what this session archived",
    )
    async def read_messages(session_id: str, token: Who, limit: int | None = None, archived: bool = False) -> Any:
        service.require(token, "read")
        if limit is not None:
            limit = check_count(limit, "limit", minimum=1)
        if archived:  # of exactly this id: a rotated-away session keeps what it compacted
            await service.info(token, session_id)
            messages = await asyncio.to_thread(service.store_for(token).archive, session_id)
            messages = messages if limit is None else messages[-limit:]
        else:  # the live transcript of the lineage's live session: only the latest `limit` read
            handle = await service.handle(token, session_id)
            messages = await handle.transcript_async(limit=limit)
            session_id = handle.session_id
        return {"session_id": session_id, "messages": [message_dict(m) for m in messages]}

    @router.get("/sessions/{session_id:sid}/compactions", summary="Every compaction record of the session")
    async def compactions(session_id: str, token: Who) -> Any:
        service.require(token, "read")
        await service.info(token, session_id)
        return {"compactions": to_jsonable(await asyncio.to_thread(service.store_for(token).compactions, session_id))}

    @router.get("/sessions/{session_id:sid}/lineage", summary="The lineage around the session, root first")
    async def lineage(session_id: str, token: Who) -> Any:
        service.require(token, "read")
        return await asyncio.to_thread(_lineage, service.store_for(token), await service.info(token, session_id))

    return router


def _appender(handle: SessionHandle) -> Any:
    async def append(request: Request, messages: list[Message]) -> list[StoredMessage]:
        return await unless_gone(request, handle.append_async(messages))

    return append


def _live(text: str | None) -> bool | None:
    if text not in (None, "true", "false"):
        raise InvalidArgumentError(f"live must be true or false, got {text!r}")
    return None if text is None else text == "true"


def _count(text: str, name: str, maximum: int) -> int:
    if not text.isdigit():
        raise InvalidArgumentError(f"{name} must be an integer from 1 to {maximum}, got {text!r}")
    return check_count(int(text), name, minimum=1, maximum=maximum)


def _create_or_get(store: Store, session_id: str, source: str, metadata: Any) -> tuple[SessionInfo, bool]:
    try:
        return store.create_session(session_id, source=source, metadata=metadata), True
    except SessionExistsError:
        info = store.get_session(session_id)
        if info is None:  # erased between the two: create it after all
            return store.create_session(session_id, source=source, metadata=metadata), True
        return info, False


@dataclass
class _Node:
    info: SessionInfo
    depth: int
    children: list["_Node"] = field(default_factory=list)


def _lineage(store: Store, asked: SessionInfo) -> dict[str, Any]:
    """Root first, parents before children; ``forked`` when a session has two children."""
    root = root_of(store, asked)
    nodes = [session_dict(n.info) | {"children": [c.info.id for c in n.children]} for n in walk(store, root, _Node)]
    live = [n["id"] for n in nodes if n["live"]]
    return {
        "root": root.id,
        "asked": asked.id,
        "forked": any(len(n["children"]) > 1 for n in nodes),
        "live_id": live[0] if len(live) == 1 else None,
        "sessions": nodes,
    }
