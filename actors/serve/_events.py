"""``GET /v1/events``: one server-sent ``compaction`` event per compaction outcome of
this process's registry (automatic attempts included), to every subscriber.

The registry calls `EventHub.publish` on one of its threads; the hub numbers the
event and hands it to each subscriber's queue on the event loop. Each event carries
``id: RUN:N`` (RUN names this server's run, N counts from 1), and the latest
``BUFFER`` events are kept: a client reconnecting with ``Last-Event-ID`` gets the
ones it missed first. When some of those are no longer kept (or its id is of
another run: the server restarted), its stream starts with an ``event: gap``, then
what is kept.
A comment line every ``heartbeat_s`` keeps proxies (and clients) from taking an
idle stream for a dead one. A subscriber that falls ``QUEUE_LIMIT`` events behind
is dropped (its stream ends with an ``overflow`` event) rather than hold memory for
a client that stopped reading; it reconnects with its last id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from protocol import CompressionOutcome
from protocol._jsonable import to_jsonable

__all__ = ["BUFFER", "HEARTBEAT_S", "EventHub"]

logger = logging.getLogger("session_actors.serve")

QUEUE_LIMIT = 1000
#: Events kept for clients that reconnect with ``Last-Event-ID``.
BUFFER = 1000
#: A comment line this often keeps proxies from closing an idle stream.
HEARTBEAT_S = 15.0


class EventHub:
    def __init__(self, source_of: Any, *, heartbeat_s: float = HEARTBEAT_S, buffer: int = BUFFER) -> None:
        self._source_of = source_of  # session id -> its source, or None when gone
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: set[tuple[asyncio.Queue[Any], str | None]] = set()
        self._kept: deque[dict[str, Any]] = deque(maxlen=buffer)
        self._run = secrets.token_hex(4)
        self.heartbeat_s = heartbeat_s
        self.published = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def publish(self, outcome: CompressionOutcome) -> None:
        """The registry's ``on_outcome`` hook (a registry thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # the source of every event: a subscriber limited to one source may reconnect later
        source = self._source_of(outcome.session_id)  # a store read
        event = {"outcome": to_jsonable(outcome), "source": source}
        try:
            loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop closed meanwhile: nobody is listening
            pass

    def _deliver(self, event: dict[str, Any]) -> None:
        self.published += 1
        event["n"] = self.published
        self._kept.append(event)
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

    def _missed(self, last_event_id: str | None) -> tuple[bool, list[dict[str, Any]]]:
        """Whether events after ``last_event_id`` are lost, and the kept ones after it."""
        if last_event_id is None:
            return False, []
        run, _, number = last_event_id.strip().partition(":")
        kept = list(self._kept)
        if run != self._run or not number.isdigit():  # another run's id: what came after it is gone
            return True, kept
        after = int(number)
        first = kept[0]["n"] if kept else self.published + 1
        return first > after + 1, [e for e in kept if e["n"] > after]

    async def stream(self, source: str | None, last_event_id: str | None = None) -> AsyncIterator[str]:
        """The SSE lines for one subscriber; only outcomes of ``source``'s sessions
        when it is not None; first the kept ones after ``last_event_id``."""
        queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_LIMIT)
        subscriber = (queue, source)
        # the backlog and the subscription in one step of the loop: no event between them
        lost, backlog = self._missed(last_event_id)
        backlog = [e for e in backlog if source is None or e["source"] == source]
        self._subscribers.add(subscriber)
        try:
            yield ": subscribed\nretry: 1000\n\n"  # a client cut off reconnects after a second
            if lost:
                yield f'event: gap\ndata: {{"after": {json.dumps(last_event_id)}}}\n\n'
            for event in backlog:
                yield self._line(event)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.heartbeat_s)
                except TimeoutError:
                    yield ": heartbeat\n\n"
                    continue
                if event is None:
                    yield 'event: overflow\ndata: {"dropped": true}\n\n'
                    return
                yield self._line(event)
        finally:
            self._subscribers.discard(subscriber)

    def _line(self, event: dict[str, Any]) -> str:
        data = json.dumps(event["outcome"], separators=(",", ":"))
        return f"id: {self._run}:{event['n']}\nevent: compaction\ndata: {data}\n\n"

    def subscribers(self) -> int:
        return len(self._subscribers)
