"""Requests whose client left: a call the registry holds (an append behind another
client's open turn, a turn waiting for the one open) is withdrawn when its client
disconnects, instead of being applied after the client gave up (and, having no
answer, retried it or told its user it failed).

`unless_gone` runs the call as a task beside a watch on the request's ASGI
``receive``: once the body is read, the next message is ``http.disconnect``, sent
when the client closes its connection. Then the task is cancelled, and the handle
withdraws the request unless the actor had already claimed it (see
`actors._handle`): a request is applied and answered, or never applied.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from ._errors import ServiceError

__all__ = ["unless_gone"]

T = TypeVar("T")


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelled when the client disconnects first (then a 499
    ``ClientClosedRequest`` nobody reads)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # withdrawn now, or (claimed already) applied and answered to nobody
            if task.cancelled():
                raise ServiceError(499, "ClientClosedRequest", "the client left; its request was withdrawn")
        return task.result()
    finally:
        watch.cancel()
        if not task.done():  # this handler itself was cancelled
            task.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
