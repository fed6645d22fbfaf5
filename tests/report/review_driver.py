"""A headless chromium that a test drives like a reviewer: keys, clicks, reload, download.

Built on :mod:`tests.report.browser` (the DevTools protocol over ``websockets``); one
browser and one profile for the whole visit, so the page's ``localStorage`` survives a
reload as it does for a reviewer. Used by test_review_page.py and by
docs/review.md's screenshots (``python -m tests.report.review_driver RUN_DIR OUT_DIR``).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

from tests.report.browser import _FLAGS, _Session


class ReviewBrowser:
    """``with ReviewBrowser(chromium, downloads) as b: b.open(page); b.key('a') ...``"""

    def __init__(self, chromium: str, downloads: Path, width: int = 1280, height: int = 900, timeout_s: float = 90.0) -> None:
        self.chromium, self.downloads, self.width, self.height, self.timeout_s = chromium, downloads, width, height, timeout_s

    def __enter__(self) -> ReviewBrowser:
        self._profile = tempfile.TemporaryDirectory(prefix="evalcore-review-chromium-")
        self.proc = subprocess.Popen([self.chromium, *_FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-port=0", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit status {self.proc.poll()})")
            time.sleep(0.1)
        port, path = port_file.read_text().splitlines()[:2]
        self._ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=self.timeout_s)
        self.s = _Session(self._ws)
        self.s.call("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(self.downloads), "eventsEnabled": True})
        target = self.s.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.sid = self.s.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Network.enable", "Page.enable", "Runtime.enable"):
            self.call(method)
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.s.call("Browser.close", timeout=10)
        except Exception:  # the browser may close the socket before it answers
            pass
        try:
            self._ws.close()
        finally:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
            self._profile.cleanup()

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.s.call(method, params, session=self.sid, timeout=self.timeout_s)

    def js(self, expression: str) -> object:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def _wait_ready(self) -> float:
        started = time.monotonic()
        self.s.wait_event("Page.loadEventFired", timeout=self.timeout_s)
        while self.js("document.body && document.body.dataset.ready") != "1":
            if time.monotonic() - started > self.timeout_s:
                raise RuntimeError("the review page never became ready")
            time.sleep(0.05)
        return time.monotonic() - started

    def open(self, page: Path) -> float:
        """Load the page; the seconds until its script is ready."""
        self.s.events.clear()
        started = time.monotonic()
        self.call("Page.navigate", {"url": page.resolve().as_uri()})
        self._wait_ready()
        return time.monotonic() - started

    def reload(self) -> None:
        self.s.events = [e for e in self.s.events if e.get("method") != "Page.loadEventFired"]
        self.call("Page.reload", {"ignoreCache": True})
        self._wait_ready()

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.s.events if e.get("method") == "Network.requestWillBeSent"]

    def key(self, key: str) -> None:
        """Press one key (a character or a DevTools key name such as ``Escape``)."""
        text = key if len(key) == 1 else ""
        self.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": key, "text": text, "unmodifiedText": text})
        self.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": key})

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", {"text": text})

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element (scrolled into view first)."""
        box = self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
                      "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def screenshot(self, path: Path) -> None:
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))

    def wait_download(self, name: str) -> Path:
        target = self.downloads / name
        deadline = time.monotonic() + self.timeout_s
        while not (target.is_file() and not list(self.downloads.glob("*.crdownload"))):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} was not downloaded")
            time.sleep(0.1)
        return target


def _screenshots(run_dir: Path, out: Path) -> None:
    """The screenshots of docs/review.md, taken on a run directory's review page."""
    import shutil

    chromium = shutil.which("chromium")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as downloads, ReviewBrowser(chromium, Path(downloads), width=1100, height=720) as b:
        seconds = b.open(run_dir / "review" / "index.html")
        print(f"ready after {seconds:.2f} s")
        b.screenshot(out / "review-page.png")
        b.key("a")
        b.key("j")
        b.key("3")
        b.key("s")
        b.key("s")
        b.click("#item-1 textarea")
        b.type_text("the prediction covers two fields")
        b.key("Escape")
        b.screenshot(out / "review-decided.png")


if __name__ == "__main__":
    _screenshots(Path(sys.argv[1]), Path(sys.argv[2]))
