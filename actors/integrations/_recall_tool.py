"""`recall_tool`: an OpenAI Agents SDK tool that searches the agent's own history.

Compaction keeps everything in the archive; this lets the agent reach what was
summarized away. The tool searches one session's lineage (its root and every
continuation), live and archived, and answers with the best hits as text the model
reads: where each hit is (seq, role, archived or live) and its snippet.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from protocol import ConfigurationError, InvalidArgumentError, SearchHit, SessionNotFoundError, validate_session_id
from protocol._checks import check_count, check_text

if TYPE_CHECKING:
    from .. import SessionRegistry

__all__ = ["recall_tool"]

DESCRIPTION = (
    "Search this conversation's whole history, including the parts summarized away by "
    "compaction, for messages holding every one of the given words. Use it when the "
    "user refers to something said earlier that is not in the context any more."
)
MAX_HITS = 20


def _parameters(limit: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "plain words to look for (all must match)"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_HITS,
                "description": f"how many hits at most (default {limit})",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def recall_tool(registry: SessionRegistry, session_id: str, *, name: str = "recall", limit: int = 5) -> Any:
    """A ``FunctionTool`` searching ``session_id``'s lineage in ``registry``'s store.

    The model passes ``query`` (plain words) and optionally ``limit`` (1-20; default
    ``limit``). It reads back one line per hit (archived ones first, best first); a query the store refuses
    comes back as a sentence saying why, never as an exception in the run.

    Raises: `ConfigurationError` without the SDK (``pip install
    'session-actors[openai-agents]'``); `InvalidArgumentError` for a bad ``name`` or
    ``limit``; `InvalidSessionIdError` for a malformed id.
    """
    try:
        from agents import FunctionTool
    except ImportError as exc:
        raise ConfigurationError(
            "recall_tool needs the OpenAI Agents SDK: pip install 'session-actors[openai-agents]'"
        ) from exc
    sid = validate_session_id(session_id)
    check_text(name, "name")
    default = check_count(limit, "limit", minimum=1, maximum=MAX_HITS)

    async def invoke(_context: Any, arguments: str) -> str:
        query, count = _arguments(arguments, default)
        try:
            hits = await asyncio.to_thread(registry.store.search, query, session_id=sid, limit=count)
        except SessionNotFoundError:
            return "Nothing found: this conversation has no stored history yet."
        except InvalidArgumentError as exc:
            return f"The search was refused: {exc}"
        return _answer(query, hits)

    return FunctionTool(
        name=name,
        description=DESCRIPTION,
        params_json_schema=_parameters(default),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def _arguments(arguments: str, default: int) -> tuple[Any, int]:
    """The model's ``query`` and ``limit`` (a missing or bad limit: the default)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    limit = parsed.get("limit", default)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HITS:
        limit = default
    return parsed.get("query"), limit


def _answer(query: str, hits: list[SearchHit]) -> str:
    if not hits:
        return f"Nothing in this conversation's history matches {query!r}."
    lines = [f"{len(hits)} message(s) matching {query!r}, archived ones first:"]
    for h in hits:
        where = "archived" if h.archived else "in context"
        lines.append(f"- #{h.seq} {h.role} ({where}, session {h.session_id}): {h.snippet}")
    return "\n".join(lines)
