"""Broken, hostile and special files where an image is expected: a finding on the row, never a crash,
never a hang, and never a decode of an image above the pixel limit."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageFile

import vlmlint.images
from tests.hardening.conftest import FUZZ, MODEL, run_cli, shape, time_limit
from vlmlint.config import THRESHOLD_DEFAULTS, ScanConfig
from vlmlint.engine import Scanner
from vlmlint.images import ImageProblem, decode_image, read_header
from vlmlint.models import load_model
from vlmlint.records import ImageRef
from vlmlint.verify import Verifier


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


def row(image: str, index: int = 0) -> dict:
    return {
        "id": f"r{index}",
        "image": image,
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is it?"},
            {"from": "gpt", "value": "A cat."},
        ],
    }


def scan(folder, images, model, **options):
    """Scan one llava row per image name; {name: (codes, messages)}."""
    names = list(images)
    (folder / "data.jsonl").write_text(
        "".join(json.dumps(row(name, i)) + "\n" for i, name in enumerate(names))
    )
    config = ScanConfig(dataset=str(folder / "data.jsonl"), model=MODEL, jobs=1, **options)
    with time_limit(30, "the scan"):
        outcomes = list(Scanner(config, model=model).scan())
    found = {}
    for name, outcome in zip(names, outcomes, strict=True):
        findings = [f for f in outcome.findings if f.code.startswith(("VLM1", "VLM2"))]
        found[name] = (sorted({f.code for f in findings}), [f.message for f in findings])
    return found


def noise(size=(160, 120)) -> Image.Image:
    import numpy as np

    pixels = np.random.default_rng(0).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def encoded(format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image = noise()
    image = image.convert("P") if format == "GIF" else image
    image.save(buffer, format, **options)
    return buffer.getvalue()


FORMATS = {
    "JPEG": "jpg",
    "PNG": "png",
    "GIF": "gif",
    "WEBP": "webp",
    "BMP": "bmp",
    "TIFF": "tif",
    "AVIF": "avif",
    "ICO": "ico",
}


@pytest.mark.parametrize("format", list(FORMATS))
def test_truncated_file_of_every_format(tmp_path, format, model, record):
    data = encoded(format)
    name = f"cut.{FORMATS[format]}"
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    default = scan(tmp_path, [name], model)[name]
    exact = scan(tmp_path, [name], model, exact=True)[name]
    assert default[0] == ["VLM201"] and exact[0] == ["VLM201"], (default, exact)
    record(
        "images",
        f"{format} cut at half its size",
        "VLM201 from the header path (no decode of a valid file), and with --exact",
    )


@pytest.mark.parametrize("format", ["JPEG", "PNG"])
def test_damage_inside_the_pixel_data(tmp_path, format, model, record):
    data = bytearray(encoded(format))
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(range(64))  # the markers and end stay intact
    name = f"damaged.{FORMATS[format]}"
    (tmp_path / name).write_bytes(bytes(data))
    default = scan(tmp_path, [name], model)[name][0]
    exact = scan(tmp_path, [name], model, exact=True)[name][0]
    record(
        "images",
        f"{format} with 64 bytes overwritten mid-file (end marker intact)",
        f"header path: {', '.join(default) or 'no finding'} (it reads no pixels); --exact: "
        f"{', '.join(exact) or 'no finding'}",
    )


@pytest.mark.parametrize(
    "case,name,data",
    [
        ("zero-byte file", "empty.jpg", b""),
        ("HTML error page saved as .jpg", "page.jpg", b"<html><body>404 Not Found</body></html>"),
        ("random bytes as .png", "noise.png", bytes(range(256)) * 4),
        ("SVG named .png", "vector.png", b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>'),
        ("SVG named .svg", "vector.svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>'),
        ("HEIC bytes PIL cannot read", "photo.heic", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"),
    ],
)
def test_not_an_image(tmp_path, case, name, data, model, record):
    (tmp_path / name).write_bytes(data)
    codes, messages = scan(tmp_path, [name], model)[name]
    assert codes == ["VLM201"], messages
    record("images", case, f'VLM201 "{shape(messages[0], tmp_path)}"')


# -- decompression bombs: headers only, never decoded ------------------------------------------------


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))


def jpeg_header(width: int, height: int) -> bytes:
    frame = struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8\xff\xc0" + frame + b"\xff\xd9"


def gif_header(width: int, height: int) -> bytes:
    screen = struct.pack("<HHBBB", width, height, 0, 0, 0)
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x02\x02\x4c\x01\x00"
    return b"GIF89a" + screen + image + b"\x3b"


def bmp_header(width: int, height: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 0, 0, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + info


def tiff(
    entries: list[tuple[int, int, int, int]], next_ifd: int = 0, first_ifd: int = 8, tail: bytes = b""
) -> bytes:
    """A little-endian TIFF with one IFD of (tag, type, count, value) entries."""
    ifd = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries)
    return b"II*\x00" + struct.pack("<I", first_ifd) + ifd + struct.pack("<I", next_ifd) + tail


def tiff_header(width: int, height: int, strip_offset: int = 10**6) -> bytes:
    """Uncompressed 8-bit grey: its one strip lies far past the end of the file."""
    return tiff(
        [
            (256, 4, 1, width),
            (257, 4, 1, height),
            (258, 3, 1, 8),
            (259, 3, 1, 1),
            (262, 3, 1, 1),
            (273, 4, 1, strip_offset),
            (277, 3, 1, 1),
            (278, 4, 1, height),
            (279, 4, 1, width * height % 2**32),
        ]
    )


BOMBS = {
    "PNG": ("bomb.png", png_header),
    "JPEG": ("bomb.jpg", jpeg_header),
    "GIF": ("bomb.gif", gif_header),
    "BMP": ("bomb.bmp", bmp_header),
    "TIFF": ("bomb.tif", tiff_header),
}


@pytest.fixture()
def no_decode(monkeypatch):
    """Fail on any pixel decode: vlmlint's decode_image or PIL's ImageFile.load."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("an image was decoded")

    monkeypatch.setattr(vlmlint.images, "decode_image", refuse)
    monkeypatch.setattr("vlmlint.engine.decode_image", refuse)
    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)
    return calls


@pytest.mark.parametrize("format", list(BOMBS))
def test_65535_square_header_is_reported_and_never_decoded(tmp_path, format, model, no_decode, record):
    name, build = BOMBS[format]
    (tmp_path / name).write_bytes(build(65535, 65535))
    default = scan(tmp_path, [name], model)[name]
    exact = scan(tmp_path, [name], model, exact=True)[name]
    assert default[0] == ["VLM202"] and exact[0] == ["VLM202"], (default, exact)
    # --verify rechecks rows with the real image processor: a bomb is skipped there too.
    config = ScanConfig(dataset=str(tmp_path / "data.jsonl"), model=MODEL, jobs=1)
    scanner = Scanner(config, model=model)
    verifier = Verifier(32)
    with time_limit(30, "the verify pass"):
        for outcome in scanner.scan():
            verifier.offer(outcome)
        verifier.run(scanner)
    assert no_decode == []
    record(
        "images",
        f"{format} header declaring 65,535 x 65,535 pixels ({len(build(65535, 65535))} bytes)",
        "VLM202 (decompression bomb), also with --exact and --verify; never decoded (decode spied: 0 calls)",
    )


def test_truncated_image_above_a_lowered_bomb_threshold_is_not_decoded(tmp_path, model, no_decode, record):
    (tmp_path / "big.png").write_bytes(png_header(4000, 3000)[:-12])  # no IEND: looks truncated
    thresholds = {**THRESHOLD_DEFAULTS, "bomb_pixels": 1_000_000}
    codes, _ = scan(tmp_path, ["big.png"], model, thresholds=thresholds)["big.png"]
    assert codes == ["VLM202"] and no_decode == []
    record(
        "images",
        "truncated 4000 x 3000 PNG with --threshold bomb_pixels=1000000",
        "VLM202; the truncation is not confirmed by a decode (nothing above bomb_pixels is decoded)",
    )


# -- TIFF oddities -------------------------------------------------------------------------------------


def test_tiff_oddities(tmp_path, model, record):
    pages = io.BytesIO()
    first, *rest = [Image.new("L", (64, 64), i % 256) for i in range(1000)]
    first.save(pages, "TIFF", save_all=True, append_images=rest)
    files = {
        "pages.tif": pages.getvalue(),
        "loop.tif": tiff_header(8, 8, strip_offset=200)[:-4] + struct.pack("<I", 8) + b"\x00" * 100,
        "strip-past-end.tif": tiff_header(64, 64, strip_offset=5000) + b"\x00" * 100,
        "ifd-past-end.tif": tiff([], first_ifd=10**6),
        "huge-ifd-count.tif": b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 65535) + b"\x00" * 40,
        "offset-overflow.tif": tiff_header(64, 64, strip_offset=2**32 - 10),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    found = scan(tmp_path, files, model)
    assert found["pages.tif"][0] == ["VLM207"]
    for name in ("strip-past-end.tif", "ifd-past-end.tif", "huge-ifd-count.tif", "offset-overflow.tif"):
        assert found[name][0] == ["VLM201"], (name, found[name])
    cases = {
        "pages.tif": "TIFF with 1,000 pages (IFDs)",
        "loop.tif": "TIFF whose next-IFD offset points back to its first IFD (a loop)",
        "strip-past-end.tif": "TIFF whose strip offset lies past the end of the file",
        "ifd-past-end.tif": "TIFF whose first IFD offset lies past the end of the file",
        "huge-ifd-count.tif": "TIFF whose IFD claims 65,535 entries in a 50-byte file",
        "offset-overflow.tif": "TIFF whose strip offset + size overflows 32 bits",
    }
    for name, case in cases.items():
        codes, messages = found[name]
        outcome = f'{", ".join(codes)} "{shape(messages[0], tmp_path)}"' if codes else "no finding"
        record("images", case, f"{outcome}; no hang")


# -- special files ---------------------------------------------------------------------------------------


def test_folder_named_like_an_image(tmp_path, model, record):
    (tmp_path / "x.jpg").mkdir()
    codes, messages = scan(tmp_path, ["x.jpg"], model)["x.jpg"]
    assert codes == ["VLM201"] and "a directory" in messages[0]
    record("images", "a folder named x.jpg", f'VLM201 "{messages[0]}"')


def test_symlink_loop_and_dangling_symlink(tmp_path, model, record):
    os.symlink("b.jpg", tmp_path / "a.jpg")
    os.symlink("a.jpg", tmp_path / "b.jpg")
    os.symlink("nowhere.jpg", tmp_path / "dangling.jpg")
    found = scan(tmp_path, ["a.jpg", "dangling.jpg"], model)
    assert found["a.jpg"][0] == ["VLM201"] and found["dangling.jpg"][0] == ["VLM103"]
    record("images", "symlink loop (a.jpg -> b.jpg -> a.jpg)", f'VLM201 "{found["a.jpg"][1][0]}"')
    record("images", "dangling symlink", f'VLM103 "{found["dangling.jpg"][1][0]}"')


def test_unreadable_file_simulated(tmp_path, model, monkeypatch, record):
    noise().save(tmp_path / "locked.jpg")
    target = str(tmp_path / "locked.jpg")
    real_open = os.open

    def guarded(file, *args, **kwargs):  # what chmod 000 does for a user other than root
        if str(file) == target:
            raise PermissionError(13, "Permission denied", target)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)  # vlmlint opens images with os.open (O_NONBLOCK)
    codes, messages = scan(tmp_path, ["locked.jpg"], model)["locked.jpg"]
    assert codes == ["VLM201"] and "Permission denied" in messages[0]
    record(
        "images",
        "file without read permission (simulated: the tests run as root, where chmod 000 does not stop reads)",
        f'VLM201 "{shape(messages[0], tmp_path)}"',
    )


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads files whatever their mode; see test_unreadable_file_simulated"
)
def test_unreadable_file_chmod(tmp_path, model):
    noise().save(tmp_path / "locked.jpg")
    os.chmod(tmp_path / "locked.jpg", 0)
    try:
        codes, messages = scan(tmp_path, ["locked.jpg"], model)["locked.jpg"]
    finally:
        os.chmod(tmp_path / "locked.jpg", 0o644)
    assert codes == ["VLM201"] and "Permission denied" in messages[0]


def test_fifo_socket_and_devices_never_block(tmp_path, record):
    """In a subprocess: opening a FIFO for reading blocks until a writer comes, which would hang the suite."""
    noise().save(tmp_path / "ok.jpg")
    os.mkfifo(tmp_path / "fifo.jpg")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "socket.png"))
    os.symlink("/dev/zero", tmp_path / "zero.jpg")
    names = ["ok.jpg", "fifo.jpg", "socket.png", "zero.jpg", "/dev/urandom"]
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps(row(name, i)) + "\n" for i, name in enumerate(names))
    )
    try:
        for flags in ((), ("--allow-outside-root",)):
            run = run_cli(
                "scan",
                str(tmp_path / "data.jsonl"),
                "-m",
                MODEL,
                "-q",
                "--verify",
                "0",
                "--format",
                "json",
                *flags,
                timeout=60,
            )
            assert run.exit_code == 1
            by_id = {f["id"]: f for f in run.report["findings"] if f["code"].startswith(("VLM1", "VLM2"))}
            assert "r0" not in by_id
            where = " with --allow-outside-root" if flags else ""
            for index, name in enumerate(names[1:], start=1):
                finding = by_id[f"r{index}"]
                message = shape(finding["message"], tmp_path)
                record("images", f"{name} as the image{where}", f'{finding["code"]} "{message}"; no hang')
    finally:
        server.close()


# -- byte-level fuzzing ---------------------------------------------------------------------------------

SEEDS = {format: encoded(format) for format in FORMATS} | {
    "TIFF-LZW": encoded("TIFF", compression="tiff_lzw")
}


@FUZZ
@given(
    format=st.sampled_from(sorted(SEEDS)),
    edits=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=8)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.floats(0, 1)),
)
def test_mutated_images_are_findings_not_crashes(format, edits, cut):
    data = bytearray(SEEDS[format])
    for where, payload in edits:
        start = int(where * (len(data) - 1))
        data[start : start + len(payload)] = payload
    if cut is not None:
        data = data[: int(cut * len(data))]
    ref = ImageRef(reference="fuzz", data=bytes(data))
    with time_limit(10, "reading a mutated image"):
        for step in (read_header, decode_image):
            try:
                step(ref)
            except ImageProblem:
                pass


def test_mutated_images_record(record):
    record(
        "images",
        "byte-level mutations (overwrites, cuts) of valid JPEG, PNG, GIF, WebP, BMP, TIFF, AVIF and ICO files "
        "(hypothesis, 120 files)",
        "the header read and the full decode give a size or VLM201's unreadable; no other exception, "
        "each within 10 s",
    )
