"""What every system of the peers' workload implements (`System`), and a loop per thread for
async APIs. Library imports stay inside the adapters' methods: this module and the adapters'
are imported where only some of the libraries exist."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

Ack = Callable[[str], None]


class System:
    """One system under the workload. A worker process builds one (``System(db)``) and calls
    ``turn`` from its main thread and ``note`` from its review thread."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    requirements: ClassVar[tuple[str, ...]] = ()
    distributions: ClassVar[tuple[str, ...]] = ()
    #: runs this tree's session-actors (on PYTHONPATH): with ``requirements`` too, in a virtual
    #: environment of its own holding them and session-actors' own dependencies
    uses_tree: ClassVar[bool] = False
    #: what a note says: the review's message goes through a path of its own
    note_role: ClassVar[str] = "assistant"

    def __init__(self, db: str) -> None:
        self.db = db
        #: errors raised to this adapter by the system and retried (a failed turn is counted apart)
        self.errors = 0

    def setup(self, sessions: list[str]) -> None:
        """Create the store and ``sessions`` before the workers start."""

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        """The four writes of ask ``ask`` (``tags`` in order), ``ack(tag)`` after each durable
        write; False when the system recognised a redelivery and wrote nothing."""
        raise NotImplementedError

    def note(self, session: str, tag: str, ack: Ack) -> None:
        raise NotImplementedError

    def read(self, session: str) -> list[str]:
        """The live conversation, one serialized message per entry, through the system's API."""
        raise NotImplementedError

    def forks(self, sessions: list[str]) -> int:
        """Continuations beyond the first (a system that cannot fork: 0)."""
        return 0

    def close(self) -> None:
        pass

    def setup_and_close(self, sessions: list[str]) -> dict[str, Any]:
        try:
            self.setup(sessions)
        finally:
            self.close()
        return {}


class Loops:
    """One event loop per thread, for systems whose API is async."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[asyncio.AbstractEventLoop] = []

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        loop = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = asyncio.new_event_loop()
            self._all.append(loop)
        return loop.run_until_complete(coro)

    def close(self) -> None:
        for loop in self._all:
            loop.close()
