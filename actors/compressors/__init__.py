"""Compressors: the `Compressor` interface and the two shipped ones.

`HeadTailCompressor` is local and deterministic; `LLMCompressor` summarizes with any
OpenAI-compatible chat-completions endpoint (standard library HTTP).
"""

from .base import Compressor
from .head_tail import HeadTailCompressor
from .llm import LLMCancelledError, LLMCompressor, LLMCompressorError, LLMTimeoutError

__all__ = [
    "Compressor",
    "HeadTailCompressor",
    "LLMCancelledError",
    "LLMCompressor",
    "LLMCompressorError",
    "LLMTimeoutError",
]
