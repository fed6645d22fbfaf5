"""A headless chromium driven over the DevTools protocol, with no dependency beyond ``websockets``.

``websockets`` is already installed (Prefect needs it). The browser listens on a port
on 127.0.0.1 that it chooses itself (``--remote-debugging-port=0``, read back from
``DevToolsActivePort`` in its profile directory); :func:`open_page` loads one file and
returns every request the page made (the Network domain's ``requestWillBeSent``), what
its images decoded to, a full-page screenshot and the values of the JavaScript
expressions it was given (computed styles, element geometry).
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from websockets.sync.client import connect

_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--metrics-recording-only", "--mute-audio",
)

_IMAGES_JS = """JSON.stringify(Array.from(document.images).map(i => ({
  figure: (i.closest('figure') || {dataset: {}}).dataset.figure || null,
  complete: i.complete, width: i.naturalWidth, height: i.naturalHeight})))"""


@dataclass
class PageVisit:
    requests: list[str]  # every URL the page requested, in order
    images: list[dict]  # per <img>: figure name, complete, natural size
    screenshot: bytes  # PNG of the whole page
    console_errors: list[str]
    values: dict  # name -> the JSON value of each expression given to open_page


class _Session:
    def __init__(self, ws: object) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60.0) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 60.0) -> dict:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout
        while True:
            event = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            self.events.append(event)
            if event.get("method") == method:
                return event


def open_page(chromium: str, page: Path, width: int = 1280, height: int = 900, timeout_s: float = 90.0,
              evaluate: dict[str, str] | None = None) -> PageVisit:
    """Load ``page`` (a local file) in a fresh headless chromium and record what happened.

    ``evaluate`` maps names to JavaScript expressions evaluated in the loaded page; each
    must return something ``JSON.stringify`` accepts, and its parsed value is in
    ``PageVisit.values`` under its name.
    """
    with tempfile.TemporaryDirectory(prefix="evalcore-chromium-") as profile:
        proc = subprocess.Popen([chromium, *_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + timeout_s
            while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not start (exit status {proc.poll()})")
                time.sleep(0.1)
            port, path = port_file.read_text().splitlines()[:2]
            with connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=timeout_s) as ws:
                s = _Session(ws)
                target = s.call("Target.createTarget", {"url": "about:blank"})["targetId"]
                sid = s.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
                for method in ("Network.enable", "Page.enable", "Runtime.enable"):
                    s.call(method, session=sid)
                s.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=sid)
                s.events.clear()
                s.call("Page.navigate", {"url": page.resolve().as_uri()}, session=sid)
                s.wait_event("Page.loadEventFired", timeout=timeout_s)
                images = json.loads(s.call("Runtime.evaluate", {"expression": _IMAGES_JS, "returnByValue": True}, session=sid)["result"]["value"])
                values = {}
                for key, expression in (evaluate or {}).items():
                    result = s.call("Runtime.evaluate", {"expression": f"JSON.stringify({expression})", "returnByValue": True}, session=sid)
                    if "exceptionDetails" in result:
                        raise RuntimeError(f"{key}: {result['exceptionDetails'].get('exception', {}).get('description', result['exceptionDetails'])}")
                    values[key] = json.loads(result["result"]["value"])
                size = s.call("Page.getLayoutMetrics", session=sid)["cssContentSize"]
                shot = s.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                          "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}},
                              session=sid, timeout=timeout_s)
                requests = [e["params"]["request"]["url"] for e in s.events if e.get("method") == "Network.requestWillBeSent"]
                errors = [e["params"]["entry"].get("text", "") for e in s.events
                          if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"]
                errors += [str(e["params"].get("args")) for e in s.events if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error"]
                try:
                    s.call("Browser.close", timeout=10)
                except Exception:  # the browser may close the socket before it answers
                    pass
            return PageVisit(requests, images, base64.b64decode(shot["data"]), errors, values)
        finally:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
