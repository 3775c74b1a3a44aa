"""Actors: one `SessionActor` per live session, the registry that owns them,
the handles callers use, and the compaction flow with its compressors.

Start here: `SessionRegistry(store, compressor=..., policy=...)`, then
``registry.session(id)`` for a `SessionHandle` (append, compress, interrupt,
transcript) or ``registry.review(id)`` for a `ReviewHandle` (never compacts).
"""

from .actor import SessionActor
from .compressors import Compressor, HeadTailCompressor
from .handle import AskTimeoutError, ReviewHandle, SessionHandle
from .policy import CompactionPolicy, TokenCounter, estimate_tokens
from .registry import RegistryClosedError, SessionRegistry

try:  # written in parallel; optional until it lands
    from .llm import LLMCompressor
except ImportError:  # pragma: no cover
    LLMCompressor = None  # type: ignore[assignment,misc]

__all__ = [
    "AskTimeoutError",
    "CompactionPolicy",
    "Compressor",
    "HeadTailCompressor",
    "LLMCompressor",
    "RegistryClosedError",
    "ReviewHandle",
    "SessionActor",
    "SessionHandle",
    "SessionRegistry",
    "TokenCounter",
    "estimate_tokens",
]
