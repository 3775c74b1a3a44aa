"""Token usage: what one model call cost, and the sums a store reports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidMessageError

__all__ = ["MAX_TOKENS", "Usage", "usage_from_json", "usage_json"]

#: The largest token count a `Usage` holds: the largest integer JSON readers
#: everywhere (JavaScript's included) read exactly.
MAX_TOKENS = 2**53 - 1
_MAX_MODEL_LENGTH = 200
_KEYS = frozenset({"input_tokens", "output_tokens", "model"})


def _check_tokens(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise InvalidMessageError(f"usage {name} must be an int from 0 to {MAX_TOKENS}, got {value!r:.80}")


def _check_model(model: object) -> None:
    if model is None:
        return
    if (
        not isinstance(model, str)
        or not 1 <= len(model) <= _MAX_MODEL_LENGTH
        or not model.isprintable()
        or model != model.strip()
    ):
        raise InvalidMessageError(
            f"usage model must be None or 1-{_MAX_MODEL_LENGTH} printable characters "
            f"without surrounding whitespace, got {model!r:.80}"
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call used (on a `Message` or a compaction), or a sum of them.

    A recorded call has ``input_tokens``, ``output_tokens`` and, when known, the
    ``model``. A sum (`Store.usage`) adds every recorded call: ``by_model`` holds
    the totals per model (calls without a model under ``""``) and
    ``compactions`` the part the compressors used; both are empty on a recorded
    call. Bad values raise `InvalidMessageError`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    by_model: Mapping[str, Usage] = field(default_factory=dict)
    compactions: Usage | None = None

    def __post_init__(self) -> None:
        _check_tokens(self.input_tokens, "input_tokens")
        _check_tokens(self.output_tokens, "output_tokens")
        _check_model(self.model)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @classmethod
    def coerce(cls, value: object) -> Usage:
        """A recorded call's `Usage` from a `Usage` or a mapping of
        ``input_tokens``, ``output_tokens`` and ``model`` (missing counts are 0)."""
        if isinstance(value, Usage):
            if value.by_model or value.compactions is not None:
                raise InvalidMessageError("a message or compaction records one call's usage, not a sum")
            return value
        if not isinstance(value, Mapping):
            raise InvalidMessageError(f"usage must be a Usage or a mapping, got {type(value).__name__}")
        unknown = set(value) - _KEYS
        if unknown:
            raise InvalidMessageError(f"unknown usage fields: {sorted(map(repr, unknown))}")
        return cls(value.get("input_tokens", 0), value.get("output_tokens", 0), value.get("model"))

    def to_dict(self) -> dict[str, Any]:
        """``input_tokens``, ``output_tokens``, and ``model`` when set; a sum adds
        ``by_model`` and ``compactions``."""
        out: dict[str, Any] = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.model is not None:
            out["model"] = self.model
        if self.by_model:
            out["by_model"] = {name: u.to_dict() for name, u in self.by_model.items()}
        if self.compactions is not None:
            out["compactions"] = self.compactions.to_dict()
        return out


def usage_json(usage: Usage | None) -> str | None:
    """The column text of a recorded call's usage (None: no usage)."""
    if usage is None:
        return None
    return json.dumps(usage.to_dict(), separators=(",", ":"), ensure_ascii=False)


def usage_from_json(text: str | None) -> Usage | None:
    """The `Usage` a column holds (trusted: the store checked it on the way in)."""
    if text is None:
        return None
    data = json.loads(text)
    return Usage(data["input_tokens"], data["output_tokens"], data.get("model"))
