"""The web console in a real headless Chromium (Debian's ``chromium``): the page a
person sees is rendered from the service's own answers, screenshots kept in the
test's tmp dir."""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from persistence import open_store
from protocol import Message

from .client import Server, compacted_twice, start_server
from .narrow import NarrowPage

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Set by .ci/run: a missing browser fails these tests there instead of skipping them.
REQUIRED = os.environ.get("SESSION_ACTORS_REQUIRE_BROWSER") == "1"


@pytest.fixture(autouse=True)
def _browser() -> None:
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail("chromium required (SESSION_ACTORS_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")


def _browse(url: str, tmp_path: Path, name: str, width: int = 1400) -> tuple[str, Path]:
    """The DOM after the page's scripts ran, and a screenshot of it."""
    shot = tmp_path / f"{name}.png"
    flags = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={width},1000",
        "--virtual-time-budget=8000",
    ]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0, dom.stderr[-2000:]
    done = subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    return dom.stdout, shot


def _colours(png: Path) -> int:
    """How many distinct values a sample of the screenshot's rows holds. The rows are
    read as stored (PNG filters not undone): a blank page's rows filter to a handful
    of values, a page with text and boxes to many."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    idat = b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        at += 12 + length
    width, height, _depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    channels = {2: 3, 6: 4}[colour]
    raw = zlib.decompress(idat)
    stride = width * channels + 1
    rows = [raw[y * stride + 1 : (y + 1) * stride] for y in range(0, height, 7)]
    return len({row[x : x + channels] for row in rows for x in range(0, len(row), channels * 13)})


def _conversation(server: Server) -> str:
    assert server.call("PUT", "/v1/sessions/web:console", {"source": "web"}).status == 201
    messages = [
        {"role": "user", "content": "What is the weather in Lisbon?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lisbon"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"},
        {"role": "assistant", "content": "It is sunny and 21C in Lisbon."},
    ]
    for _ in range(4):
        for m in messages:
            assert server.call("POST", "/v1/sessions/web:console/messages", m).status == 201
    outcome = server.call("POST", "/v1/sessions/web:console/compact", {"force": True, "mode": "rotate"}).body
    assert outcome["status"] == "rotated", outcome
    assert (
        server.call("POST", "/v1/sessions/web:console/messages", {"role": "user", "content": "<b>not bold</b>"}).status
        == 201
    )
    return outcome["session_id"]


def test_the_console_shows_sessions_the_transcript_with_tool_runs_and_turns_and_the_lineage(server, tmp_path):
    child = _conversation(server)
    token = server.tokens["reader"]
    base = f"http://127.0.0.1:{server.port}/console"
    dom, shot = _browse(f"{base}?session={child}#token={token}", tmp_path, "transcript")
    assert "web:console" in dom and child in dom  # the sessions list and the picked one
    # one row per conversation: the session rotated away from is folded into its continuation's
    assert f'data-id="{child}"' in dom and 'data-id="web:console"' not in dom and "continues web:console" in dom
    assert 'data-ready="transcript"' in dom
    assert 'class="tools"' in dom and "weather" in dom and "sunny, 21C" in dom  # the tool run, grouped
    assert 'class="turn"' in dom and "compaction summary" in dom
    assert "&lt;b&gt;not bold&lt;/b&gt;" in dom and "<b>not bold</b>" not in dom  # text, never markup
    assert _colours(shot) > 8

    dom, shot = _browse(f"{base}?session={child}&tab=lineage#token={token}", tmp_path, "lineage")
    assert 'id="lineage-graph"' in dom and dom.count("<rect") == 2 and 'data-id="web:console"' in dom
    assert _colours(shot) > 8

    dom, shot = _browse(f"{base}?session=web:console&tab=archive#token={token}", tmp_path, "archive")
    assert 'data-ready="archive"' in dom and 'class="archive-group"' in dom
    # the archive grouped by its compaction, each message marked dropped (summarized) or carried
    assert "16 dropped into the summary, 0 carried verbatim" in dom and "dropped (summarized)" in dom
    assert len(re.findall(r'class="msg role-\w+ dropped"', dom)) == 16
    assert _colours(shot) > 8

    dom, _ = _browse(f"{base}?session=web:console&tab=compactions#token={token}", tmp_path, "compactions")
    assert 'data-ready="compactions"' in dom and "Replaced" in dom and "Carried tail" in dom
    assert "rotate by head-tail" in dom and "What is the weather in Lisbon?" in dom
    replaced, summary = dom.split("Replaced", 1)[1].split("Summary", 1)
    assert "What is the weather in Lisbon?" in replaced and "[CONTEXT COMPACTION]" in summary.split("Carried tail")[0]


def test_the_archive_marks_the_tail_a_compaction_carried_verbatim(server, tmp_path):
    """A compaction whose snapshot ends before the session's last messages carries them
    past its summary: the archive shows them in that compaction's group, carried."""
    assert server.call("PUT", "/v1/sessions/web:carry", {"source": "web"}).status == 201
    for n in range(8):
        message = {"role": "user" if n % 2 == 0 else "assistant", "content": f"early {n}"}
        assert server.call("POST", "/v1/sessions/web:carry/messages", message).status == 201
    with open_store(str(tmp_path / "state.db")) as store:  # a compactor in another process
        lease = store.acquire_lease("web:carry", "elsewhere", 30)
        for n in range(2):  # written while it summarizes: past its snapshot
            message = {"role": "user" if n % 2 == 0 else "assistant", "content": f"late {n}"}
            assert server.call("POST", "/v1/sessions/web:carry/messages", message).status == 201
        summary = Message("user", "[CONTEXT COMPACTION] eight early messages")
        assert store.commit_compaction(lease, watermark=8, compacted=[summary], mode="in_place").tail_count == 2
    token = server.tokens["reader"]
    base = f"http://127.0.0.1:{server.port}/console"
    dom, _ = _browse(f"{base}?session=web:carry&tab=archive#token={token}", tmp_path, "carried")
    assert "8 dropped into the summary, 2 carried verbatim" in dom
    assert len(re.findall(r'class="msg role-\w+ carried"', dom)) == 2 and "retracted and other" not in dom


def test_the_console_fits_a_390_px_wide_screen(server, tmp_path):
    child = _conversation(server)
    token = server.tokens["reader"]
    base = f"http://127.0.0.1:{server.port}/console"
    page = NarrowPage(CHROMIUM, tmp_path / "narrow-profile", 390)
    try:
        for tab in ("transcript", "compactions", "lineage", "locks"):
            page.open(
                f"{base}?session={child}&tab={tab}#token={token}",
                f"document.getElementById('panel').dataset.ready === '{tab}'",
            )
            assert page.evaluate("window.innerWidth") == 390
            # nothing scrolls sideways, and the panel is as wide as the screen allows
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, tab
            assert page.evaluate("document.body.dataset.fits") == "yes"
            assert page.evaluate("document.getElementById('detail').getBoundingClientRect().width") > 300, tab
            assert _colours(page.screenshot(tmp_path / f"narrow-{tab}.png")) > 8
    finally:
        page.close()


def test_a_branch_links_to_where_it_came_from(server, tmp_path):
    assert server.call("PUT", "/v1/sessions/web:root", {"source": "web"}).status == 201
    for n in range(3):
        assert server.call("POST", "/v1/sessions/web:root/messages", {"role": "user", "content": f"m{n}"}).status == 201
    store = open_store(str(tmp_path / "state.db"))
    try:
        store.branch("web:root", 2, "web:branch")
    finally:
        store.close()
    dom, _ = _browse(f"http://127.0.0.1:{server.port}/console#token={server.tokens['reader']}", tmp_path, "branch")
    assert 'class="branch-of"' in dom and "branch of web:root @ #2" in dom
    assert 'href="?session=web%3Aroot"' in dom


def test_the_console_searches_live_and_archived_text(server, tmp_path):
    child = _conversation(server)
    token = server.tokens["reader"]
    dom, shot = _browse(f"http://127.0.0.1:{server.port}/console?q=sunny#token={token}", tmp_path, "search")
    assert 'data-ready="search"' in dom and 'class="hit archived"' in dom and 'class="hit"' in dom
    assert "[sunny]" in dom and "web:console #" in dom and f"{child} #" in dom
    assert _colours(shot) > 8


def test_the_console_shows_a_message_two_compactions_kept_as_one_hit(server, tmp_path):
    live_id = compacted_twice(server, "web:walk")
    token = server.tokens["reader"]
    dom, _ = _browse(f"http://127.0.0.1:{server.port}/console?q=sintra#token={token}", tmp_path, "one-hit")
    assert 'data-ready="search"' in dom and "1 hit(s)" in dom, dom
    assert dom.count('class="hit"') == 1 and 'class="hit archived"' not in dom and f"{live_id} #" in dom


def test_the_console_without_a_token_shows_the_error_and_no_data(server, tmp_path):
    _conversation(server)
    dom, _ = _browse(f"http://127.0.0.1:{server.port}/console", tmp_path, "no-token")
    assert "Unauthorized" in dom and "web:console" not in dom


def test_the_console_loads_nothing_from_elsewhere(server):
    page = server.call("GET", "/console")
    assert page.status == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.body.replace("http-equiv", "")  # no external URL at all
    script = server.call("GET", "/console/app.js")
    assert script.status == 200 and "innerHTML" not in script.body and "https://" not in script.body


def _subscribers(server: Server) -> int:
    text = server.call("GET", "/metrics").body
    found = re.search(r"^session_actors_event_subscribers (\d+)$", text, re.M)
    assert found is not None, text
    return int(found.group(1))


def _until(check, what: str, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {deadline_s}s")
        time.sleep(0.05)


def test_the_console_reconnects_its_event_stream_when_the_server_comes_back(tmp_path):
    db = str(tmp_path / "s.db")
    first = start_server(db, None, "--drain", "1")
    port = first.port
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"]
    browser = subprocess.Popen(
        [CHROMIUM, *flags, f"--user-data-dir={tmp_path / 'profile'}", f"http://127.0.0.1:{port}/console"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    second = None
    try:
        _until(lambda: _subscribers(first) == 1, "the console subscribes")
        assert first.stop() == 0
        second = start_server(db, None, "--port", str(port))
        assert second.port == port
        _until(lambda: _subscribers(second) == 1, "the console subscribes again")
    finally:
        os.killpg(browser.pid, signal.SIGTERM)
        browser.wait(30)
        if first.process.poll() is None:
            first.stop()
        if second is not None:
            assert second.stop() == 0
