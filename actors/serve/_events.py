"""``GET /v1/events``: one server-sent ``compaction`` event per compaction outcome of
this process's registry (automatic attempts included), to every subscriber.

The registry calls `EventHub.publish` on one of its threads; the hub hands the event
to each subscriber's queue on the event loop. A subscriber that falls
``QUEUE_LIMIT`` events behind is dropped (its stream ends with an ``overflow``
event) rather than hold memory for a client that stopped reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from protocol import CompressionOutcome
from protocol._jsonable import to_jsonable

__all__ = ["EventHub"]

logger = logging.getLogger("session_actors.serve")

QUEUE_LIMIT = 1000
#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0


class EventHub:
    def __init__(self, source_of: Any) -> None:
        self._source_of = source_of  # session id -> its source, or None when gone
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: set[tuple[asyncio.Queue[Any], str | None]] = set()
        self._scoped = 0  # subscribers limited to one source: only they need an outcome's source
        self.published = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def publish(self, outcome: CompressionOutcome) -> None:
        """The registry's ``on_outcome`` hook (a registry thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        source = self._source_of(outcome.session_id) if self._scoped else None  # a store read
        event = {"outcome": to_jsonable(outcome), "source": source}
        try:
            loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop closed meanwhile: nobody is listening
            pass

    def _deliver(self, event: dict[str, Any]) -> None:
        self.published += 1
        for subscriber in list(self._subscribers):
            queue, source = subscriber
            if source is not None and event["source"] != source:
                continue
            if queue.full():
                self._subscribers.discard(subscriber)
                queue.get_nowait()
                queue.put_nowait(None)  # the stream's end
            else:
                queue.put_nowait(event)

    async def stream(self, source: str | None) -> AsyncIterator[str]:
        """The SSE lines for one subscriber; only outcomes of ``source``'s sessions
        when it is not None."""
        queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_LIMIT)
        subscriber = (queue, source)
        self._subscribers.add(subscriber)
        self._scoped += source is not None
        try:
            yield ": subscribed\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if event is None:
                    yield 'event: overflow\ndata: {"dropped": true}\n\n'
                    return
                yield f"event: compaction\ndata: {json.dumps(event['outcome'], separators=(',', ':'))}\n\n"
        finally:
            self._subscribers.discard(subscriber)
            self._scoped -= source is not None

    def subscribers(self) -> int:
        return len(self._subscribers)
