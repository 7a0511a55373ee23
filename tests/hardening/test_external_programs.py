"""No file makes vlmlint start another program: PIL's EPS plugin runs Ghostscript to load a file, and
`Image.open` tries every registered plugin whatever the file's name. vlmlint opens only IMAGE_FORMATS.

Every hostile file (each format PIL can write or identify, renamed .jpg and .png) and every image of
fixtures/ is scanned in a guarded run (the header path, --exact, and the HTML report's thumbnails):
the audit hook and the decoy `gs`/`convert`/`ffmpeg` on PATH see every program start; none may happen.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import ROOT
from tests.hardening.conftest import MODEL, run_guarded, shape
from vlmlint.images import IMAGE_FORMATS


def _row(index: int, image: str) -> dict:
    return {
        "id": f"r{index}",
        "image": image,
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is it?"},
            {"from": "gpt", "value": "A cat."},
        ],
    }


def _saved(format: str, **options) -> bytes | None:
    """A small picture saved by PIL in `format`, or None where PIL needs a missing handler or library."""
    image = Image.new("RGB", (24, 16), "red")
    if format in ("XBM", "PALM"):
        image = image.convert("1")
    elif format in ("GIF", "PCX", "BLP"):
        image = image.convert("P")
    buffer = io.BytesIO()
    try:
        image.save(buffer, format, **options)
    except Exception:  # BUFR, GRIB, HDF5, WMF: stubs without a handler
        return None
    return buffer.getvalue()


def _fits_card(text: str) -> bytes:
    return text.ljust(80).encode()


HAND_MADE = {  # formats PIL identifies but cannot write (or only through a handler): their headers
    "PS (PostScript, %!PS)": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n"
    b"/Times-Roman findfont 12 scalefont setfont 0 0 moveto (x) show showpage\n%%EOF\n",
    "EPS with a DOS binary header": b"\xc5\xd0\xd3\xc6"
    + struct.pack("<IIIIIIH", 30, 60, 0, 0, 0, 0, 0xFFFF)
    + b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n%%EOF\n",
    "WMF placeable header": b"\xd7\xcd\xc6\x9a\x00\x00"
    + struct.pack("<hhhhH", 0, 0, 16, 16, 1440)
    + b"\x00" * 64,
    "EMF header": struct.pack("<II", 1, 88) + struct.pack("<iiii", 0, 0, 16, 16) * 2 + b" EMF" + b"\x00" * 48,
    "MPEG video header": b"\x00\x00\x01\xb3" + b"\x01\x00\x10\x14" + b"\x00" * 64,
    "FITS header": b"".join(
        _fits_card(c)
        for c in ("SIMPLE  = T", "BITPIX  = 8", "NAXIS   = 2", "NAXIS1  = 4", "NAXIS2  = 4", "END")
    ).ljust(2880)
    + b"\x00" * 2880,
    "GRIB header": b"GRIB" + b"\x00" * 60,
    "BUFR header": b"BUFR" + b"\x00" * 60,
    "HDF5 header": b"\x89HDF\r\n\x1a\n" + b"\x00" * 60,
    "XV thumbnail": b"P7 332\n#END_OF_COMMENTS\n4 4 255\n" + b"\x00" * 16,
    "SVG": b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>',
}


def hostile_files() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    Image.init()  # every plugin, so that SAVE lists every writer
    for format in sorted(Image.SAVE):
        data = _saved(format)
        if data is not None:
            files[f"{format} written by PIL"] = data
    files.update(HAND_MADE)
    return files


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """tmp/dataset with every hostile file as NAME.jpg and NAME.png, one llava row per file."""
    tmp = tmp_path_factory.mktemp("external")
    dataset = tmp / "dataset"
    dataset.mkdir()
    rows, cases = [], {}
    for number, (case, data) in enumerate(hostile_files().items()):
        for suffix in (".jpg", ".png"):
            name = f"f{number}{suffix}"
            (dataset / name).write_bytes(data)
            cases[f"r{len(rows)}"] = (case, name)
            rows.append(_row(len(rows), name))
    (dataset / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp, dataset, cases


MODES = {
    "header path": (),
    "--exact": ("--exact",),
}


def _scan(dataset: Path, *flags: str):
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
        timeout=300,
    )
    assert run.peak_mb < 1024, run.peak_mb
    return run


def test_no_program_for_any_format(hostile, record):
    tmp, dataset, cases = hostile
    findings = {}
    for mode, flags in MODES.items():
        run = _scan(dataset, *flags)  # run_guarded asserts that no program started
        assert run.exit_code == 1
        by_id: dict[str, list] = {}
        for finding in run.report["findings"]:
            if finding["code"] in ("VLM201", "VLM202"):
                by_id.setdefault(finding["id"], []).append(finding)
        findings[mode] = by_id
    outcomes: dict[str, dict[str, set[str]]] = {}
    for row_id, (case, name) in cases.items():
        for mode in MODES:
            got = findings[mode].get(row_id, [])
            # The file's name differs per copy (.jpg, .png); the page keeps what is said about the format.
            said = (
                f'{got[0]["code"]} "{shape(got[0]["message"], tmp).replace(name, "<file>")}"'
                if got
                else "read"
            )
            outcomes.setdefault(case, {}).setdefault(mode, set()).add(said)
    for case, by_mode in outcomes.items():
        format = case.split(" ", 1)[0]
        texts = {mode: " / ".join(sorted(what)) for mode, what in by_mode.items()}
        if len(set(texts.values())) == 1:
            said = f"{' and '.join(texts)}: {texts['header path']}"
        else:
            said = "; ".join(f"{mode}: {text}" for mode, text in texts.items())
        if format not in (*IMAGE_FORMATS, "MPO"):  # MPO: a JPEG with a second picture, opened as JPEG
            assert "read" not in [w for what in by_mode.values() for w in what], (case, said)
        record("external", f"{case}, named .jpg and .png", f"{said}; no program started")


def test_eps_is_refused_by_name(hostile):
    tmp, dataset, cases = hostile
    run = _scan(dataset)
    eps_rows = {row for row, (case, _) in cases.items() if case.startswith(("EPS", "PS "))}
    messages = {f["id"]: f["message"] for f in run.report["findings"] if f["code"] == "VLM201"}
    assert eps_rows and eps_rows <= set(messages)
    for row in eps_rows:
        assert "is in EPS format, not one vlmlint reads" in messages[row], messages[row]


def test_html_thumbnails_start_no_program(hostile, tmp_path, record):
    _, dataset, _ = hostile
    out = tmp_path / "report.html"
    run = run_guarded(
        "scan",
        str(dataset / "data.jsonl"),
        "-m",
        MODEL,
        "--verify",
        "0",
        "-q",
        "--format",
        "html",
        "-o",
        str(out),
        timeout=300,
    )
    assert run.exit_code == 1 and out.exists() and run.peak_mb < 1024
    record(
        "external",
        "the same files in an HTML report (--format html: a thumbnail of each flagged row's images)",
        "each unreadable one is a text cell; no program started",
    )


def test_every_fixture_image(tmp_path, record):
    """Every image file under fixtures/ (copied into one dataset), header path and --exact."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    sources = sorted(
        p
        for p in (ROOT / "fixtures").rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p.suffix.lower() in (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
    )
    assert len(sources) > 100
    rows = []
    for number, source in enumerate(sources):
        name = f"i{number}{source.suffix.lower()}"
        shutil.copyfile(source, dataset / name)
        rows.append(_row(number, name))
    (dataset / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for flags in ((), ("--exact",)):
        run = _scan(dataset, *flags)
        assert run.exit_code in (0, 1)
        assert not any("not one vlmlint reads" in f["message"] for f in run.report["findings"])
    record(
        "external",
        f"every image file under fixtures/ ({len(sources)} JPEG, PNG and GIF files), header path and --exact",
        "scanned as before (no format refused); no program started",
    )
