"""Actors: one `SessionActor` per live session, the registry that owns them,
the handles callers use, and the compaction flow with its compressors.

Start here: `SessionRegistry(store, compressor=..., policy=...)`, then
``registry.session(id)`` for a `SessionHandle` (append, compress, interrupt,
transcript) or ``registry.review(id)`` for a `ReviewHandle` (never compacts).
"""

from .actor import SessionActor
from .compaction import CompactionPolicy, TokenCounter, estimate_tokens
from .compressors import Compressor, HeadTailCompressor, LLMCompressor
from .handle import AskTimeoutError, ReviewHandle, SessionHandle
from .registry import RegistryClosedError, SessionRegistry

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
