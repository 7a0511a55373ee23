"""What one image may cost: header reads (TIFF tag arrays, bytes read), embedded data: URIs, FIFOs swapped
in after the check, and --allow-remote downloads that trickle. Each ends as VLM201 on its row, within
seconds, in a guarded run (peak memory under 1 GiB, nothing outside the dataset opened, no program)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import stat
import struct
import subprocess
import sys
import threading
import time
import zlib

import pytest
from PIL import Image

import vlmlint.images
from tests.hardening.conftest import MODEL, run_guarded, shape, time_limit
from tests.test_remote import _scan as scan_remote
from vlmlint.images import (
    MAX_HEADER_BYTES,
    MAX_TIFF_TAG_VALUES,
    ImageProblem,
    read_header,
)
from vlmlint.records import MAX_EMBEDDED_BYTES, ImageRef, MediaRef


def _row(index: int, image: str) -> dict:
    return {
        "id": f"r{index}",
        "image": image,
        "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}],
    }


@pytest.fixture()
def layout(tmp_path):
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    dataset.mkdir()
    outside.mkdir()
    Image.new("RGB", (64, 48), "blue").save(outside / "secret.jpg")
    Image.new("RGB", (64, 48), "red").save(dataset / "ok.jpg")
    return dataset, outside


def guarded_scan(dataset, rows, *flags, timeout=120):
    (dataset / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    started = time.monotonic()
    run = run_guarded(
        "scan",
        str(dataset / "data.jsonl"),
        "-m",
        MODEL,
        "--verify",
        "0",
        "-q",
        "--format",
        "json",
        *flags,
        timeout=timeout,
    )
    return run, time.monotonic() - started


def findings_by_id(run) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for finding in run.report["findings"]:
        if finding["code"].startswith(("VLM1", "VLM2")):
            found.setdefault(finding["id"], []).append(finding)
    return found


# -- TIFF headers: tag arrays PIL would unpack at open ------------------------------------------------------


def strips_tiff(path, strips: int) -> None:
    """A sparse TIFF of `strips` one-row strips: its StripOffsets / StripByteCounts arrays are zeros on disk."""
    entry = lambda tag, kind, count, value: struct.pack("<HHII", tag, kind, count, value)  # noqa: E731
    offsets, counts = 4096, 4096 + 4 * strips
    ifd = struct.pack("<H", 9) + b"".join(
        [
            entry(256, 4, 1, 1),
            entry(257, 4, 1, strips),
            entry(258, 3, 1, 8),
            entry(259, 3, 1, 1),
            entry(262, 3, 1, 1),
            entry(273, 4, strips, offsets),
            entry(277, 3, 1, 1),
            entry(278, 4, 1, 1),
            entry(279, 4, strips, counts),
        ]
    )
    with open(path, "wb") as handle:
        handle.write(b"II*\x00" + struct.pack("<I", 8) + ifd + b"\x00\x00\x00\x00")
        handle.truncate(counts + 4 * strips + 16)


def warning_flood_tiff(path, tags: int = 4000) -> None:
    """An 8x8 TIFF followed by `tags` byte tags each larger than the file: PIL warns once per tag."""
    base = [
        (256, 4, 1, 8),
        (257, 4, 1, 8),
        (258, 3, 1, 8),
        (259, 3, 1, 1),
        (262, 3, 1, 1),
        (273, 4, 1, 8),
        (277, 3, 1, 1),
        (278, 4, 1, 8),
        (279, 4, 1, 64),
    ]
    extra = [(tag, 7, 10**6, 8) for tag in range(65535 - tags, 65535)]  # UNDEFINED, a megabyte each
    entries = base + extra
    table = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries)
    path.write_bytes(b"II*\x00" + struct.pack("<I", 8) + table + b"\x00\x00\x00\x00")


@pytest.mark.parametrize("strips", [5_000_000, 10_000_000])
def test_tiff_declaring_millions_of_strips(layout, strips, record):
    dataset, outside = layout
    strips_tiff(dataset / "strips.tif", strips)
    for flags in ((), ("--exact",)):
        run, took = guarded_scan(dataset, [_row(0, "strips.tif"), _row(1, "ok.jpg")], *flags)
        found = findings_by_id(run)
        assert [f["code"] for f in found["r0"]] == ["VLM201"] and "r1" not in found
        assert run.peak_mb < 1024 and took < 60 and run.touched(outside) == []
    message = shape(found["r0"][0]["message"], dataset)
    assert f"{MAX_TIFF_TAG_VALUES:,}" in message
    size = os.path.getsize(dataset / "strips.tif") // 2**20
    record(
        "bounds",
        f"TIFF whose header declares {strips:,} strips (a sparse {size} MB file)",
        f'VLM201 "{message}" before PIL reads the arrays, also with --exact; the next row is scanned; '
        "peak memory below 1 GiB",
    )


def test_tiff_below_the_bound_is_read(tmp_path, record):
    strips = MAX_TIFF_TAG_VALUES // 2 - 16
    strips_tiff(tmp_path / "many.tif", strips)
    with time_limit(30, "the header read"):
        header = read_header(ImageRef("many.tif", path=str(tmp_path / "many.tif")))
    assert (header.width, header.height) == (1, strips)
    record(
        "bounds",
        f"TIFF with {strips:,} strips (just below the bound of {MAX_TIFF_TAG_VALUES:,} tag values)",
        f"read as usual (1 x {strips:,} px)",
    )


def test_pil_warnings_stay_off_stderr(layout, record):
    dataset, outside = layout
    warning_flood_tiff(dataset / "warns.tif")
    run, _ = guarded_scan(dataset, [_row(0, "warns.tif")])
    assert "Warning" not in run.stderr and len(run.stderr.splitlines()) < 5, run.stderr[:2000]
    assert run.peak_mb < 1024
    codes = sorted({f["code"] for f in findings_by_id(run).get("r0", [])})
    size = os.path.getsize(dataset / "warns.tif") // 1000
    plain = subprocess.run(  # what PIL alone writes on stderr for this file
        [
            sys.executable,
            "-c",
            "import sys; from PIL import Image; Image.open(sys.argv[1])",
            str(dataset / "warns.tif"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = len(plain.stderr.splitlines())
    assert lines > 1000
    record(
        "bounds",
        f"{size} KB TIFF with 4,000 tags larger than the file (PIL's Image.open alone: {lines:,} lines on stderr)",
        f"read ({', '.join(codes) or 'no image finding'}); PIL's warnings kept off stderr (no line)",
    )


def test_header_larger_than_the_bound(layout, record):
    """A PNG whose 100 MB ancillary chunk comes before the pixel data: PIL reads it to reach IDAT."""
    dataset, outside = layout

    def chunk(kind, payload):
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    size = 100 * 2**20
    with open(dataset / "big-chunk.png", "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)))
        handle.write(struct.pack(">I", size) + b"zzZz")
        handle.seek(size, os.SEEK_CUR)  # sparse
        handle.write(b"\x00" * 4 + chunk(b"IDAT", zlib.compress(b"\x00" * 200)) + chunk(b"IEND", b""))
    run, took = guarded_scan(dataset, [_row(0, "big-chunk.png"), _row(1, "ok.jpg")])
    found = findings_by_id(run)
    assert [f["code"] for f in found["r0"]] == ["VLM201"] and "r1" not in found
    message = shape(found["r0"][0]["message"], dataset)
    assert f"{MAX_HEADER_BYTES // 2**20} MiB" in message
    assert run.peak_mb < 1024 and took < 60 and run.touched(outside) == []
    record(
        "bounds",
        "PNG with a 100 MB ancillary chunk before its pixel data (a sparse file)",
        f'VLM201 "{message}"; peak memory below 1 GiB',
    )


# -- FIFOs: named in the row, or swapped in after the check --------------------------------------------------


def test_fifo_named_as_the_image_and_the_video(layout, record):
    dataset, outside = layout
    os.mkfifo(dataset / "pipe.jpg")
    os.mkfifo(dataset / "pipe.mp4")
    video_row = {  # LLaVA-Video's layout: the video next to the conversation
        "id": "r1",
        "video": "pipe.mp4",
        "conversations": [{"from": "human", "value": "<video>\nWhat?"}, {"from": "gpt", "value": "A cat."}],
    }
    run, took = guarded_scan(dataset, [_row(0, "pipe.jpg"), video_row], timeout=60)
    found = findings_by_id(run)
    assert "VLM201" in {f["code"] for f in found["r0"]} and "VLM201" in {f["code"] for f in found["r1"]}
    assert took < 60 and run.peak_mb < 1024
    for row, case in (("r0", "a FIFO named as the image (guarded run)"), ("r1", "a FIFO named as the video")):
        message = next(f["message"] for f in found[row] if f["code"] == "VLM201")
        record("images", case, f'VLM201 "{shape(message, dataset)}"; no hang')


def test_fifo_swapped_in_after_the_check(tmp_path, monkeypatch, record):
    """The race: stat says a regular file, then the path is a FIFO. The open must not block."""
    os.mkfifo(tmp_path / "swapped.jpg")
    os.mkfifo(tmp_path / "swapped.mp4")
    real_stat = os.stat

    class Regular:
        st_mode = stat.S_IFREG | 0o644

    def stale_stat(path, *args, **kwargs):  # what a check made just before the swap saw
        return Regular() if str(path).startswith(str(tmp_path)) else real_stat(path, *args, **kwargs)

    monkeypatch.setattr(vlmlint.images.os, "stat", stale_stat)
    from vlmlint.media import media_info

    with time_limit(10, "opening a FIFO swapped in after the check"):
        with pytest.raises(ImageProblem) as problem:
            read_header(ImageRef("swapped.jpg", path=str(tmp_path / "swapped.jpg")))
        clip = media_info(
            MediaRef("video", "swapped.mp4", path=str(tmp_path / "swapped.mp4")),
            allow_outside_root=False,
            image_header=None,
        )
    assert "a FIFO" in problem.value.message and clip.error_code == "unreadable" and "a FIFO" in clip.error
    record(
        "images",
        "an image (and a video) swapped for a FIFO between the check and the open (simulated: a stale stat)",
        f'VLM201 "{problem.value.message}": opened with O_NONBLOCK, checked on the descriptor (fstat); no hang',
    )


# -- embedded images: data: URIs ------------------------------------------------------------------------------


def test_huge_data_uris(layout, record):
    dataset, outside = layout
    rows_count, size = 6, 40 * 2**20
    uri = "data:image/png;base64," + base64.b64encode(b"\x00" * size).decode()
    rows = [_row(i, uri) for i in range(rows_count)] + [_row(rows_count, "ok.jpg")]
    run, took = guarded_scan(dataset, rows, timeout=240)
    found = findings_by_id(run)
    for i in range(rows_count):
        assert [f["code"] for f in found[f"r{i}"]] == ["VLM201"], found.get(f"r{i}")
    assert f"r{rows_count}" not in found
    assert run.peak_mb < 1024 and took < 200 and run.touched(outside) == []
    message = shape(found["r0"][0]["message"], dataset)
    assert f"{MAX_EMBEDDED_BYTES // 2**20} MiB" in message and f"{size:,} bytes" in message
    audio = {  # an OpenAI-layout file of its own: a file's rows share one layout
        "id": "audio",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": uri[22:], "format": "wav"}}],
            },
            {"role": "assistant", "content": "Yo"},
        ],
    }
    run, _ = guarded_scan(dataset, [audio], timeout=120)
    assert run.peak_mb < 1024
    audio_message = next(f["message"] for f in findings_by_id(run)["audio"] if f["code"] == "VLM201")
    record(
        "bounds",
        f"{rows_count} rows each embedding a {size // 2**20} MB image as a data: URI (a {len(uri) // 2**20} MB line)",
        f'VLM201 on each "{message}" (measured before decoding: no decoded copy); the next row is scanned; '
        "peak memory below 1 GiB",
    )
    record(
        "bounds",
        f"an OpenAI input_audio part of {size // 2**20} MB",
        f'VLM201 "{shape(audio_message, dataset)}"',
    )


# -- --allow-remote: one fetch's whole time and size ----------------------------------------------------------


@pytest.fixture()
def trickling():
    """A loopback server: /slow sends a byte every 0.2 s for ever, /big 40 MB, /slow-headers one header byte at a time."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            try:
                if self.path == "/slow-headers":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    while not stop.is_set():
                        self.wfile.write(b"X")
                        self.wfile.flush()
                        time.sleep(0.2)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                if self.path == "/big":
                    self.send_header("Content-Length", str(40 * 2**20))
                    self.end_headers()
                    block = b"\x00" * 2**20
                    for _ in range(40):
                        self.wfile.write(block)
                    return
                self.send_header("Content-Length", str(10**6))
                self.end_headers()
                while not stop.is_set():
                    self.wfile.write(b"\x89")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    stop.set()
    server.shutdown()


@pytest.mark.parametrize(
    "path,case",
    [
        ("/slow", "a server sending one byte of the body every 0.2 s (each read within the socket timeout)"),
        ("/slow-headers", "a server sending its headers one byte every 0.2 s"),
    ],
)
def test_trickling_server_meets_the_deadline(tmp_path, trickling, monkeypatch, path, case, record):
    monkeypatch.setattr(vlmlint.images, "REMOTE_DEADLINE_S", 2.0)  # 30 s in use: 2 s keeps the test short
    started = time.monotonic()
    with time_limit(20, "the fetch"):
        outcome = scan_remote(tmp_path, trickling + path, allow_remote=True)
    took = time.monotonic() - started
    codes = [f.code for f in outcome.findings if f.code.startswith(("VLM1", "VLM2"))]
    message = next(f.message for f in outcome.findings if f.code in ("VLM201", "VLM103"))
    assert codes == ["VLM201"] and "within 2 s" in message and took < 15, (codes, message, took)
    shown = message.replace(trickling, "http://127.0.0.1:PORT")
    shown = shape(shown.split(" (", 1)[0], tmp_path)  # the bytes received so far vary with timing
    record(
        "bounds",
        f"--allow-remote: {case}",
        f'VLM201 "{shown}" (REMOTE_DEADLINE_S, 30 s; 2 s in the test), the connection closed',
    )


def test_remote_image_above_the_size_cap(tmp_path, trickling, record):
    with time_limit(30, "the fetch"):
        outcome = scan_remote(tmp_path, trickling + "/big", allow_remote=True)
    message = next(f.message for f in outcome.findings if f.code == "VLM201")
    assert "larger than 32 MiB" in message
    record(
        "bounds",
        "--allow-remote: a 40 MB download",
        f'VLM201 "{message.replace(trickling, "http://127.0.0.1:PORT")}" (MAX_REMOTE_BYTES); read no further',
    )
