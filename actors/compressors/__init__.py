"""Compressors: the `Compressor` interface and the two shipped ones.

`HeadTailCompressor` is local and deterministic; `LLMCompressor` summarizes with any
OpenAI-compatible chat-completions endpoint (standard library HTTP);
`ResponsesCompactCompressor` uses OpenAI's ``responses.compact`` (the ``openai``
client, imported when one is constructed).
"""

from ._base import Compressed, Compressor
from ._head_tail import HeadTailCompressor
from ._llm import LLMCancelledError, LLMCompressor, LLMCompressorError, LLMTimeoutError
from ._responses_compact import ResponsesCompactCompressor

__all__ = [
    "Compressed",
    "Compressor",
    "HeadTailCompressor",
    "LLMCancelledError",
    "LLMCompressor",
    "LLMCompressorError",
    "LLMTimeoutError",
    "ResponsesCompactCompressor",
]
