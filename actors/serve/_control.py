"""Turns opened and closed by id, compaction, interrupt and retract; the leases and
turns open now; the compaction event stream."""

# no `from __future__ import annotations`: FastAPI reads these signatures at runtime

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse

from protocol._jsonable import lease_dict, to_jsonable
from protocol._messages import check_key

from .. import Turn
from ..compaction._policy import check_on_busy
from ..session.commands import compress_command as _compress_command
from ._body import json_body, only, option
from ._gone import unless_gone
from ._service import Service
from ._tokens import Token

__all__ = ["control_routes"]

logger = logging.getLogger("session_actors.serve")


def control_routes(service: Service, who: Any) -> APIRouter:
    router = APIRouter(prefix="/v1")
    Who = Annotated[Token, Depends(who)]
    background: set[asyncio.Task[Any]] = set()  # compactions nobody waits for (kept from the GC)

    @router.post(
        "/sessions/{session_id:sid}/turns",
        status_code=201,
        summary="Open a turn (Idempotency-Key: a keyed turn, 200 replayed when completed before)",
    )
    async def open_turn(
        session_id: str,
        request: Request,
        token: Who,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        service.require(token, "write")
        on_busy = option(only(await json_body(request, empty={}), "on_busy"), "on_busy", str, None)
        if on_busy is not None:  # both checked before any store read
            check_on_busy(on_busy)
        if idempotency_key is not None:
            check_key(idempotency_key)
        info = await service.info(token, session_id)
        # a handle of its own: appends through every other handle wait while it is open
        handle = await service.registry.session_async(session_id, source=info.source)
        turn = Turn(handle, on_busy, idempotency_key)
        await unless_gone(request, turn.__aenter__())
        if turn.replayed:  # turn K was completed before: nothing is open, nothing is written through it
            messages = service.messages_view(token, turn.messages)
            await turn.__aexit__(None, None, None)
            body = {"replayed": True, "key": idempotency_key, "session_id": handle.session_id, "messages": messages}
            return JSONResponse(body, status_code=200)
        try:
            turn_id = await service.keep_turn(session_id, token, handle, turn)
        except BaseException:
            await turn.__aexit__(None, None, None)
            raise
        return {"turn": turn_id, "session_id": handle.session_id, "key": idempotency_key, "replayed": False}

    @router.get("/sessions/{session_id:sid}/turns/{turn_id}", summary="Is the turn still open, was it asked to end?")
    async def turn_state(session_id: str, turn_id: str, token: Who) -> Any:
        kept = await service.turn(token, session_id, turn_id, "read")
        interrupted = await kept.interrupted()
        return {"turn": turn_id, "session_id": kept.live_id, "interrupted": interrupted}

    @router.delete("/sessions/{session_id:sid}/turns/{turn_id}", summary="Close the turn (held appends then go in)")
    async def close_turn(session_id: str, turn_id: str, token: Who) -> Any:
        kept = await service.turn(token, session_id, turn_id, "write")
        service.drop_turn(turn_id, kept)
        await kept.close()
        return {"turn": turn_id, "closed": True}

    @router.post(
        "/sessions/{session_id:sid}/compact", summary="Compact now: force, mode, wait (false: 202, outcome on /events)"
    )
    async def compact(session_id: str, request: Request, token: Who) -> Any:
        service.require(token, "write")
        body = only(await json_body(request, empty={}), "force", "mode", "wait")
        force = option(body, "force", bool, False)
        mode = option(body, "mode", str, None)
        wait = option(body, "wait", bool, True)
        _compress_command(force, mode)  # bad values are a 400 even when nobody waits for the outcome
        handle = await service.handle(token, session_id)
        if not wait:
            task = asyncio.create_task(handle.compress_async(force=force, mode=mode))
            background.add(task)
            task.add_done_callback(_settled(background))
            return JSONResponse({"started": True, "session_id": handle.session_id}, status_code=202)
        return to_jsonable(await handle.compress_async(force=force, mode=mode))

    @router.post("/sessions/{session_id:sid}/interrupt", summary="Cancel the compaction in flight")
    async def interrupt(session_id: str, token: Who) -> Any:
        service.require(token, "write")
        handle = await service.handle(token, session_id)
        return {"cancelled": await handle.interrupt_async()}

    @router.post("/sessions/{session_id:sid}/retract", summary="Take the last live message out (it stays archived)")
    async def retract(session_id: str, request: Request, token: Who, turn: str | None = None) -> Any:
        service.require(token, "write")
        if turn is not None:
            taken = await (await service.turn(token, session_id, turn, "write")).retract(request)
        else:
            handle = await service.handle(token, session_id)
            taken = await unless_gone(request, handle.retract_async())
        return {"retracted": None if taken is None else service.messages_view(token, [taken])[0]}

    @router.get("/locks", summary="Compaction leases held and turns open, on the whole database")
    async def locks(token: Who) -> Any:
        service.require(token, "read")
        store = service.store_for(token)  # a source-limited token lists its source's alone
        now, leases, turns = await asyncio.to_thread(lambda: (store.now(), store.leases(), store.turns()))
        return {"now": now, "leases": [lease_dict(x, now) for x in leases], "turns": to_jsonable(turns)}

    @router.get("/events", summary="Server-sent events: one 'compaction' event per outcome of this server")
    async def events(token: Who, last_event_id: Annotated[str | None, Header()] = None) -> Any:
        service.require(token, "read")
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        stream = service.hub.stream(token.source, last_event_id)
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    return router


def _settled(tasks: set[asyncio.Task[Any]]) -> Any:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("a compaction nobody waited for failed", exc_info=task.exception())

    return done
