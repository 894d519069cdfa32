"""A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
JSON messages separated by NUL on fds 3 and 4), so the docs tests can read a page's console, its
network requests and its layout with the standard library alone. Every host but 127.0.0.1 is
mapped to nothing, so a page that fetches from the internet logs the failure."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


@dataclass
class PageReport:
    url: str
    errors: list[str] = field(default_factory=list)       # console errors, exceptions, failed loads
    external: list[str] = field(default_factory=list)     # requests to any host but 127.0.0.1
    overflowing: list[str] = field(default_factory=list)  # code blocks and tables wider than their box
    scheme: str = ""                                       # Material's colour scheme: default or slate
    page_width: int = 0                                    # the page's own width: wider than the window scrolls sideways
    png: bytes = b""


class Browser:
    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        exe = chromium()
        if exe is None:
            raise FileNotFoundError("chromium")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:          # the protocol's fixed descriptors: 3 reads, 4 writes
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)   # neither is 3 or 4 any more
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", f"--window-size={width},{height}",
             "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(profile)})
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.width, self.height = width, height
        self._id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, timeout: float) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                return None
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise ConnectionError("chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            reply = self._read(end - time.monotonic())
            if reply is None:
                break
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)
        raise TimeoutError(method)

    def _drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            event = self._read(left)
            if event is not None:
                self._events.append(event)

    def open(self, url: str, *, dark: bool = False, screenshot: bool = False) -> PageReport:
        """Load `url` with the system's colour scheme light or dark. Material keeps the scheme a
        profile first saw (localStorage), so a profile is for one scheme."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            self.send(method, session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                          "deviceScaleFactor": 1, "mobile": False}, session)
        self.send("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]}, session)
        self._events.clear()
        self.send("Page.navigate", {"url": url}, session)
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(
                e.get("method") == "Page.loadEventFired" and e.get("sessionId") == session for e in self._events):
            self._drain(0.1)
        self._drain(0.5)            # what a page logs just after its load event
        report = PageReport(url)
        requested: dict[str, str] = {}
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            method, p = e.get("method"), e.get("params", {})
            if method == "Network.requestWillBeSent":
                requested[p["requestId"]] = p["request"]["url"]
                host = urlparse(p["request"]["url"]).hostname
                if urlparse(p["request"]["url"]).scheme in ("http", "https") and host != "127.0.0.1":
                    report.external.append(p["request"]["url"])
            elif method == "Network.loadingFailed" and not p.get("canceled"):
                report.errors.append(f"failed to load {requested.get(p['requestId'], '?')}: {p.get('errorText')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                report.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                            for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = p.get("exceptionDetails", {})
                report.errors.append("exception: " + str(details.get("exception", {}).get("description")
                                                         or details.get("text")))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                report.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        wide = self.send("Runtime.evaluate", {"returnByValue": True, "expression": """
            Array.from(document.querySelectorAll('.md-content pre > code, .md-content table'))
              .filter(el => el.scrollWidth > el.clientWidth + 1)
              .map(el => el.tagName + ': ' + el.textContent.trim().slice(0, 80))"""}, session)
        report.overflowing = wide.get("result", {}).get("value", [])
        width = self.send("Runtime.evaluate", {"returnByValue": True, "expression":
                          "document.documentElement.scrollWidth"}, session)
        report.page_width = int(width.get("result", {}).get("value", 0) or 0)
        scheme = self.send("Runtime.evaluate", {"returnByValue": True, "expression":
                           "document.body && document.body.getAttribute('data-md-color-scheme') || ''"}, session)
        report.scheme = scheme.get("result", {}).get("value", "")
        if screenshot:
            data = self.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
            report.png = base64.b64decode(data)
        self.send("Target.closeTarget", {"targetId": target})
        return report
