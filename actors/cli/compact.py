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

from protocol import SessionNotFoundError, validate_session_id

from ..compressors import Compressor, HeadTailCompressor
from .database import open_existing
from .output import console, emit_json, to_jsonable

__all__ = ["add_compressor_options", "cmd_compact", "make_compressor"]

log = logging.getLogger("session_actors.cli_compact")

def add_compressor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compressor", choices=("head-tail", "llm"), default="head-tail",
        help="head-tail: local and deterministic (default); llm: an OpenAI-compatible endpoint "
             "from --llm-base-url/--llm-model or SESSION_ACTORS_LLM_BASE_URL/_MODEL/_API_KEY",
    )
    parser.add_argument("--llm-base-url", metavar="URL", default=None,
                        help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--llm-model", metavar="NAME", default=None)
    parser.add_argument("--llm-timeout", metavar="SECONDS", type=float, default=120.0)


def make_compressor(args: argparse.Namespace) -> Compressor:
    """The compressor the options ask for (`ConfigurationError` if llm is unconfigured)."""
    if args.compressor == "llm":
        from ..compressors import LLMCompressor

        return LLMCompressor(base_url=args.llm_base_url, model=args.llm_model,
                             timeout_s=args.llm_timeout)
    return HeadTailCompressor()


def cmd_compact(args: argparse.Namespace) -> int:
    from ..compaction.policy import CompactionPolicy

    compressor = make_compressor(args)
    policy = CompactionPolicy(mode=args.mode or "in_place")
    with open_existing(args) as store:
        session_id = validate_session_id(args.session_id)
        if store.get_session(session_id) is None:  # the registry would create it
            raise SessionNotFoundError(session_id)
        from ..registry import SessionRegistry  # imports pykka machinery only when needed

        with SessionRegistry(store, compressor=compressor, policy=policy) as registry:
            outcome = registry.session(session_id).compress(force=args.force, mode=args.mode)
    if getattr(args, "json", False):
        emit_json({"outcome": to_jsonable(outcome)})
    else:
        out = console()
        reason = f" ({outcome.reason})" if outcome.reason else ""
        out.print(f"{outcome.status.value}{reason}: live session {outcome.session_id}")
        if outcome.record is not None:
            r = outcome.record
            out.print(f"{outcome.messages_before} -> {outcome.messages_after} live messages; "
                      f"archived {r.archived_count}, carried {r.tail_count}, token {r.token}")
        if outcome.error:
            out.print(f"error: {outcome.error}")
    # Exit 1 is reserved for fsck/simulate finding damage (DESIGN section 6): every
    # outcome, failed/lease_lost/cancelled included, is a result reported above.
    return 0
