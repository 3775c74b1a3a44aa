"""The `Compressor` interface every compressor implements."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, overload, runtime_checkable

from protocol import Message, StoredMessage, Usage

__all__ = ["Compressed", "Compressor"]


class Compressed(Sequence[Message]):
    """A compressor's result with what its model calls used: the messages (a
    sequence, so code that iterates a compressor's result keeps working) and the
    ``usage``, recorded on the compaction (`CompactionRecord.usage`)."""

    __slots__ = ("messages", "usage")

    def __init__(self, messages: Iterable[Message], usage: Usage | None = None) -> None:
        self.messages: tuple[Message, ...] = tuple(messages)
        self.usage = usage

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __repr__(self) -> str:
        return f"Compressed({list(self.messages)!r}, usage={self.usage!r})"


@runtime_checkable
class Compressor(Protocol):
    """Turns a durable transcript into a shorter one.

    ``compress`` is called off the actor thread with the live transcript
    (`StoredMessage` in seq order) and returns plain `Message` values. It must be
    stateless across calls (several sessions may call it at once) and should poll
    ``cancel`` and return early once it is set: the result is then discarded.
    Raising makes the attempt FAILED and arms the session's cooldown. Returning a
    `Compressed` records its ``usage`` with the compaction.
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
