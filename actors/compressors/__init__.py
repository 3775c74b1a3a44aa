"""Compressors: the `Compressor` interface and the two shipped ones.

`HeadTailCompressor` is local and deterministic; `LLMCompressor` summarizes with any
OpenAI-compatible chat-completions endpoint (standard library HTTP).
"""

from ._base import Compressed, Compressor
from ._head_tail import HeadTailCompressor
from ._llm import LLMCancelledError, LLMCompressor, LLMCompressorError, LLMTimeoutError

__all__ = [
    "Compressed",
    "Compressor",
    "HeadTailCompressor",
    "LLMCancelledError",
    "LLMCompressor",
    "LLMCompressorError",
    "LLMTimeoutError",
]
