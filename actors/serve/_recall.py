"""``/v1/search``, ``/v1/compactions/{id}`` and ``/v1/usage``: the archive read back."""

# no `from __future__ import annotations`: FastAPI reads these signatures at runtime

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from protocol import InvalidArgumentError
from protocol._jsonable import message_dict, to_jsonable

from ._service import Service
from ._tokens import Token

__all__ = ["recall_routes"]


def recall_routes(service: Service, who: Any) -> APIRouter:
    router = APIRouter(prefix="/v1")
    Who = Annotated[Token, Depends(who)]

    @router.get("/search", summary="Messages holding every word of q: archived best first, then live newest first")
    async def search(
        token: Who,
        q: str = "",
        session_id: str | None = None,
        source: str | None = None,
        archived: bool = True,
        limit: int = 20,
    ) -> Any:
        service.require(token, "read")
        session_id, source = session_id or None, source or None  # an empty parameter is none
        if not q:
            raise InvalidArgumentError("q (the words to search for) is required")
        hits = await asyncio.to_thread(
            service.store_for(token).search, q, session_id=session_id, source=source, archived=archived, limit=limit
        )
        return {"query": q, "hits": to_jsonable(hits)}

    @router.get("/compactions/{compaction_id}", summary="What one compaction replaced, wrote and carried")
    async def compaction_detail(compaction_id: int, token: Who) -> Any:
        service.require(token, "read")
        detail = await asyncio.to_thread(service.store_for(token).compaction_detail, compaction_id)
        return {
            "compaction": to_jsonable(detail.record),
            "complete": detail.complete,
            "replaced": [message_dict(m) for m in detail.replaced],
            "summary": [message_dict(m) for m in detail.summary],
            "carried": [message_dict(m) for m in detail.carried],
        }

    @router.get("/usage", summary="Token usage recorded on messages and compactions, per model")
    async def usage(token: Who, session_id: str | None = None, source: str | None = None) -> Any:
        service.require(token, "read")
        session_id, source = session_id or None, source or None
        total = await asyncio.to_thread(service.store_for(token).usage, session_id, source=source)
        summed = {**total.to_dict(), "total_tokens": total.total_tokens}
        return {"session_id": session_id, "source": source, "usage": summed}

    return router
