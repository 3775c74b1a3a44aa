"""Search and compaction detail, shared by every backend: argument checks, the
terms of a query, matching them in live rows, and rows made into protocol values.

A text is a sequence of words: runs of letters and digits, case-folded (what
SQLite's unicode61 tokenizer keeps, and what PostgreSQL's search_vector indexes).
A query is terms separated by whitespace, every one required; a term is the words
it holds, found next to each other and in order. So an identifier (``ZX-4417``,
``ana@example.com``, ``src/main.py``, ``v2.1.3``) is found whole, and each of its
parts is a term of its own.

The archive is indexed by the database; the live transcript is not (appends stay as
cheap as they were), so a backend reads the live rows that may hold the terms and
`live_hit` matches them exactly here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from protocol import CompactionDetail, CompactionRecord, InvalidArgumentError, SearchHit, StoredMessage
from protocol._checks import check_count, check_text

from ._rows import RowLike, checked_session_id, stored_message_from_row

__all__ = [
    "MAX_QUERY_CHARS",
    "RANKED_CANDIDATES",
    "SearchArgs",
    "check_search",
    "detail_from_rows",
    "fts5_query",
    "hit_from_row",
    "hit_from_text",
    "live_hit",
    "prefilter_words",
    "terms_of",
    "words_of",
]

#: The longest query `Store.search` takes, in characters.
MAX_QUERY_CHARS = 1000
MAX_HITS = 1000
#: PostgreSQL ranks this many archived matches, the newest: ts_rank reads each
#: match's text again, so a word in most messages is ranked among its newest.
RANKED_CANDIDATES = 2000
#: A word: a run of letters and digits (what SQLite's unicode61 tokenizer keeps).
_WORD = re.compile(r"[^\W_]+")
#: Words of context on each side of the first match in a snippet made here.
_CONTEXT_WORDS = 7


def words_of(text: str) -> list[str]:
    """The case-folded words of ``text``, in order."""
    return [w.casefold() for w in _WORD.findall(text)]


class SearchArgs(NamedTuple):
    #: each term's words, in order; no term twice
    terms: tuple[tuple[str, ...], ...]
    session_id: str | None
    source: str | None
    archived: bool
    limit: int

    @property
    def words(self) -> tuple[str, ...]:
        """Every word of every term, each once, in order."""
        return tuple(dict.fromkeys(w for term in self.terms for w in term))


def terms_of(query: str) -> tuple[tuple[str, ...], ...]:
    """The terms of ``query``: the words of each of its whitespace-separated parts
    (a part without a letter or digit is none), each term once."""
    return tuple(dict.fromkeys(t for t in (tuple(words_of(part)) for part in query.split()) if t))


def check_search(query: object, session_id: object, source: object, archived: object, limit: object) -> SearchArgs:
    """`Store.search`'s arguments, checked (`InvalidArgumentError` otherwise)."""
    text = check_text(query, "query")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(f"query must be at most {MAX_QUERY_CHARS} characters, got {len(text)}")
    terms = terms_of(text)
    if not terms:
        raise InvalidArgumentError(f"query must hold at least one letter or digit, got {query!r}")
    sid = None if session_id is None else checked_session_id(session_id)
    if source is not None:
        check_text(source, "source")
    if not isinstance(archived, bool):
        raise InvalidArgumentError(f"archived must be a bool, got {archived!r}")
    count = check_count(limit, "limit", minimum=1, maximum=MAX_HITS)
    return SearchArgs(terms, sid, source, archived, count)  # type: ignore[arg-type]


def fts5_query(terms: Sequence[Sequence[str]]) -> str:
    """Every term as a quoted FTS5 phrase (its words next to each other, in order),
    all of them required: a user's text is matched, never parsed as FTS5 syntax
    (``"``, ``*``, ``NEAR``, ``-``)."""
    return " ".join(f'"{" ".join(term)}"' for term in terms)  # words are letters and digits: nothing to escape


def prefilter_words(words: Sequence[str]) -> str:
    """The ASCII words as a JSON array, for a backend's ``search_live``: a row's
    JSON text holds each of them (ASCII case folded) if its text does. Other words
    are left to `live_hit` (a database's lower() may fold them otherwise)."""
    return json.dumps([w for w in words if w.isascii()])


def message_text(content: str) -> str:
    """The text of a message's content column (JSON): the string, or the "text" of
    each part; a NUL is a space, as in the index."""
    value = json.loads(content)
    if isinstance(value, list):
        value = " ".join(p["text"] for p in value if isinstance(p, dict) and isinstance(p.get("text"), str))
    return value.replace("\x00", " ") if isinstance(value, str) else ""


def live_hit(row: RowLike, terms: Sequence[Sequence[str]]) -> SearchHit | None:
    """The hit of live ``row`` (its session_id, seq, role, content) when its text holds
    every term, else None. Its ``rank``: minus the share of its words that matched."""
    text = message_text(row["content"])
    found = list(_WORD.finditer(text))
    spans = _spans([m.group().casefold() for m in found], terms)
    if spans is None:
        return None
    matched = sum(end - start for start, end in spans)
    return SearchHit(
        session_id=row["session_id"],
        seq=row["seq"],
        role=row["role"],
        archived=False,
        snippet=_snippet(text, found, spans),
        rank=-matched / len(found),
    )


def hit_from_text(row: RowLike, terms: Sequence[Sequence[str]]) -> SearchHit:
    """The hit of a row the database matched and ranked (its session_id, seq, role,
    state, content, rank), its snippet marked as `live_hit` marks one."""
    text = message_text(row["content"])
    found = list(_WORD.finditer(text))
    spans = _spans([m.group().casefold() for m in found], terms) or []
    return SearchHit(
        session_id=row["session_id"],
        seq=row["seq"],
        role=row["role"],
        archived=row["state"] != "live",
        snippet=_snippet(text, found, spans),
        rank=float(row["rank"]),
    )


def _spans(words: list[str], terms: Sequence[Sequence[str]]) -> list[tuple[int, int]] | None:
    """Where ``words`` hold each term, as sorted, disjoint ``(first, end)`` index
    ranges (overlapping matches merged); None when a term is missing."""
    at: dict[str, list[int]] = {}
    for i, word in enumerate(words):
        at.setdefault(word, []).append(i)
    spans = []
    for term in terms:
        size = len(term)
        starts = [i for i in at.get(term[0], ()) if tuple(words[i : i + size]) == tuple(term)]
        if not starts:
            return None
        spans += [(i, i + size) for i in starts]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _snippet(text: str, found: list[re.Match[str]], spans: list[tuple[int, int]]) -> str:
    """The words around the first match, each match in ``[`` and ``]`` (a term of
    several words in one pair, with what stands between them), the text between
    them as it is; ``…`` where it was cut."""
    if not found:
        return ""
    first = spans[0][0] if spans else 0
    low, high = max(0, first - _CONTEXT_WORDS), min(len(found), first + _CONTEXT_WORDS + 1)
    high = max([high, *(end for start, end in spans if start < high)])  # no match cut in two
    opens, closes = {start for start, _ in spans}, {end - 1 for _, end in spans}
    parts, at = [], found[low].start()
    for i in range(low, high):
        parts += [text[at : found[i].start()], "[" if i in opens else "", found[i].group(), "]" if i in closes else ""]
        at = found[i].end()
    body = " ".join("".join(parts).split())
    return ("…" if low > 0 else "") + body + ("…" if high < len(found) else "")


def hit_from_row(row: RowLike) -> SearchHit:
    return SearchHit(
        session_id=row["session_id"],
        seq=row["seq"],
        role=row["role"],
        archived=row["state"] != "live",
        snippet=row["snippet"] or "",
        rank=float(row["rank"]),
    )


def detail_from_rows(
    record: CompactionRecord,
    row: RowLike,
    rows_in: Callable[[str, int, int], Sequence[Any]],
    legacy_replaced: Callable[[], Sequence[Any]],
) -> CompactionDetail:
    """A `CompactionDetail` from its compactions ``row``. ``rows_in(session, first,
    last)`` reads a seq range; a record from before the store kept its ranges
    (``written_from`` NULL) reads its replaced rows with ``legacy_replaced``."""
    if row["written_from"] is None:
        replaced = _messages(legacy_replaced())
        return CompactionDetail(record, replaced, (), (), complete=False)
    archived = rows_in(record.session_id, row["replaced_from"], record.watermark)
    replaced = _messages(r for r in archived if r["state"] in ("compacted", "pruned"))
    target = record.child_session_id or record.session_id
    first, count = row["written_from"], row["summary_count"]
    written = _messages(rows_in(target, first, first + count + record.tail_count - 1))
    return CompactionDetail(record, replaced, written[:count], written[count:])


def _messages(rows: Any) -> tuple[StoredMessage, ...]:
    return tuple(stored_message_from_row(r) for r in rows)
