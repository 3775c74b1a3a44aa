"""Actors: one `SessionActor` per live session, the registry that owns them,
the handles callers use, and the compaction flow with its compressors.

The public surface is what this package exports: what you construct
(`SessionRegistry`, `CompactionPolicy`, the compressors) and what you catch
(`AskTimeoutError`, `RegistryClosedError`; every error is a
`protocol.errors.TranscriptError`). The modules behind it are the runtime's own.

Start here: `SessionRegistry(store, compressor=..., policy=...)`, then
``registry.session(id)`` for a `SessionHandle` (append, compress, interrupt,
transcript) or ``registry.review(id)`` for a `ReviewHandle` (never compacts).
"""

from ._handle import AskTimeoutError, ReviewHandle, SessionHandle, Turn
from ._registry import RegistryClosedError, SessionRegistry
from .compaction import CompactionPolicy, OnBusy, TokenCounter, estimate_tokens
from .compressors import Compressor, HeadTailCompressor, LLMCompressor

__all__ = [
    "AskTimeoutError",
    "CompactionPolicy",
    "Compressor",
    "HeadTailCompressor",
    "LLMCompressor",
    "OnBusy",
    "RegistryClosedError",
    "ReviewHandle",
    "SessionHandle",
    "SessionRegistry",
    "TokenCounter",
    "Turn",
    "estimate_tokens",
]
