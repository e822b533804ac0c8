"""The HTML report (``rewrite.html_report``): its content, and what a real browser shows.

- the page is self-contained (no scripts, no external resources: pictures are
  ``data:`` URIs of SVG documents), has the summary, the decision table, the
  timeline, the storage graph, a close-up per clone (a kept copy's says why its
  values share memory: ``AliasAnalysis.why``), the code with removed and
  kept clones marked, and the storages' accesses; without Graphviz it shows the
  DOT text and says why;
- in headless Chromium (Debian's ``chromium`` package, which ``.ci/run``
  installs), driven over the DevTools protocol with a small standard-library
  client: the page loads, every picture decodes (``naturalWidth > 0``), the
  console reports no error, and a full-page screenshot shows the pictures'
  colours (writes red, kept clones orange, removed clones green). The
  screenshot is kept under pytest's temporary folder (``FX_ALIASING_SCREENSHOTS``
  names another folder to keep it).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite.examples import DEMO_DONATED_INPUTS, trace_demo
from rewrite.explain import Explanation, explain
from rewrite.html_report import why_pair

#: The page in headless Chromium, pictures rendered by Graphviz and matplotlib.
pytestmark = pytest.mark.integration

pytest.importorskip("matplotlib", reason="matplotlib is not installed (the notebooks extra)")

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
HAS_DOT = shutil.which("dot") is not None


@pytest.fixture(scope="module")
def demo_explanation() -> Explanation:
    return explain(trace_demo(), donated_inputs=DEMO_DONATED_INPUTS, name="the demo block")


@pytest.fixture(scope="module")
def page(demo_explanation: Explanation) -> str:
    return demo_explanation.html()


def _images(page: str) -> list[tuple[str, bytes]]:
    return [(alt, base64.b64decode(data)) for alt, data in re.findall(r'<img alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)">', page)]


# --- content ------------------------------------------------------------------------------


def test_report_is_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    for alt, svg in _images(page):
        assert b"<svg" in svg[:2000], alt


def test_report_sections(page: str, demo_explanation: Explanation) -> None:
    for anchor in ("summary", "decisions", "timeline", "graph", "close-ups", "code", "storages"):
        assert f'id="{anchor}"' in page
    alts = [alt for alt, _ in _images(page)]
    assert alts[:2] == ["storage timeline", "storage graph"] if HAS_DOT else alts[:1] == ["storage timeline"]
    # a close-up per copy decided (the KV cache's write-back copy_ too), kept ones first
    assert [a for a in alts if a.startswith("timeline around")] == [
        "timeline around clone", "timeline around clone_1", "timeline around copy_",
        "timeline around clone_2", "timeline around clone_3", "timeline around clone_4",
    ]
    # the decision table: every decision with its condition, reason and evidence
    for d in demo_explanation.report.decisions:
        assert re.search(rf'<tr class="{d.action}"><td><code><a href="#clone-{d.node}">{d.node}</a>', page)
        assert html.escape(d.reason.description) in page
    assert "<code>rms_norm_, add_</code>" in page
    # the code: the removed clone's line green, the kept clone's orange, with the reason
    assert re.search(r'<span class="removed" title="removable">\s*clone_3 = torch.ops.aten.clone.default', page)
    assert re.search(r'<span class="kept" title="C3 clone-written-then-original-read \(evidence: rms_norm_, add_\)">', page)
    assert "<summary>the rewritten graph</summary>" in page
    assert "<summary><code>s10</code> intermediate, from <code>mm</code>" in page


def test_report_without_graphviz(demo_explanation: Explanation, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rewrite.html_report.graphviz_available", lambda: False)
    page = demo_explanation.html(title="no graphviz")
    assert "<title>no graphviz</title>" in page
    assert "is not installed (Debian: <code>apt-get install graphviz</code>); the DOT source:" in page
    assert "digraph storage_graph {" in page
    assert all(not alt.startswith("storage graph") for alt, _ in _images(page))


def test_kept_copies_say_why_they_share_memory(page: str, demo_explanation: Explanation) -> None:
    # the demo's write-back copy_ is kept: its destination and source live in distinct storages
    why = demo_explanation.analysis.why("slice_1", "getitem_1")
    assert "<summary>why <code>slice_1</code> and <code>getitem_1</code> share memory (no alias)</summary>" in page
    assert f"<pre>{html.escape(str(why))}</pre>" in page
    assert "k_cache_1 (user input) -&gt; slice_1 (slice)" in page
    # a clone kept because its original is written while it is live: the original and the writer
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x[1:]
        c = y.clone()
        x.add_(1)
        return c + y

    e = explain(make_fx(f, tracing_mode="fake")(torch.randn(4)))
    (d,) = e.report.decisions
    assert d.action == "keep" and why_pair(e.analysis, d) == ("slice_1", "add_")
    small = e.html()
    assert "<summary>why <code>slice_1</code> and <code>add_</code> share memory (may overlap)</summary>" in small
    assert html.escape(str(e.analysis.why("slice_1", "add_"))) in small
    assert "x_1 (user input) -&gt; add_ (add_, in place)" in small
    # removals and clones kept for their layout get none
    assert all(why_pair(demo_explanation.analysis, d) is None for d in demo_explanation.report.decisions if d.node != "copy_")


# --- in a browser -------------------------------------------------------------------------


class _WebSocket:
    """The client side of RFC 6455, as much of it as the DevTools protocol needs."""

    def __init__(self, url: str, timeout: float) -> None:
        match = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        assert match, url
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            assert chunk, "the browser closed the connection during the handshake"
            response += chunk
        head, _, self.buffer = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytes([0x81])  # FIN, text
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _frame(self) -> tuple[int, bytes] | None:
        """(first byte, payload) of the next whole frame in the buffer, consumed; None if incomplete."""
        buf = self.buffer
        if len(buf) < 2:
            return None
        n, start = buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                return None
            (n,), start = struct.unpack(">H", buf[2:4]), 4
        elif n == 127:
            if len(buf) < 10:
                return None
            (n,), start = struct.unpack(">Q", buf[2:10]), 10
        if len(buf) < start + n:
            return None
        self.buffer = buf[start + n :]
        return buf[0], buf[start : start + n]

    def receive(self) -> str:
        """The next text message (a timeout leaves what arrived so far in the buffer)."""
        message = b""
        while True:
            frame = self._frame()
            if frame is None:
                chunk = self.sock.recv(1 << 20)
                assert chunk, "the browser closed the connection"
                self.buffer += chunk
                continue
            first, payload = frame
            if first & 0x0F == 0x9:  # ping
                continue
            message += payload
            if first & 0x80:
                return message.decode()


class _Page:
    """One page of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, ws: _WebSocket) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return dict(message.get("result", {}))
            self.events.append(message)

    def wait_for(self, event: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            assert time.monotonic() < deadline, f"no {event} within {timeout} s"
            self.events.append(json.loads(self.ws.receive()))

    def drain(self, seconds: float) -> None:
        """Collect the events that arrive within ``seconds``."""
        previous = self.ws.sock.gettimeout()
        self.ws.sock.settimeout(seconds)
        try:
            while True:
                self.events.append(json.loads(self.ws.receive()))
        except TimeoutError:
            pass
        finally:
            self.ws.sock.settimeout(previous)

    def errors(self) -> list[str]:
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(str(params["entry"].get("text")))
        return found


@contextmanager
def _chromium(timeout: float = 60.0) -> Iterator[_Page]:
    assert CHROMIUM is not None
    # Chromium's helper processes may still write the profile for a moment after it exits: a
    # leftover file must not fail the test (two suites running it side by side showed it).
    with tempfile.TemporaryDirectory(prefix="fx-aliasing-chromium-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}",
                "--remote-debugging-port=0", "--window-size=1400,1000", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the helpers it starts are ended with it
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + timeout
            while not (port_file.exists() and port_file.read_text().strip()):
                assert process.poll() is None, "chromium exited at start"
                assert time.monotonic() < deadline, "chromium did not open its DevTools port"
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as response:
                targets = json.load(response)
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            ws = _WebSocket(url, timeout)
            try:
                yield _Page(ws)
            finally:
                ws.sock.close()
        finally:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=20)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to Chromium and every helper process of its group (gone already: nothing to do)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _colour_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    r0, g0, b0 = rgb
    return sum(
        count
        for count, (r, g, b) in image.getcolors(maxcolors=1 << 24) or []
        if abs(r - r0) <= tolerance and abs(g - g0) <= tolerance and abs(b - b0) <= tolerance
    )


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it where it can)",
)
def test_report_renders_in_chromium(tmp_path: Path, demo_explanation: Explanation) -> None:
    report = demo_explanation.write_html(tmp_path / "report.html")
    with _chromium() as browser:
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable")
        browser.call("Page.navigate", url=report.resolve().as_uri())
        browser.wait_for("Page.loadEventFired", timeout=60)
        browser.drain(1.0)
        state = browser.call(
            "Runtime.evaluate",
            expression="JSON.stringify([...document.images].map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight]))",
            returnByValue=True,
        )
        images = json.loads(state["result"]["value"])
        metrics = browser.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        width, height = int(size["width"]), min(int(size["height"]), 16000)
        shot = browser.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )
        browser.drain(0.3)
        errors = browser.errors()
    png = base64.b64decode(shot["data"])
    keep = Path(os.environ.get("FX_ALIASING_SCREENSHOTS", tmp_path))
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "report.png").write_bytes(png)
    assert errors == [], errors
    expected = 2 * (1 + len(demo_explanation.report.decisions)) if HAS_DOT else 1 + len(demo_explanation.report.decisions)
    assert len(images) == expected, images
    for alt, complete, natural_width, natural_height in images:
        assert complete and natural_width > 100 and natural_height > 100, (alt, natural_width, natural_height)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # the pictures are on screen: the timeline's writes, the kept and removed clones' colours
    assert _colour_pixels(png, (0xD6, 0x27, 0x28)) > 200  # writes
    assert _colour_pixels(png, (0xFF, 0xD1, 0x9A)) > 2000  # kept clones
    assert _colour_pixels(png, (0xB9, 0xE6, 0xB9)) > 2000  # removed clones
    if HAS_DOT:
        assert _colour_pixels(png, (0xD6, 0xE6, 0xF7)) > 2000  # the graph's user-input boxes


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_chromium_client_sees_console_errors(tmp_path: Path) -> None:
    # the check above is only worth something if errors would be seen
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.png"><script>console.error("boom")</script></body></html>')
    with _chromium() as browser:
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable")
        browser.call("Page.navigate", url=page.as_uri())
        browser.wait_for("Page.loadEventFired", timeout=60)

        def both_seen() -> bool:
            errors = browser.errors()
            return any("boom" in e for e in errors) and any("missing.png" in e or "ERR_FILE_NOT_FOUND" in e for e in errors)

        deadline = time.monotonic() + 60  # on a loaded machine the log entries may come late
        while not both_seen() and time.monotonic() < deadline:
            browser.drain(1.0)
        errors = browser.errors()
    assert both_seen(), errors
