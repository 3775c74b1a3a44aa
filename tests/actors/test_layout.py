"""The runtime's layout stays as the architecture says: a small actors root, the
session actor's collaborators given a typed host (never a mixin re-declaring the
host's state), and no package reaching into a private module of the actors root."""

from __future__ import annotations

import ast
import pathlib

import pytest

ACTORS = pathlib.Path(__file__).resolve().parents[2] / "actors"
MAX_ROOT_MODULES = 12


def _sources() -> list[pathlib.Path]:
    return sorted(ACTORS.rglob("*.py"))


def test_the_actors_root_is_a_small_runtime_root() -> None:
    modules = sorted(p.name for p in ACTORS.glob("*.py"))
    assert len(modules) <= MAX_ROOT_MODULES, modules


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ACTORS)))
def test_no_class_re_declares_its_host_under_type_checking(path: pathlib.Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            test = statement.test if isinstance(statement, ast.If) else None
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            assert name != "TYPE_CHECKING", f"{path.name}: class {node.name} declares state under TYPE_CHECKING"


def _root_private_imports(path: pathlib.Path) -> list[str]:
    """Modules of the actors root with an underscore name that ``path`` imports."""
    package = path.parent.relative_to(ACTORS.parent).parts  # ("actors", "serve", ...)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = list(package[: len(package) - node.level + 1])
            target = base + (node.module.split(".") if node.module else [])
        else:
            target = (node.module or "").split(".")
        if target == ["actors"]:
            found += [alias.name for alias in node.names if alias.name.startswith("_")]
        elif len(target) >= 2 and target[0] == "actors" and target[1].startswith("_"):
            found.append(target[1])
    return found


@pytest.mark.parametrize(
    "path", [p for p in _sources() if p.parent != ACTORS], ids=lambda p: str(p.relative_to(ACTORS))
)
def test_no_subpackage_imports_a_private_module_of_the_actors_root(path: pathlib.Path) -> None:
    assert _root_private_imports(path) == [], path
