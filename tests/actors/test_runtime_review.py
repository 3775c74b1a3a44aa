"""Review of the pooled runtime (actors without a thread of their own): what it must
keep from the thread-per-actor one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

#: A process whose work is done exits within this (it takes well under a second).
EXIT_WITHIN_S = 30


@pytest.mark.parametrize("used", [False, True], ids=["never-used", "used"])
def test_a_process_that_never_closes_its_registry_still_exits(tmp_path, used):
    """The pool's core worker waits for work for ever: as a non-daemon thread it kept
    the interpreter from exiting (main exited at once, or after idle eviction)."""
    script = textwrap.dedent(f"""
        from actors import CompactionPolicy, SessionRegistry
        from persistence import open_store
        registry = SessionRegistry(open_store({str(tmp_path / "state.db")!r}),
                                   policy=CompactionPolicy(idle_timeout_s=1))
        if {used!r}:
            handle = registry.session("s")
            handle.append("user", "hello")
            assert [m.content for m in handle.transcript()] == ["hello"]  # a pool worker ran
        print("done", flush=True)
    """)
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit within {EXIT_WITHIN_S}s after its work "
                    f"(stdout {exc.stdout!r})")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"
