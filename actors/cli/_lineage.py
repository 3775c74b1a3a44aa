"""``session-actors lineage ID``: the continuations around a session.

A straight chain (every session has at most one continuation, the common case: a
session rotated N times) prints as one short list: the root, a count of what lies
between, the asked session and the live tip. Only a lineage that forks prints as a
tree, its forks marked, each straight run inside it shortened the same way. Machine
formats get every session of the lineage as a flat row (depth-first, parents first):
never a nested document as deep as the lineage is long. A branch (`Store.branch`)
is not a continuation: the lineage says which session it came from, and which
branches were started from its sessions.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from rich.tree import Tree

from persistence.internal import root_of, walk
from protocol import SessionInfo

from ._database import open_existing
from ._inspect import existing_session, live_tip, state_text
from ._output import Column, Output, session_dict

__all__ = ["cmd_lineage"]

FIELDS = (
    "id",
    "parent_session_id",
    "depth",
    "children",
    "live",
    "end_reason",
    "epoch",
    "live_messages",
    "live_tip",
    "asked",
    "fork",
    "created_at",
)
#: A straight run longer than this shows its two ends and a count of the middle.
_SHOWN_WHOLE = 4


@dataclass
class _Node:
    info: SessionInfo
    depth: int
    live_messages: int
    children: list[_Node] = field(default_factory=list)


def cmd_lineage(args: argparse.Namespace) -> int:
    with open_existing(args, readonly=True) as store:
        asked = existing_session(store, args.session_id)
        root = root_of(store, asked)
        tip, forked = live_tip(store, root.id)
        nodes = walk(store, root, lambda info, depth: _Node(info, depth, len(store.transcript(info.id))))
        ids = {node.info.id for node in nodes}
        branches = [i for i in store.sessions() if i.branch_of is not None and i.branch_of[0] in ids]
    rows = [_row(node, asked.id, tip) for node in nodes]
    started = [{"id": b.id, "from": b.branch_of[0], "at_seq": b.branch_of[1]} for b in branches if b.branch_of]
    straight = all(len(node.children) <= 1 for node in nodes)
    out = Output(args)
    if out.structured:
        out.emit(
            {
                "root": root.id,
                "asked": asked.id,
                "live_tip": tip,
                "forked": forked,
                "straight": straight,
                "count": len(nodes),
                "sessions": rows,
                "branch_of": list(root.branch_of) if root.branch_of else None,
                "branches": started,
            },
            rows,
            FIELDS,
        )
        return 0
    if straight:
        _print_chain(out, nodes, asked.id, tip)
    else:
        _print_tree(out, nodes[0], asked.id, tip)
    if root.branch_of:
        out.line(f"a branch of {root.branch_of[0]} at seq {root.branch_of[1]}: a conversation of its own")
    for b in started:
        out.line(f"branch {b['id']} started from {b['from']} at seq {b['at_seq']} (a conversation of its own)")
    if forked:
        out.line(
            "lineage is FORKED: a compression-ended session has more than one child (run `session-actors fsck`)",
            style="bold red",
        )
    return 0


def _row(node: _Node, asked: str, tip: str | None) -> dict[str, Any]:
    return session_dict(node.info) | {
        "depth": node.depth,
        "children": len(node.children),
        "live_messages": node.live_messages,
        "live_tip": node.info.id == tip,
        "asked": node.info.id == asked,
        "fork": len(node.children) > 1,
    }


def _marks(node: _Node, asked: str, tip: str | None) -> list[str]:
    marks = []
    if node.info.id == tip:
        marks.append("live tip")
    if node.info.id == asked:
        marks.append("asked")
    if len(node.children) > 1:
        marks.append(f"FORK: {len(node.children)} children")
    return marks


def _keep(run: list[_Node], asked: str, tip: str | None) -> list[_Node | int]:
    """The run with its middle replaced by a count; the asked session and tip stay."""
    if len(run) <= _SHOWN_WHOLE:
        return list(run)
    pinned = {0, len(run) - 1} | {i for i, n in enumerate(run) if n.info.id in (asked, tip)}
    shown: list[_Node | int] = []
    hidden = 0
    for i, node in enumerate(run):
        if i in pinned:
            if hidden:
                shown.append(hidden)
                hidden = 0
            shown.append(node)
        else:
            hidden += 1
    return shown


def _print_chain(out: Output, chain: list[_Node], asked: str, tip: str | None) -> None:
    out.line(
        f"lineage of {asked}: a straight chain of {len(chain)} session(s), root {chain[0].info.id}, live tip {tip}"
    )
    rows: list[tuple[object, ...]] = []
    for item in _keep(chain, asked, tip):
        if isinstance(item, int):
            rows.append(("", f"... {item} continuation(s) ...", "", "", "", ""))
            continue
        rows.append(
            (
                item.depth,
                item.info.id,
                state_text(item.info),
                item.info.epoch,
                item.live_messages,
                ", ".join(_marks(item, asked, tip)),
            )
        )
    out.table(
        None,
        [Column("generation", "right"), "id", "state", Column("epoch", "right"), Column("messages", "right"), ""],
        rows,
    )


def _label(node: _Node, asked: str, tip: str | None) -> Text:
    text = Text(f"{node.info.id}  {state_text(node.info)}  epoch={node.info.epoch}  messages={node.live_messages}")
    marks = _marks(node, asked, tip)
    if marks:
        fork = len(node.children) > 1
        text.append(f"  [{', '.join(marks)}]", style="bold red" if fork else "bold")
    return text


def _print_tree(out: Output, root: _Node, asked: str, tip: str | None) -> None:
    out.line(f"lineage of {asked}: {root.info.id} has more than one continuation somewhere")
    tree = Tree(_label(root, asked, tip))
    stack: list[tuple[Tree, _Node]] = [(tree, root)]
    while stack:
        branch, node = stack.pop()
        for child in node.children:  # each subtree hangs on its own branch: order is kept
            run = _straight_run(child)
            target = branch
            for item in _keep(run, asked, tip):
                target = target.add(
                    Text(f"... {item} continuation(s) ...") if isinstance(item, int) else _label(item, asked, tip)
                )
            stack.append((target, run[-1]))
    out.tree(tree)


def _straight_run(node: _Node) -> list[_Node]:
    """``node`` and its single-child descendants, up to a fork or a leaf."""
    run = [node]
    while len(run[-1].children) == 1:
        run.append(run[-1].children[0])
    return run
