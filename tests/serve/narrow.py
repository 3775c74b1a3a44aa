"""A page in Debian's chromium at a phone's width: headless Chromium will not open a
window narrower than 500 px, so the viewport is set through the DevTools protocol
(``Emulation.setDeviceMetricsOverride``), as a phone's would be. The protocol's
websocket is spoken by ``websockets`` (the openai-agents extra brings it)."""

from __future__ import annotations

import base64
import itertools
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

_LISTENING = re.compile(r"DevTools listening on (ws://127\.0\.0\.1:(\d+)/\S+)")


class NarrowPage:
    """One headless Chromium tab with a ``width`` px wide viewport."""

    def __init__(self, chromium: str, profile: Path, width: int, height: int = 844) -> None:
        from websockets.sync.client import connect  # openai-agents' dependency, installed in CI

        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"]
        self._browser = subprocess.Popen(
            [chromium, *flags, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = self._port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            page = next(t for t in json.load(answer) if t["type"] == "page")
        self._ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._ids = itertools.count(1)
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=True)

    def _port(self) -> int:
        assert self._browser.stderr is not None
        for line in self._browser.stderr:
            found = _LISTENING.search(line)
            if found:
                return int(found.group(2))
        raise AssertionError("chromium did not open its DevTools port")

    def send(self, method: str, **params: Any) -> Any:
        number = next(self._ids)
        self._ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("id") == number:
                assert "error" not in reply, reply
                return reply["result"]

    def evaluate(self, expression: str) -> Any:
        return self.send("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str, ready: str, within: float = 30.0) -> None:
        """Navigate and wait until ``ready`` (a JavaScript expression) is true."""
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + within
        while not self.evaluate(ready):
            assert time.monotonic() < deadline, f"{url}: {ready} never held"
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self._browser.terminate()
            try:
                self._browser.wait(30)
            finally:
                if self._browser.stderr is not None:
                    self._browser.stderr.close()
