"""The HTML report: one self-contained page, checked as text and in a real headless Chromium.

The browser is driven over the Chrome DevTools Protocol on a pipe (--remote-debugging-pipe: no port, no
extra Python package): console errors, uncaught exceptions, CSP violations and failed loads are
collected while the page loads, and the DOM is queried with Runtime.evaluate. Without a chromium binary
the browser tests are skipped, unless VLMLINT_REQUIRE_BROWSER=1 (CI), where they fail.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import queue
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.records import ImageRef
from vlmlint.report import html as html_report

MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()
XSS = '<script>alert("x")</script>"><img src=x onerror=alert(1)>'


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = _chromium()


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("VLMLINT_REQUIRE_BROWSER") == "1":
            pytest.fail("VLMLINT_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install -y chromium)")
        pytest.skip(
            "no chromium on PATH (apt-get install -y chromium); set VLMLINT_REQUIRE_BROWSER=1 to fail"
        )
    return CHROMIUM


def _above_nine(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """Headless Chromium spoken to over CDP on fds 3 (commands in) and 4 (replies out), NUL-framed."""

    def __init__(self, executable: str, profile: Path) -> None:
        self.log = profile.parent / "chromium.log"  # its stderr, for the failure message
        to_child, self._send_fd = os.pipe()
        self._recv_fd, from_child = os.pipe()
        # Move the child's ends above 9 so that the dup2 to fd 3 cannot clobber the one meant for fd 4.
        to_child, from_child = (_above_nine(fd) for fd in (to_child, from_child))
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # posix_spawn puts the pipe ends on fds 3 and 4, where Chromium expects them, and the log on 1, 2.
        log = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        log = _above_nine(log)
        self.pid = os.posix_spawn(
            executable,
            [executable, *flags],
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, to_child, 3),
                (os.POSIX_SPAWN_DUP2, from_child, 4),
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
            setsid=True,  # its own process group: close() can end every helper process it started
        )
        os.close(log)
        os.close(to_child)
        os.close(from_child)
        self._next_id = 0
        self._messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._recv_fd, 65536)
            if not chunk:
                self._messages.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._messages.put(json.loads(message))

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout=30.0):
        self._next_id += 1
        request = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        os.write(self._send_fd, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._next_message(deadline, method)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_event(self, method: str, session: str, timeout: float = 30.0) -> dict:
        for event in self.events:
            if event["method"] == method and event.get("sessionId") == session:
                return event
        deadline = time.monotonic() + timeout
        while True:
            message = self._next_message(deadline, method)
            if "method" in message:
                self.events.append(message)
                if message["method"] == method and message.get("sessionId") == session:
                    return message

    def _next_message(self, deadline: float, waiting_for: str) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"chromium did not answer {waiting_for}") from None
        if message is None:
            raise RuntimeError("chromium closed the DevTools pipe")
        return message

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.05)
        os.close(self._send_fd)
        self._reader.join(timeout=5)  # the pipe reached its end when Chromium exited
        if not self._reader.is_alive():
            os.close(self._recv_fd)


class Page:
    """One loaded page: its session, the errors it logged and the URLs it asked for."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str):
        result = self.browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            self.session,
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"evaluation failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        path.write_bytes(base64.b64decode(data))

    def _events(self, method: str) -> list[dict]:
        return [
            e["params"]
            for e in self.browser.events
            if e["method"] == method and e.get("sessionId") == self.session
        ]

    @property
    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls and browser log errors (CSP, failed loads)."""
        found = [
            f"exception: {p['exceptionDetails'].get('exception', {}).get('description') or p['exceptionDetails']}"
            for p in self._events("Runtime.exceptionThrown")
        ]
        found += [
            f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}"
            for p in self._events("Runtime.consoleAPICalled")
            if p["type"] in ("error", "assert")
        ]
        found += [
            f"log {p['entry'].get('source')}: {p['entry'].get('text')}"
            for p in self._events("Log.entryAdded")
            if p["entry"].get("level") == "error"
        ]
        return found

    @property
    def requested_urls(self) -> list[str]:
        return [p["request"]["url"] for p in self._events("Network.requestWillBeSent")]


def open_page(browser: Browser, path: Path) -> Page:
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page", "Network"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1400, "height": 1800, "deviceScaleFactor": 1, "mobile": False},
        session,
    )
    browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session)
    browser.wait_event("Page.loadEventFired", session)
    page = Page(browser, session)
    # Every <img> decoded (or failed) before anything is measured.
    page.evaluate("Promise.all(Array.from(document.images, i => i.decode().catch(() => null)))")
    return page


@pytest.fixture
def browser(chromium, tmp_path):
    instance = Browser(chromium, tmp_path / "chromium-profile")
    try:
        yield instance
    finally:
        instance.close()


# ---------------------------------------------------------------------------------------------- data


def _row(row_id: str, image, text: str = "<image>\n<image>\nDescribe.") -> dict:
    """Two placeholders for one image: every row gets a finding (VLM301), so every row is listed."""
    return {
        "id": row_id,
        "image": image,
        "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "Ok."}],
    }


def make_dataset(root: Path) -> Path:
    """Rows whose images cover every preview case: plain, alpha, 16-bit, CMYK, EXIF, corrupt,
    truncated, missing, remote, outside the dataset folder, too large; plus untrusted text."""
    folder = root / "data"
    folder.mkdir()
    Image.new("RGB", (320, 200), (200, 40, 40)).save(folder / "red.jpg")
    Image.new("RGBA", (100, 300), (0, 128, 0, 128)).save(folder / "alpha.png")
    Image.new("I;16", (64, 64), 40000).save(folder / "deep.png")
    Image.new("CMYK", (90, 90), (0, 255, 255, 0)).save(folder / "cmyk.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (300, 100), (30, 30, 200)).save(folder / "rotated.jpg", exif=exif)
    (folder / "corrupt.jpg").write_bytes(b"this is not an image")
    whole = folder / "whole.png"
    Image.effect_noise((256, 256), 64).convert("RGB").save(whole)
    (folder / "truncated.png").write_bytes(whole.read_bytes()[:2000])
    Image.new("RGB", (1200, 1000), (90, 90, 90)).save(folder / "large.png")
    Image.new("RGB", (50, 50), (0, 0, 0)).save(root / "outside.png")  # beside, not inside, the dataset
    rows = [
        _row("plain", "red.jpg"),
        _row("alpha", "alpha.png"),
        _row("deep", "deep.png"),
        _row("cmyk", "cmyk.jpg"),
        _row("rotated", "rotated.jpg"),
        _row("corrupt", "corrupt.jpg"),
        _row("truncated", "truncated.png"),
        _row("missing", "missing.jpg"),
        _row("remote", "http://example.invalid/cat.jpg"),
        _row("outside", "../outside.png"),
        _row("large", "large.png"),
        _row(XSS, "red.jpg", text=f"<image>\n<image>\n{XSS}"),
        "{not json " + XSS,
        _row("clean", "red.jpg", text="<image>\nDescribe."),
    ]
    manifest = folder / "data.jsonl"
    manifest.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return manifest


def scan_html(dataset: Path | str, out: Path, *extra: str) -> dict:
    """Scan with --format html -o OUT and --report beside it; return the JSON report of the same scan."""
    report = out.with_suffix(".json")
    result = runner.invoke(
        app,
        [
            "scan",
            str(dataset),
            "--model",
            MODEL,
            "-q",
            "--verify",
            "0",
            "--format",
            "html",
            "-o",
            str(out),
            "--report",
            str(report),
            *extra,
        ],
    )
    assert result.exit_code in (0, 1), result.output
    assert result.stdout == ""  # the page went to the file
    return orjson.loads(report.read_bytes())


@pytest.fixture
def scanned(tmp_path, monkeypatch):
    """The varied dataset scanned to HTML, with a preview limit low enough for large.png."""
    monkeypatch.setattr(html_report, "MAX_PREVIEW_PIXELS", 1_000_000)
    out = tmp_path / "report.html"
    report = scan_html(make_dataset(tmp_path), out)
    return out, report


# ------------------------------------------------------------------------------- page as text (no browser)


def _external_references(page: str) -> list[str]:
    return re.findall(
        r"""(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page, re.I
    ) + re.findall(r"url\(\s*['\"]?(?:https?:)?//", page, re.I)


def test_page_is_self_contained_and_escaped(scanned):
    out, report = scanned
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert _external_references(page) == []
    assert "http://example.invalid" not in page.replace("http://example.invalid/cat.jpg", "")  # only as text
    assert '<script>alert("x")</script>' not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # Exactly one script element: the page's own.
    assert page.count("<script") == 1
    assert "Content-Security-Policy" in page
    assert page.count('<tr data-code="') == len(report["findings"])


def test_previews_as_text(scanned):
    out, _ = scanned
    page = out.read_text()
    assert "no preview: remote: not fetched" in page
    assert "no preview: outside the dataset folder: not read" in page
    assert "no preview: too large to preview: 1200x1000 px" in page
    assert "no preview: missing: file not found" in page
    assert "no preview: unreadable:" in page
    # PIL's messages name the absolute path; the page shows the dataset's own reference instead.
    assert str(out.parent / "data" / "corrupt.jpg") not in page


def test_outside_root_image_is_shown_when_the_scan_allowed_it(tmp_path):
    out = tmp_path / "report.html"
    scan_html(make_dataset(tmp_path), out, "--allow-outside-root")
    page = out.read_text()
    assert "outside the dataset folder: not read" not in page
    assert 'alt="image 1: ../outside.png"' in page


def test_preview_and_table_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(html_report, "MAX_PREVIEW_FINDINGS", 2)
    monkeypatch.setattr(html_report, "MAX_TABLE_ROWS", 5)
    out = tmp_path / "report.html"
    report = scan_html(make_dataset(tmp_path), out)
    page = out.read_text()
    assert page.count("<img ") == 2
    assert "no preview: only the first 2 findings have one" in page
    assert page.count('<tr data-code="') == 5
    assert f"{len(report['findings']) - 5} more findings not listed" in page


def test_embedded_image_bytes_get_a_thumbnail():
    buffer = io.BytesIO()
    Image.new("RGB", (400, 100), "blue").save(buffer, format="PNG")
    preview = html_report.thumbnail(
        ImageRef("row 3 image", data=buffer.getvalue()), None, allow_outside_root=False
    )
    assert preview.uri is not None and preview.note == "400x100"
    thumb = Image.open(io.BytesIO(base64.b64decode(preview.uri.split(",", 1)[1])))
    assert thumb.size == (128, 32) and thumb.format == "JPEG"


def test_thumbnail_never_touches_urls_or_bombs(tmp_path, monkeypatch):
    remote = html_report.thumbnail(
        ImageRef("http://x/y.jpg", url="http://x/y.jpg"), None, allow_outside_root=True
    )
    assert remote.uri is None and remote.note == "remote: not fetched"
    monkeypatch.setattr(html_report, "MAX_PREVIEW_PIXELS", 100)
    Image.new("RGB", (20, 20)).save(tmp_path / "a.png")
    big = html_report.thumbnail(
        ImageRef("a.png", path=str(tmp_path / "a.png")), None, allow_outside_root=False
    )
    assert big.uri is None and "too large" in big.note
    monkeypatch.setattr(html_report, "MAX_PREVIEW_PIXELS", 10_000)
    small = html_report.thumbnail(
        ImageRef("a.png", path=str(tmp_path / "a.png")), None, allow_outside_root=False
    )
    assert small.uri is not None and small.uri.startswith("data:image/jpeg;base64,")


# ------------------------------------------------------------------------------------- in the browser


EXPECTED_PREVIEWS = {  # row id -> True (a picture) / note expected in its preview cell
    "plain": True,
    "alpha": True,
    "deep": True,
    "cmyk": True,
    "rotated": True,
    "corrupt": "unreadable",
    "truncated": "unreadable",
    "missing": "missing",
    "remote": "remote: not fetched",
    "outside": "outside the dataset folder",
    "large": "too large to preview",
    XSS: True,
}

DOM_QUERY = """(() => {
  const rows = Array.from(document.querySelectorAll('#findings tbody tr'));
  return {
    title: document.title,
    rows: rows.map(r => ({
      code: r.dataset.code,
      severity: r.dataset.severity,
      location: r.querySelector('td.loc').textContent,
      id: r.querySelector('td.id').textContent,
      images: Array.from(r.querySelectorAll('img'), i => ({w: i.naturalWidth, h: i.naturalHeight, complete: i.complete})),
      notes: Array.from(r.querySelectorAll('.nopreview'), n => n.textContent),
      visible: !r.hidden,
    })),
    histograms: Array.from(document.querySelectorAll('svg.hist'), s => s.querySelectorAll('rect.bar').length),
    captions: Array.from(document.querySelectorAll('figcaption'), c => c.textContent),
    byCode: Array.from(document.querySelectorAll('#by-code tbody tr'), r => Array.from(r.cells, c => c.textContent)),
    filtersShown: !document.getElementById('filters').hidden,
    scripts: document.scripts.length,
    xssImages: document.querySelectorAll('img[src="x"]').length,
  };
})()"""


def test_report_in_headless_chromium(browser, scanned, tmp_path):
    out, report = scanned
    page = open_page(browser, out)
    dom = page.evaluate(DOM_QUERY)
    assert page.errors == []
    assert [u for u in page.requested_urls if not u.startswith(("file:", "data:"))] == []

    assert dom["title"].startswith("vlmlint report: ")
    expected = [(f["code"], f["severity"], f["id"] or "") for f in report["findings"]]
    assert [(r["code"], r["severity"], r["id"]) for r in dom["rows"]] == expected
    assert all(r["visible"] for r in dom["rows"])
    locations = {f"{f['source']}:{f['line']}" for f in report["findings"]}
    assert {r["location"] for r in dom["rows"]} == locations

    for row in dom["rows"]:
        if row["code"] == "VLM101":  # the malformed line has no image
            assert row["notes"] == ["no image in this row"]
            continue
        wanted = EXPECTED_PREVIEWS[row["id"]]
        if wanted is True:
            assert row["images"] and all(
                i["complete"] and i["w"] > 0 and i["h"] > 0 for i in row["images"]
            ), row
            assert max(max(i["w"], i["h"]) for i in row["images"]) <= 128
        else:
            assert row["images"] == [] and len(row["notes"]) == 1 and wanted in row["notes"][0], row
    rotated = next(r for r in dom["rows"] if r["id"] == "rotated")["images"][0]
    assert rotated["h"] > rotated["w"]  # EXIF orientation 6 applied: 300x100 stored, shown upright

    assert len(dom["histograms"]) == 2 and all(n > 0 for n in dom["histograms"])
    assert dom["captions"] == ["Sequence length per row", "Image tokens per image"]
    assert {r[0]: int(r[3]) for r in dom["byCode"]} == report["summary"]["by_code"]
    assert dom["filtersShown"] and dom["scripts"] == 1 and dom["xssImages"] == 0

    # The optional filter: only VLM301 rows stay visible.
    shown = page.evaluate(
        """(() => { const s = document.getElementById('filter-code'); s.value = 'VLM301';
        s.dispatchEvent(new Event('change'));
        return Array.from(document.querySelectorAll('#findings tbody tr'), r => r.hidden ? null : r.dataset.code)
          .filter(Boolean); })()"""
    )
    assert shown == ["VLM301"] * report["summary"]["by_code"]["VLM301"]
    assert page.errors == []
    page.screenshot(tmp_path / "report.png")  # kept in tmp_path for a look when a test fails


def test_demo_report_in_headless_chromium(browser, tmp_path):
    out = tmp_path / "demo.html"
    report = scan_html(DATASETS / "demo", out)
    page = open_page(browser, out)
    dom = page.evaluate(DOM_QUERY)
    assert page.errors == []
    assert [u for u in page.requested_urls if not u.startswith(("file:", "data:"))] == []
    assert [r["code"] for r in dom["rows"]] == [f["code"] for f in report["findings"]]
    assert sum(len(r["images"]) for r in dom["rows"]) >= 1
    assert all(i["w"] > 0 for r in dom["rows"] for i in r["images"])
    assert len(dom["histograms"]) == 2


def test_the_harness_sees_errors_and_requests(browser, tmp_path):
    """The checks above are not vacuous: a broken page is caught (loopback only, nothing leaves the host)."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><img src='http://127.0.0.1:9/x.png'>"
        "<script>console.error('boom'); throw new Error('kaput');</script></body></html>"
    )
    page = open_page(browser, bad)
    page.evaluate("1")
    errors = " | ".join(page.errors)
    assert "boom" in errors and "kaput" in errors
    assert "http://127.0.0.1:9/x.png" in page.requested_urls
