"""Every Python block of the README and of docs/ runs, and the docs say what is true now.

Each ```python block of README.md and docs/**/*.md runs on its own in a subprocess: a fresh
directory (pytest's tmp_path) as its working directory, this checkout on PYTHONPATH. A block
that reads ``SESSION_ACTORS_PG_URL`` gets a throwaway PostgreSQL schema (tests/pg.py) and is
skipped when no server answers, unless ``SESSION_ACTORS_REQUIRE_PG=1``. Snippets that are not
meant to run are fenced as ``text``, ``console`` or ``bash``, which are not executed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import isolated_postgres_url

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
BLOCK_TIMEOUT_S = 110


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of every ```python block of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def _cases() -> list:
    cases = []
    for page in PAGES:
        rel = page.relative_to(ROOT).as_posix()
        for index, (line, code) in enumerate(python_blocks(page)):
            cases.append(pytest.param(rel, index, code, id=f"{rel}#{index}-line{line}"))
    return cases


CASES = _cases()


def _run(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = cwd / "block.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, env=env
    )


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 10)
@pytest.mark.parametrize(("page", "index", "code"), CASES)
def test_python_block_runs(tmp_path, page, index, code):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if "SESSION_ACTORS_PG_URL" in code:
        with isolated_postgres_url() as url:  # skips (or fails under REQUIRE_PG) without a server
            result = _run(code, tmp_path, {**env, "SESSION_ACTORS_PG_URL": url})
    else:
        result = _run(code, tmp_path, env)
    assert result.returncode == 0, f"{page} block {index} exited {result.returncode}:\n{result.stderr}"


def test_the_pages_have_python_blocks():
    """The collection above finds blocks (a broken fence pattern would make it pass vacuously)."""
    pages = {page for page, _, _ in (c.values for c in CASES)}
    assert "README.md" in pages
    assert len(pages) >= 3, pages


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_unlabelled_or_unrun_python_fences(page):
    """Code is fenced ```python (run here) or text/console/bash (not run): no ```py or bare
    opening fence that would hide Python from this test."""
    text = page.read_text(encoding="utf-8")
    opening = re.findall(r"^```(\S*)", text, re.M)[::2]  # every other fence opens a block
    assert not [lang for lang in opening if lang in ("", "py", "python3", "pycon")], page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_describe_the_present(page):
    """No diary: no "Session N", no earlier runs, no design file outside the repository."""
    text = page.read_text(encoding="utf-8")
    for pattern in (
        r"\bSession \d",
        r"\bsession \d+'s\b",
        r"earlier runs?\b",
        r"was not kept",
        r"DESIGN(\.md| section)",
    ):
        assert not re.search(pattern, text), f"{page.name}: {pattern}"


def test_every_docs_page_is_in_the_mkdocs_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^strict: true$", config, re.M)
    for page in DOCS.rglob("*.md"):
        assert page.relative_to(DOCS).as_posix() in config, page


def test_no_comment_cites_a_design_file_the_repository_does_not_ship():
    """Code says why in its own words (docs/architecture.md is the design document)."""
    here = Path(__file__).resolve()
    citing = [
        path.relative_to(ROOT).as_posix()
        for folder in ("protocol", "persistence", "actors", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if path != here and re.search(r"DESIGN(\.md| section)", path.read_text(encoding="utf-8"))
    ]
    assert citing == []
