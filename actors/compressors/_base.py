"""The `Compressor` interface every compressor implements."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from protocol import Message, StoredMessage

__all__ = ["Compressor"]


@runtime_checkable
class Compressor(Protocol):
    """Turns a durable transcript into a shorter one.

    ``compress`` is called off the actor thread with the live transcript
    (`StoredMessage` in seq order) and returns plain `Message` values. It must be
    stateless across calls (several sessions may call it at once) and should poll
    ``cancel`` and return early once it is set: the result is then discarded.
    Raising makes the attempt FAILED and arms the session's cooldown.
    ``compress`` may also be an ``async def`` (an ``AsyncOpenAI`` or LiteLLM client
    used as is): it then runs as a task on the registry's one long-lived event loop
    thread, and setting ``cancel`` cancels the task at once.
    A compressor may define ``for_policy(policy) -> Compressor`` to pick up policy
    defaults; the registry calls it once (see `bind_compressor`).
    """

    @property
    def name(self) -> str:
        """Recorded with each compaction (``CompactionRecord.compressor``)."""
        ...

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]: ...
