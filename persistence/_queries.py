"""Named SQL blocks loaded from package data, one mapping per dialect.

Every backend is a dumb connector running named queries: the SQL (and the
invariants it enforces) lives in ``persistence/<dialect>/*.sql``. A block
starts at a line ``-- name: <block_name>`` and runs to the next such line; the
comment lines that open it describe it (the first says what it does in one line)
and are not sent with the statement.
Each dialect writes its own parameter style (``:name`` for SQLite,
``%(name)s`` for psycopg); this loader does not touch the text.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

from protocol import ConfigurationError

__all__ = ["block_descriptions", "load_queries", "parse_named_blocks"]

logger = logging.getLogger("session_actors.queries")

_NAME_LINE = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")


def parse_named_blocks(text: str, *, source: str = "<sql>") -> dict[str, str]:
    """Split ``text`` into ``{name: sql}``; text before the first marker is ignored.

    Raises: `ConfigurationError` for a duplicate or empty block (a packaging bug).
    """
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            name = match.group(1)
            if name in blocks:
                raise ConfigurationError(f"duplicate SQL block {name!r} in {source}")
            current = blocks[name] = []
        elif current is not None:
            current.append(line)
    result = {}
    for name, lines in blocks.items():
        sql = "\n".join(_after_description(lines)).strip()
        if not sql:
            raise ConfigurationError(f"empty SQL block {name!r} in {source}")
        result[name] = sql
    return result


def _after_description(lines: list[str]) -> list[str]:
    """A block's lines without the comment lines (and blank lines) that open it."""
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].lstrip().startswith("--")):
        start += 1
    return lines[start:]


def block_descriptions(text: str) -> dict[str, str]:
    """``{name: description}`` of the named blocks in ``text``: the comment line
    right after each ``-- name:`` line, without its dashes ("" when there is none)."""
    lines = text.splitlines()
    found = {}
    for number, line in enumerate(lines):
        match = _NAME_LINE.match(line.strip())
        if match:
            following = lines[number + 1].strip() if number + 1 < len(lines) else ""
            found[match.group(1)] = following.removeprefix("--").strip() if following.startswith("--") else ""
    return found


@functools.cache
def load_queries(dialect: str) -> Mapping[str, str]:
    """All named blocks of ``persistence/<dialect>/*.sql`` (not migrations).

    Raises: `ConfigurationError` for an unknown dialect or a duplicate name.
    """
    folder = resources.files("persistence").joinpath(dialect)
    if not folder.is_dir():
        raise ConfigurationError(f"no SQL for dialect {dialect!r}")
    merged: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql") or not entry.is_file():
            continue
        for name, sql in parse_named_blocks(entry.read_text("utf-8"), source=entry.name).items():
            if name in merged:
                raise ConfigurationError(f"duplicate SQL block {name!r} in dialect {dialect!r}")
            merged[name] = sql
    logger.debug("loaded %d %s queries", len(merged), dialect)
    return MappingProxyType(merged)
