"""Reading the archive back: ``search``, ``show --compaction ID`` and ``usage``."""

from __future__ import annotations

import argparse
from typing import Any

from protocol import CompactionDetail, StoredMessage

from ._database import open_existing
from ._output import Column, Output, fmt_time, message_dict, shorten, to_jsonable

__all__ = ["add_search_options", "add_usage_options", "cmd_search", "cmd_show_compaction", "cmd_usage"]

HIT_FIELDS = ("session_id", "seq", "role", "archived", "rank", "snippet")
DETAIL_FIELDS = ("part", "session_id", "seq", "id", "state", "role", "origin_id", "content")
USAGE_FIELDS = ("model", "input_tokens", "output_tokens", "total_tokens")
PREVIEW = 120


def add_search_options(p: argparse.ArgumentParser, count: Any) -> None:
    p.add_argument("query", metavar="WORDS", help="words every hit holds (plain words: no query syntax)")
    p.add_argument("--session", dest="session_id", metavar="ID", help="only this session's lineage")
    p.add_argument("--source", metavar="SOURCE", help="only sessions of this source")
    p.add_argument("--live-only", action="store_true", help="only live messages, not the archive")
    p.add_argument("--limit", type=count(1, 1000), default=20, help="at most N hits (1-1000; default 20)")


def cmd_search(args: argparse.Namespace) -> int:
    with open_existing(args, readonly=True) as store:
        hits = store.search(
            args.query,
            session_id=args.session_id,
            source=args.source,
            archived=not args.live_only,
            limit=args.limit,
        )
    out = Output(args)
    rows = [to_jsonable(h) for h in hits]
    if out.structured:
        out.emit({"query": args.query, "hits": rows}, rows, HIT_FIELDS)
        return 0
    out.table(
        f"{len(hits)} hit(s) for {args.query!r}: archived best first, then live newest first",
        ["session", Column("seq", "right"), "role", "where", "snippet"],
        [(h.session_id, h.seq, h.role, "archive" if h.archived else "live", shorten(h.snippet, PREVIEW)) for h in hits],
    )
    return 0


def cmd_show_compaction(args: argparse.Namespace) -> int:
    with open_existing(args, readonly=True) as store:
        detail = store.compaction_detail(args.compaction)
    out = Output(args)
    parts = {"replaced": detail.replaced, "summary": detail.summary, "carried": detail.carried}
    if out.structured:
        document = {
            "compaction": to_jsonable(detail.record),
            "complete": detail.complete,
            **{name: [message_dict(m) for m in rows] for name, rows in parts.items()},
        }
        flat = [{"part": name, **message_dict(m)} for name, rows in parts.items() for m in rows]
        out.emit(document, flat, DETAIL_FIELDS)
        return 0
    _describe(out, detail)
    for name, rows in parts.items():
        _rows_table(out, f"{name}: {len(rows)} message(s)", rows)
    return 0


def _describe(out: Output, detail: CompactionDetail) -> None:
    r = detail.record
    into = f"into {r.child_session_id}" if r.child_session_id else "in place"
    out.line(
        f"compaction {r.id} of {r.session_id} {into}: watermark {r.watermark}, token {r.token}, "
        f"holder {r.holder}, compressor {r.compressor}, committed {fmt_time(r.committed_at)}"
    )
    if not detail.complete:
        out.line("committed before the store recorded its summary and tail: only what it replaced is known")


def _rows_table(out: Output, title: str, rows: tuple[StoredMessage, ...]) -> None:
    out.table(
        title,
        ["session", Column("seq", "right"), Column("id", "right"), "state", "role", "content"],
        [(m.session_id, m.seq, m.id, m.state, m.role, shorten(m.text, PREVIEW)) for m in rows],
    )


def add_usage_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("session_id", metavar="ID", nargs="?", help="one session's whole lineage (default: every session)")
    p.add_argument("--source", metavar="SOURCE", help="only sessions of this source")


def cmd_usage(args: argparse.Namespace) -> int:
    with open_existing(args, readonly=True) as store:
        total = store.usage(args.session_id, source=args.source)
    out = Output(args)
    rows = [
        {
            "model": name,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
        }
        for name, u in total.by_model.items()
    ]
    if out.structured:
        document = {**total.to_dict(), "total_tokens": total.total_tokens}
        out.emit({"session_id": args.session_id, "source": args.source, "usage": document}, rows, USAGE_FIELDS)
        return 0
    share = total.compactions
    scope = f"lineage of {args.session_id}" if args.session_id else "every session"
    if args.source:
        scope += f" of source {args.source}"
    out.line(
        f"usage of {scope}: {total.input_tokens:,} input + {total.output_tokens:,} output = "
        f"{total.total_tokens:,} tokens; compactions {share.total_tokens if share else 0:,}"
    )
    out.table(
        "per model",
        ["model", Column("input", "right"), Column("output", "right"), Column("total", "right")],
        [
            (r["model"] or "(none)", f"{r['input_tokens']:,}", f"{r['output_tokens']:,}", f"{r['total_tokens']:,}")
            for r in rows
        ],
    )
    return 0
