"""Requests whose client left: a call the registry holds (an append behind another
client's open turn, a turn waiting for the one open) is withdrawn when its client
disconnects, instead of being applied after the client gave up (and, having no
answer, retried it or told its user it failed).

`unless_gone` awaits the call with a watch on the request's ASGI ``receive`` beside
it: once the body is read, the next message is ``http.disconnect``, sent when the
client closes its connection. Then the call is cancelled, and the handle
withdraws the request unless the actor had already claimed it (see
`actors._handle`): a request is applied and answered, or never applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from ._errors import ServiceError

__all__ = ["unless_gone"]

T = TypeVar("T")


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``await work`` in this task, cancelled when the client disconnects first (then a
    499 ``ClientClosedRequest`` nobody reads). The watch is the one task it starts: the
    work runs inline, and the watch cancels this task when the client leaves."""
    me = asyncio.current_task()
    if me is None:  # not in a task (no ASGI server runs a request so): nothing to cancel
        return await work
    left = False

    def client_left(watch: asyncio.Future[None]) -> None:
        nonlocal left
        if not watch.cancelled():
            watch.exception()  # retrieved: a watch that failed ends the call as a disconnect does
            left = True
            me.cancel()

    watch = asyncio.ensure_future(_disconnected(request))
    watch.add_done_callback(client_left)
    try:
        return await work  # cancelled: withdrawn now, or (claimed already) applied and answered to nobody
    except asyncio.CancelledError:
        if left:
            left = False
            if me.uncancel() == 0:  # the watch's cancel alone, not this handler's own
                raise ServiceError(499, "ClientClosedRequest", "the client left; its request was withdrawn") from None
        raise
    finally:
        watch.remove_done_callback(client_left)
        watch.cancel()
        if left:  # the work ended another way after the watch cancelled it: that cancel is spent
            me.uncancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
