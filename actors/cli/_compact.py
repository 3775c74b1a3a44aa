"""``session-actors compact``: one compaction through a session actor.

The command goes through a `SessionRegistry` like any gateway process would, so it
takes the lease, honours the fencing token and never forks a lineage, even while
gateway workers are running on the same database. It exits 0 for every outcome it
prints (the status, e.g. ``failed`` or ``lease_lost``, is in the output and the JSON);
errors before an outcome exists (unknown id, missing database, unconfigured LLM) are
exit 2.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from protocol import (
    MODES,
    CompressionOutcome,
    CompressionStatus,
    SessionNotFoundError,
    validate_session_id,
)

from ..compaction._policy import CompactionPolicy
from ..compressors import Compressor, HeadTailCompressor
from ._database import open_existing
from ._output import Output, to_jsonable

__all__ = ["add_compact_options", "add_compressor_options", "cmd_compact", "explain", "make_compressor"]

DEFAULT_KEEP_LAST = CompactionPolicy().keep_last
DEFAULT_TARGET_TOKENS = CompactionPolicy().target_tokens

log = logging.getLogger("session_actors.cli_compact")


def add_compressor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compressor",
        choices=("head-tail", "llm"),
        default="head-tail",
        help="head-tail: local and deterministic (default); llm: an OpenAI-compatible endpoint "
        "from --llm-base-url/--llm-model or SESSION_ACTORS_LLM_BASE_URL/_MODEL/_API_KEY",
    )
    parser.add_argument(
        "--llm-base-url",
        metavar="URL",
        default=None,
        help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1 "
        "(default: $SESSION_ACTORS_LLM_BASE_URL, else $OPENAI_BASE_URL)",
    )
    parser.add_argument(
        "--llm-model",
        metavar="NAME",
        default=None,
        help="the model the endpoint runs (default: $SESSION_ACTORS_LLM_MODEL)",
    )
    parser.add_argument(
        "--llm-timeout",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="per-request timeout of the LLM call in seconds (default 120)",
    )


def make_compressor(args: argparse.Namespace) -> Compressor:
    """The compressor the options ask for (`ConfigurationError` if llm is unconfigured)."""
    if args.compressor == "llm":
        from ..compressors import LLMCompressor

        return LLMCompressor(base_url=args.llm_base_url, model=args.llm_model, timeout_s=args.llm_timeout)
    return HeadTailCompressor()


def add_compact_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", metavar="ID", help="the session to compact (any id of its lineage)")
    parser.add_argument("--force", action="store_true", help="compact even during a cooldown left by a failed attempt")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="in_place: the session keeps its id (default); rotate: the session "
        "ends and a continuation takes the compacted transcript",
    )
    parser.add_argument(
        "--keep-last",
        metavar="N",
        type=int,
        default=None,
        help=f"messages kept verbatim at the end (default {DEFAULT_KEEP_LAST}); "
        "a session shorter than that comes back unchanged",
    )
    parser.add_argument(
        "--target-tokens",
        metavar="N",
        type=int,
        default=None,
        help=f"size the summary aims for (default {DEFAULT_TARGET_TOKENS})",
    )
    add_compressor_options(parser)


def cmd_compact(args: argparse.Namespace) -> int:
    compressor = make_compressor(args)
    policy = CompactionPolicy(mode=args.mode or "in_place", **_sizes(args))
    with open_existing(args) as store:
        session_id = validate_session_id(args.session_id)
        if store.get_session(session_id) is None:  # the registry would create it
            raise SessionNotFoundError(session_id)
        from .. import (
            SessionRegistry,  # imports pykka machinery only when needed
        )

        registry = SessionRegistry(store, compressor=compressor, policy=policy)
        try:
            outcome = registry.session(session_id).compress(force=args.force, mode=args.mode)
        finally:  # no drain: once compress() returned nothing is left, and Ctrl-C interrupts the attempt
            registry.close(drain_s=0)
    reason = outcome.reason or explain(outcome, policy)
    record = outcome.record
    row = {
        "status": outcome.status.value,
        "reason": reason,
        "session_id": outcome.session_id,
        "previous_session_id": outcome.previous_session_id,
        "messages_before": outcome.messages_before,
        "messages_after": outcome.messages_after,
        "archived": record.archived_count if record else None,
        "tail": record.tail_count if record else None,
        "token": record.token if record else None,
        "error": outcome.error,
    }
    out = Output(args)
    if out.structured:
        out.emit({"outcome": to_jsonable(outcome), "reason": reason}, [row], list(row))
    else:
        out.line(f"{outcome.status.value}: live session {outcome.session_id}")
        out.line(f"reason: {reason}")
        if record is not None:
            out.line(
                f"{outcome.messages_before} -> {outcome.messages_after} live messages; "
                f"archived {record.archived_count}, carried {record.tail_count}, "
                f"token {record.token}"
            )
        if outcome.error:
            out.line(f"error: {outcome.error}")
    # Exit 1 is reserved for fsck/simulate finding damage (docs/cli.md): every
    # outcome, failed/lease_lost/cancelled included, is a result reported above.
    return 0


def _sizes(args: argparse.Namespace) -> dict[str, Any]:
    sizes = {"keep_last": args.keep_last, "target_tokens": args.target_tokens}
    return {name: value for name, value in sizes.items() if value is not None}


def explain(outcome: CompressionOutcome, policy: CompactionPolicy) -> str:
    """Why an outcome that carries no ``reason`` came out as it did, in words."""
    status = outcome.status
    if status is CompressionStatus.COMPACTED:
        return "compacted in place: older messages were summarized, the originals archived"
    if status is CompressionStatus.ROTATED:
        return (
            f"rotated: {outcome.previous_session_id} ended and its continuation "
            f"{outcome.session_id} holds the compacted transcript"
        )
    if status is CompressionStatus.ADOPTED:
        return (
            f"another path had already compacted {outcome.previous_session_id}; "
            f"following its result {outcome.session_id}"
        )
    if status is CompressionStatus.UNCHANGED:
        return (
            f"the compressor returned the transcript unchanged ({outcome.messages_before} "
            f"messages, keep-last {policy.keep_last}: nothing old enough to summarize; "
            "try a smaller --keep-last)"
        )
    if status is CompressionStatus.LEASE_LOST:
        return "the lease was lost before the commit (its fencing token was superseded); nothing written"
    return status.value
