"""Every output format of the ``session-actors`` CLI, rendered in one place.

A data command builds its result once, as a JSON document plus rows, and hands it to
`Output`: ``--format json`` (or ``--json``) writes exactly one JSON document,
``ndjson`` one JSON object per row, ``csv`` a header and one line per row, and
``table`` (the default) whatever the command draws with `Output.table`,
`Output.line` and `Output.tree`.

Tables never truncate: on a terminal (or when ``COLUMNS`` is set) a cell that does not
fit folds onto the next line, so an id is always whole; piped without ``COLUMNS`` a
table is plain aligned text at its natural width, one row per line, for grep and cut.
Colour only on a terminal, and never when ``NO_COLOR`` is set. Every line is flushed
as it is written (`line_buffered`), so a pipe or a CI log sees it at once.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from protocol import InvalidArgumentError
from protocol._jsonable import lease_dict, message_dict, session_dict, to_jsonable

__all__ = [
    "FORMATS",
    "Column",
    "Output",
    "add_format_options",
    "chosen_format",
    "console",
    "emit_json",
    "flatten",
    "fmt_time",
    "lease_dict",
    "line_buffered",
    "message_dict",
    "no_color",
    "session_dict",
    "shorten",
    "to_jsonable",
]

FORMATS = ("table", "json", "ndjson", "csv")


def add_format_options(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--json``; SUPPRESS defaults let them come before or after the command."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=argparse.SUPPRESS,
        help="table (default): for people; json: exactly one JSON document; ndjson: one JSON "
        "object per row; csv: a header line, then one line per row",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="same as --format json",
    )


def chosen_format(args: argparse.Namespace) -> str:
    """The format the options ask for (``--json`` is ``--format json``)."""
    fmt = getattr(args, "format", None)
    if getattr(args, "json", False):
        if fmt not in (None, "json"):
            raise InvalidArgumentError(f"--json and --format {fmt} contradict each other")
        return "json"
    return fmt or "table"


def line_buffered(stream: TextIO) -> None:
    """Flush ``stream`` at every newline (a pipe is block-buffered by default)."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(line_buffering=True)
        except (ValueError, OSError):  # a detached or exotic stream: explicit flushes remain
            pass


def no_color() -> bool:
    """https://no-color.org: a non-empty ``NO_COLOR`` turns colour off."""
    return bool(os.environ.get("NO_COLOR"))


def _columns_env() -> int | None:
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: its header and how its cells line up."""

    header: str
    justify: str = "left"  # "right" for numbers


class Output:
    """One command's output on ``stream`` (default: the current ``sys.stdout``)."""

    def __init__(self, args: argparse.Namespace, stream: TextIO | None = None) -> None:
        self.format = chosen_format(args)
        self.stream = sys.stdout if stream is None else stream
        self._console: Console | None = None

    @property
    def structured(self) -> bool:
        """True for json, ndjson and csv: the command calls `emit` and draws nothing."""
        return self.format != "table"

    # -- machine formats ----------------------------------------------------------

    def emit(self, document: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> None:
        """json: ``document``; ndjson: each row; csv: ``fields`` as header, then each row's."""
        if self.format == "json":
            emit_json(document, self.stream)
        elif self.format == "ndjson":
            for row in rows:
                self.stream.write(json.dumps(to_jsonable(row), ensure_ascii=False, separators=(",", ":")) + "\n")
        elif self.format == "csv":
            writer = csv.writer(self.stream, lineterminator="\n")
            writer.writerow(fields)
            for row in rows:
                writer.writerow([_csv_cell(row.get(name)) for name in fields])
        else:  # pragma: no cover - callers check `structured`
            raise ValueError(f"emit() is for structured formats, not {self.format}")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A hint for the person reading: stdout with a table, stderr beside data."""
        stream = sys.stderr if self.structured else self.stream
        stream.write(_printable(text) + "\n")
        stream.flush()

    # -- table format -------------------------------------------------------------

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = _make_console(self.stream)
        return self._console

    @property
    def _plain(self) -> bool:
        """Piped with no width asked for: aligned text at its natural width."""
        return not self.console.is_terminal and _columns_env() is None

    def line(self, text: str | Text = "", style: str | None = None) -> None:
        """One line of text (styles only where colour is on)."""
        if isinstance(text, str):
            text = Text(_printable(text), style=style or "")
        self.console.print(text, overflow="fold", crop=False)

    def table(self, title: str | None, columns: Sequence[str | Column], rows: Iterable[Sequence[Any]]) -> None:
        """A table whose cells are never cut: folded to the width, or at natural width."""
        cols = [c if isinstance(c, Column) else Column(c) for c in columns]
        cells = [[_cell(value) for value in row] for row in rows]
        if self._plain:
            self._plain_table(title, cols, cells)
            return
        tty = self.console.is_terminal
        table = Table(
            title=title,
            title_justify="left",
            box=box.SQUARE if tty else None,
            show_edge=tty,
            pad_edge=tty,
            header_style="bold" if tty else "",
        )
        for col in cols:
            table.add_column(col.header, justify=col.justify, overflow="fold")  # type: ignore[arg-type]
        for row in cells:
            table.add_row(*row)
        self.console.print(table)

    def tree(self, renderable: Any) -> None:
        """A rich renderable (a `rich.tree.Tree`), folded like tables."""
        self.console.print(renderable, overflow="fold", crop=False)

    def _plain_table(self, title: str | None, cols: Sequence[Column], cells: list[list[Text]]) -> None:
        plain = [[cell.plain for cell in row] for row in cells]
        headers = [col.header for col in cols]
        widths = [max([len(h)] + [len(row[i]) for row in plain]) for i, h in enumerate(headers)]
        if title:
            self._write(title)
        for row in [headers, *plain]:
            padded = [
                value.rjust(w) if col.justify == "right" else value.ljust(w) for value, w, col in zip(row, widths, cols)
            ]
            self._write("  ".join(padded).rstrip())

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def _make_console(stream: TextIO) -> Console:
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    columns = _columns_env()
    return Console(
        file=stream,
        width=columns if columns is not None else (None if is_tty else 100_000),
        force_terminal=is_tty,
        # no escape codes at all (not even bold) off a terminal or under NO_COLOR
        color_system="auto" if is_tty and not no_color() else None,
        no_color=no_color() or not is_tty,
        highlight=False,
        markup=False,  # stored content may contain [brackets]: never interpret it
        emoji=False,
        soft_wrap=False,
    )


def _printable(text: str) -> str:
    """Control characters shown escaped: stored text never drives the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _cell(value: Any) -> Text:
    if isinstance(value, Text):
        return value
    if value is None:
        return Text("")
    return Text(_printable(str(value)))


def _csv_cell(value: Any) -> Any:
    value = to_jsonable(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def fmt_time(epoch: float | None) -> str:
    """Epoch seconds as a UTC timestamp (empty for None)."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: str, width: int = 80) -> str:
    """One line, at most ``width`` characters (message previews; never ids)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def console(stream: TextIO | None = None) -> Console:
    """A console on ``stream`` (default: the current ``sys.stdout``) as `Output` uses.

    For commands that draw something `Output` has no method for; prefer `Output`."""
    return _make_console(sys.stdout if stream is None else stream)


def emit_json(document: Any, stream: TextIO | None = None) -> None:
    """Write one JSON document (and a newline) to stdout."""
    stream = sys.stdout if stream is None else stream
    stream.write(json.dumps(to_jsonable(document), indent=2, ensure_ascii=False) + "\n")
    stream.flush()


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one row with dotted keys (``throughput.messages_per_s``), for csv."""
    row: dict[str, Any] = {}
    for key, value in to_jsonable(document).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            row |= flatten(value, f"{name}.")
        else:
            row[name] = value
    return row
