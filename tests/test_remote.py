"""--allow-remote fetches http(s) images (bounded); without it a URL is a VLM105 finding, never fetched."""

from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest
from PIL import Image

from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner


@pytest.fixture()
def served(tmp_path):
    """A loopback HTTP server over tmp_path/www, counting its requests."""
    root = tmp_path / "www"
    root.mkdir()
    Image.new("RGB", (640, 480), "red").save(root / "a.jpg")
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()


def _scan(tmp_path, url, **options):
    row = {
        "id": "r",
        "image": url,
        "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
    }
    manifest = tmp_path / "data.jsonl"
    manifest.write_text(json.dumps(row) + "\n")
    scanner = Scanner(ScanConfig(dataset=str(manifest), model=str(PROCESSORS / "qwen2-vl-small"), **options))
    return list(scanner.scan())[0]


def test_urls_are_not_fetched_by_default(tmp_path, served):
    base, requests = served
    outcome = _scan(tmp_path, f"{base}/a.jpg")
    assert [f.code for f in outcome.findings] == ["VLM105"] and requests == []


def test_allow_remote_fetches_once_and_counts(tmp_path, served):
    base, requests = served
    outcome = _scan(tmp_path, f"{base}/a.jpg", allow_remote=True, exact=True)
    assert outcome.findings == () and outcome.result.image_tokens[0] > 0
    assert len(requests) == 1  # the exact path reuses the header's download


def test_a_missing_remote_image_is_a_finding(tmp_path, served):
    base, _ = served
    outcome = _scan(tmp_path, f"{base}/nope.jpg", allow_remote=True)
    assert [f.code for f in outcome.findings] == ["VLM103"]
