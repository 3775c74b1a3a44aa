"""Walking a lineage through the `Store` API alone: up to its root, then down through
every continuation. Shared by the CLI's ``lineage`` and the HTTP service's lineage
route, on any backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from protocol import SessionInfo

__all__ = ["root_of", "walk"]


class _Tree(Protocol):
    info: SessionInfo
    children: list[Any]


Node = TypeVar("Node", bound=_Tree)


def root_of(store: Any, info: SessionInfo) -> SessionInfo:
    """Follow parents up; a cycle or a missing parent stops the walk (fsck reports it)."""
    seen = {info.id}
    while info.parent_session_id and info.parent_session_id not in seen:
        parent = store.get_session(info.parent_session_id)
        if parent is None:
            break
        seen.add(parent.id)
        info = parent
    return info


def walk(store: Any, root: SessionInfo, node: Callable[[SessionInfo, int], Node]) -> list[Node]:
    """Every session under ``root`` as ``node(info, depth)``, depth-first, parents
    before children, each node's ``children`` filled (no recursion: a lineage may be
    thousands of rotations long; a cycle just ends the walk)."""
    first = node(root, 0)
    order, stack, seen = [], [(first, 0)], {root.id}
    while stack:
        current, depth = stack.pop()
        order.append(current)
        for child in store.children(current.info.id):
            if child.id not in seen:
                seen.add(child.id)
                current.children.append(node(child, depth + 1))
        stack.extend((c, depth + 1) for c in reversed(current.children))
    return order
