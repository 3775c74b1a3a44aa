"""Token usage of SDK runs, recorded on the messages a run writes.

The run context the SDK passes ``add_items`` (``wrapper``) holds the run's usage so
far (``wrapper.usage``: ``input_tokens``, ``output_tokens``). Each batch of a run
records what the run used since its previous batch, on the batch's last assistant
message, so `Store.usage` counts every model call once. A batch without an
assistant message (the user's input) carries the usage forward to the next one.
The run context has no model name: it is the `AgentsSession`'s ``model`` option.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from protocol import Message, Usage

__all__ = ["RunUsage"]


class RunUsage:
    """What each live run context has been recorded for, by the context's id."""

    def __init__(self, model: str | None) -> None:
        self.model = model
        self._recorded: dict[int, tuple[int, int]] = {}

    def record(self, wrapper: Any, messages: Sequence[Message]) -> tuple[list[Message], Callable[[], None]]:
        """``messages`` with the run's new usage on the last assistant message, and
        what to call once they are stored: it notes the run as recorded up to now
        (a failed append records nothing, so the next batch carries it)."""
        out = list(messages)
        now = _totals(wrapper)
        last = next((i for i in reversed(range(len(out))) if out[i].role == "assistant"), None)
        if now is None or last is None:
            return out, _nothing
        key = id(wrapper)
        before = self._recorded.get(key, (0, 0))
        spent = (max(0, now[0] - before[0]), max(0, now[1] - before[1]))
        if spent == (0, 0):
            return out, _nothing
        if key not in self._recorded:
            try:  # a context's id is reused once it is gone: forget it with it
                weakref.finalize(wrapper, self._recorded.pop, key, None)
            except TypeError:  # not weakly referenceable: nothing safe to remember
                return out, _nothing
        out[last] = dataclasses.replace(out[last], usage=Usage(spent[0], spent[1], self.model))

        def stored() -> None:
            self._recorded[key] = now

        return out, stored


def _nothing() -> None:
    pass


def _totals(wrapper: Any) -> tuple[int, int] | None:
    """The run's ``(input_tokens, output_tokens)`` so far; None without a readable usage."""
    usage = getattr(wrapper, "usage", None)
    counts = (getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None))
    if not all(type(c) is int and c >= 0 for c in counts):
        return None
    return counts  # type: ignore[return-value]  # both checked ints
