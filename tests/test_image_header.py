"""The fast header reader (vlmlint/image_header.py) against the PIL path it stands in for.

Every image under fixtures/ and every file hypothesis makes (PIL saves random sizes, modes, formats,
EXIF orientations, ICC profiles, XMP, progressive JPEG, interlaced PNG, palette + tRNS, animated WebP and
GIF; then truncated, flipped and spliced bytes) is read both ways: where the fast reader answers, the
PIL path (images._pil_header, Pillow's lazy open) gives the same width, height, format, mode, orientation,
animation and transparency and needs no pixel-end check; where the PIL path raises, the fast reader
answers None. On files that decode, the oriented size is transformers' own `load_image`'s.
"""

from __future__ import annotations

import io
import random
import struct
import warnings
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageCms, TiffImagePlugin
from transformers.image_utils import load_image

from vlmlint import images
from vlmlint.image_header import read_fast
from vlmlint.records import ImageRef

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".mpo"}
FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
FIELDS = ("width", "height", "format", "mode", "orientation", "animated", "transparency")
COMMON = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def pil_answer(data: bytes) -> tuple | None:
    """The PIL path's seven fields, or None where it raises (ImageProblem)."""
    stream = io.BytesIO(data)
    try:
        found = images._pil_header(ImageRef(reference="x", data=data), stream, len(data))
    except images.ImageProblem:
        return None
    return found


def check(data: bytes) -> bool:
    """Never a different confident answer; True where the fast reader answered."""
    fast = read_fast(io.BytesIO(data), len(data))
    if fast is None:
        return False
    pil = pil_answer(data)
    assert pil is not None, f"the fast reader answered {fast} where the PIL path raises"
    assert tuple(getattr(fast, name) for name in FIELDS) == pil[:7]
    assert pil[7] is None  # no pixel-end check is skipped: JPEG, PNG and WebP have none
    return True


def read_both(path_or_data, monkeypatch) -> tuple:
    """read_header's whole answer (header or problem) with the fast reader, then with the PIL path only."""
    ref = (
        ImageRef(reference="x", data=path_or_data)
        if isinstance(path_or_data, bytes)
        else ImageRef(reference=str(path_or_data), path=str(path_or_data))
    )
    answers = []
    for fast in (True, False):
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(images, "read_fast", lambda stream, size: None)
            try:
                answers.append(images.read_header(ref))
            except images.ImageProblem as exc:
                answers.append((exc.kind, exc.message))
    return tuple(answers)


# --- fixtures --------------------------------------------------------------------------------------


def test_fixtures_are_found():
    assert len(FIXTURE_FILES) > 100
    suffixes = {p.suffix.lower() for p in FIXTURE_FILES}
    assert {".jpg", ".png"} <= suffixes


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_image(path, monkeypatch):
    data = path.read_bytes()
    check(data)
    with_fast, pil_only = read_both(path, monkeypatch)
    assert with_fast == pil_only


def test_the_fast_reader_answers_most_fixtures():
    answered = [p for p in FIXTURE_FILES if p.suffix.lower() in (".jpg", ".png") and check(p.read_bytes())]
    total = [p for p in FIXTURE_FILES if p.suffix.lower() in (".jpg", ".png")]
    assert len(answered) >= 0.8 * len(total), (len(answered), len(total))


def test_oriented_size_is_transformers_load_image():
    """On the fixtures that decode, the oriented size read_header gives is what transformers loads."""
    checked = 0
    for path in FIXTURE_FILES:
        data = path.read_bytes()
        fast = read_fast(io.BytesIO(data), len(data))
        if fast is None:
            continue
        try:
            loaded = load_image(str(path))
        except Exception:
            continue
        header = images.read_header(ImageRef(reference=str(path), path=str(path)))
        assert (header.width, header.height) == loaded.size, path
        checked += 1
    assert checked > 50


# --- made files ------------------------------------------------------------------------------------

ORIENTATIONS = st.sampled_from([None, 1, 2, 3, 4, 5, 6, 7, 8, 0, 9, 300])


def exif_bytes(orientation, extra: str | None = None) -> bytes | None:
    if orientation is None:
        return None
    exif = Image.Exif()
    exif[0x0112] = (orientation, 1) if extra == "orientation pair" else orientation
    exif[0x0131] = "vlmlint"
    if extra == "dpi":
        exif[0x0128], exif[0x011A], exif[0x011B] = 2, 300.0, 300.0
    elif extra == "dpi in cm, zero":
        exif[0x0128], exif[0x011A] = 3, TiffImagePlugin.IFDRational(1, 0)
    elif extra == "odd dpi types":
        exif[0x0128], exif[0x011A] = "inch", (72, 1, 5)
    with warnings.catch_warnings():  # Pillow warns of the odd values these cases write on purpose
        warnings.simplefilter("ignore")
        return exif.tobytes()


EXTRAS = st.sampled_from([None, "dpi", "dpi in cm, zero", "odd dpi types", "orientation pair"])


def xmp_bytes(orientation: int) -> bytes:
    return (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description '
        b'tiff:Orientation="%d"/></rdf:RDF></x:xmpmeta>' % orientation
    )


def picture(mode: str, width: int, height: int, seed: int) -> Image.Image:
    rng = random.Random(seed)
    base = Image.new("RGB", (width, height), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    for _ in range(3):
        x, y = rng.randrange(width), rng.randrange(height)
        base.putpixel((x, y), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    if mode == "RGBA":
        image = base.convert("RGBA")
        image.putpixel((0, 0), (1, 2, 3, rng.randrange(256)))
        return image
    if mode == "P":
        return base.convert("P", palette=Image.Palette.ADAPTIVE, colors=rng.choice([2, 16, 256]))
    if mode == "I;16":
        return base.convert("L").convert("I;16")
    return base.convert(mode)


@st.composite
def jpegs(draw) -> bytes:
    mode = draw(st.sampled_from(["RGB", "L", "CMYK"]))
    width, height = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    image = picture(mode, width, height, draw(st.integers(0, 99)))
    options: dict = {"quality": draw(st.integers(20, 95))}
    if draw(st.booleans()):
        options["progressive"] = True
    if (exif := exif_bytes(draw(ORIENTATIONS), draw(EXTRAS))) is not None:
        options["exif"] = exif
    if draw(st.booleans()):
        options["icc_profile"] = SRGB
    if draw(st.booleans()):
        options["dpi"] = (draw(st.integers(1, 600)),) * 2
    if draw(st.booleans()):
        options["xmp"] = xmp_bytes(draw(st.integers(0, 9)))
    if draw(st.booleans()):
        options["comment"] = b"made by hypothesis"
    stream = io.BytesIO()
    image.save(stream, "JPEG", **options)
    return stream.getvalue()


def _set_interlace(data: bytes) -> bytes:
    """The IHDR's interlace byte set, CRC fixed (PIL reads the header alone; pixels are not decoded)."""
    ihdr = bytearray(data[16:29])
    ihdr[12] = 1
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)) & 0xFFFFFFFF)
    return data[:16] + bytes(ihdr) + crc + data[33:]


@st.composite
def pngs(draw) -> bytes:
    from PIL.PngImagePlugin import PngInfo

    mode = draw(st.sampled_from(["RGB", "RGBA", "L", "LA", "P", "1", "I;16"]))
    width, height = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    image = picture(mode, width, height, draw(st.integers(0, 99)))
    options: dict = {}
    if mode == "P" and draw(st.booleans()):
        options["transparency"] = draw(st.sampled_from([0, 1, bytes([0, 128, 255, 7])]))
    elif mode in ("RGB", "L", "1", "I;16") and draw(st.booleans()):
        options["transparency"] = (1, 2, 3) if mode == "RGB" else 1
    if (exif := exif_bytes(draw(ORIENTATIONS), draw(EXTRAS))) is not None:
        options["exif"] = exif
    if draw(st.booleans()):
        options["icc_profile"] = SRGB
    if draw(st.booleans()):
        options["dpi"] = (72, 72)
    text = draw(st.sampled_from([None, "tEXt", "zTXt", "iTXt", "raw exif", "exif key"]))
    if text is not None:
        info = PngInfo()
        if text == "tEXt":
            info.add_text("Software", "hypothesis")
        elif text == "zTXt":
            info.add_text("Comment", "compressed", zip=True)
        elif text == "iTXt":
            info.add_itxt("XML:com.adobe.xmp", xmp_bytes(draw(st.integers(1, 8))).decode())
        elif text == "raw exif":
            raw = exif_bytes(draw(st.integers(1, 8))) or b""
            info.add_text("Raw profile type exif", f"\nexif\n{len(raw)}\n{raw.hex()}")
        else:
            info.add_text("exif", "not exif")
        options["pnginfo"] = info
    animated = draw(st.booleans()) and mode in ("RGB", "RGBA")
    stream = io.BytesIO()
    if animated:
        second = picture(mode, width, height, 7)
        image.save(stream, "PNG", save_all=True, append_images=[second], **options)
    else:
        image.save(stream, "PNG", **options)
    data = stream.getvalue()
    return _set_interlace(data) if draw(st.booleans()) else data


@st.composite
def webps(draw) -> bytes:
    mode = draw(st.sampled_from(["RGB", "RGBA"]))
    width, height = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    image = picture(mode, width, height, draw(st.integers(0, 99)))
    options: dict = {"lossless": draw(st.booleans()), "quality": draw(st.integers(10, 100))}
    if (exif := exif_bytes(draw(ORIENTATIONS), draw(EXTRAS))) is not None:
        options["exif"] = exif
    if draw(st.booleans()):
        options["icc_profile"] = SRGB
    if draw(st.booleans()):
        options["xmp"] = xmp_bytes(draw(st.integers(0, 9)))
    frames = draw(st.integers(1, 3))
    stream = io.BytesIO()
    if frames > 1 or draw(st.booleans()):
        others = [picture(mode, width, height, seed) for seed in range(frames - 1)]
        image.save(stream, "WEBP", save_all=True, append_images=others, duration=50, **options)
    else:
        image.save(stream, "WEBP", **options)
    return stream.getvalue()


@st.composite
def gifs(draw) -> bytes:
    width, height = draw(st.integers(1, 64)), draw(st.integers(1, 64))
    image = picture("P", width, height, draw(st.integers(0, 99)))
    stream = io.BytesIO()
    if draw(st.booleans()):
        image.save(stream, "GIF", save_all=True, append_images=[picture("P", width, height, 3)])
    else:
        image.save(stream, "GIF")
    return stream.getvalue()


MADE = st.one_of(jpegs(), pngs(), webps(), gifs())


@st.composite
def damaged(draw, files=MADE) -> bytes:
    """A made file with one to three of: truncation, flipped bytes, a spliced region, an inserted run."""
    data = bytearray(draw(files))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "splice", "insert", "header"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "header":  # the first 64 bytes hold most header fields
            at = min(at, 63, len(data) - 1)
            data[at] = draw(st.integers(0, 255))
        elif kind == "splice":
            run = draw(st.binary(min_size=1, max_size=16))
            data[at : at + len(run)] = run
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@COMMON
@given(jpegs())
def test_made_jpegs(data):
    assert check(data)  # every JPEG PIL saves (no MPF) is answered


@COMMON
@given(pngs())
def test_made_pngs(data):
    check(data)


@COMMON
@given(webps())
def test_made_webps(data):
    assert check(data)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(gifs())
def test_gif_takes_the_pil_path(data):
    assert not check(data)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(damaged())
def test_damaged_files_never_get_a_different_answer(data):
    check(data)


@st.composite
def damaged_fixtures(draw) -> bytes:
    paths = [p for p in FIXTURE_FILES if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
    return draw(damaged(st.sampled_from(paths).map(lambda p: p.read_bytes())))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(damaged_fixtures())
def test_damaged_fixtures_never_get_a_different_answer(data):
    check(data)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(MADE, damaged()))
def test_read_header_is_unchanged(data):
    """The whole read_header answer, truncation confirmation and messages included."""
    monkeypatch = pytest.MonkeyPatch()
    try:
        with_fast, pil_only = read_both(data, monkeypatch)
    finally:
        monkeypatch.undo()
    assert with_fast == pil_only


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(jpegs(), pngs(), webps()))
def test_made_files_load_as_transformers_loads_them(data):
    try:
        loaded = load_image(Image.open(io.BytesIO(data)))
    except OSError:  # the interlace byte set by hand: the pixels no longer decode
        assume(False)
    header = images.read_header(ImageRef(reference="x", data=data))
    assert (header.width, header.height) == loaded.size


# --- hand-made edge cases --------------------------------------------------------------------------


def _jpeg_with(segment: bytes) -> bytes:
    """A small JPEG with `segment` (marker and length included) inserted after SOI."""
    stream = io.BytesIO()
    Image.new("RGB", (8, 6), (9, 9, 9)).save(stream, "JPEG")
    data = stream.getvalue()
    return data[:2] + segment + data[2:]


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">HH", marker, len(payload) + 2) + payload


def _png_chunk(cid: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + cid + payload + struct.pack(">I", zlib.crc32(cid + payload))


def _png_with(chunk: bytes, mode: str = "RGB") -> bytes:
    stream = io.BytesIO()
    Image.new(mode, (5, 7)).save(stream, "PNG")
    data = stream.getvalue()
    return data[:33] + chunk + data[33:]


EDGE_CASES = {
    "jfif short": _jpeg_with(_segment(0xFFE0, b"JFIF\0")),
    "jfif dpi and exif": _jpeg_with(
        _segment(0xFFE0, b"JFIF\0\x01\x02\x01\x00\x48\x00\x48\0\0")
        + _segment(0xFFE1, b"Exif\0\0" + exif_bytes(6))
    ),
    "exif twice": _jpeg_with(_segment(0xFFE1, b"Exif\0\0" + exif_bytes(6)) * 2),
    "exif broken": _jpeg_with(_segment(0xFFE1, b"Exif\0\0MM\0*garbage")),
    "exif empty": _jpeg_with(_segment(0xFFE1, b"Exif\0\0")),
    "xmp orientation": _jpeg_with(_segment(0xFFE1, b"http://ns.adobe.com/xap/1.0/\x00" + xmp_bytes(8))),
    "photoshop short name": _jpeg_with(_segment(0xFFED, b"Photoshop 3.0\x008BIM\x03\xed")),
    "photoshop resolution": _jpeg_with(
        _segment(0xFFED, b"Photoshop 3.0\x008BIM\x03\xed\0\0\0\0\0\x10" + bytes(16))
    ),
    "photoshop short size": _jpeg_with(_segment(0xFFED, b"Photoshop 3.0\x008BIM\x03\xed\0\0\0")),
    "adobe short": _jpeg_with(_segment(0xFFEE, b"Adobe")),
    "adobe": _jpeg_with(_segment(0xFFEE, b"Adobe\0\x64\0\0\0\0\x01")),
    "icc short": _jpeg_with(_segment(0xFFE2, b"ICC_PROFILE\0")),
    "mpf": _jpeg_with(_segment(0xFFE2, b"MPF\0MM\0*\0\0\0\x08\0\0")),
    "fill bytes": _jpeg_with(b"\xff\xff\xff"),
    "junk between": _jpeg_with(b"")[:20] + b"\x00\x12\x34" + _jpeg_with(b"")[20:],
    "bad marker": _jpeg_with(b"\xff\x10"),
    "zero length": _jpeg_with(b"\xff\xfe\x00\x00"),
    "png raw exif": _png_with(_png_chunk(b"tEXt", b"Raw profile type exif\0\nexif\n4\nzz")),
    "png exif key": _png_with(_png_chunk(b"tEXt", b"exif\0" + b"Exif\0\0" + exif_bytes(8))),
    "png exif chunk": _png_with(_png_chunk(b"eXIf", exif_bytes(5))),
    "png exif broken": _png_with(_png_chunk(b"eXIf", b"MM\0*\xff\xff\xff\xff")),
    "png xmp text": _png_with(_png_chunk(b"tEXt", b"XML:com.adobe.xmp\0" + xmp_bytes(7))),
    "png short phys": _png_with(_png_chunk(b"pHYs", b"\0\0")),
    "png short gama": _png_with(_png_chunk(b"gAMA", b"\0")),
    "png bad crc": _png_with(_png_chunk(b"gAMA", bytes(4))[:-1] + b"\0"),
    "png iccp method": _png_with(_png_chunk(b"iCCP", b"name\0\x01abc")),
    "png iccp bad zlib": _png_with(_png_chunk(b"iCCP", b"name\0\0notzlib")),
    "png iccp no name": _png_with(_png_chunk(b"iCCP", b"\0")),
    "png unknown chunk": _png_with(_png_chunk(b"prIv", b"data")),
    "png bad cid": _png_with(_png_chunk(b"a b ", b"data")),
    "png trns short": _png_with(_png_chunk(b"tRNS", b"\0"), "L"),
    "png trns rgb": _png_with(_png_chunk(b"tRNS", bytes(6))),
    "png trns rgba": _png_with(_png_chunk(b"tRNS", bytes(6)), "RGBA"),
    "png second ihdr": _png_with(_png_chunk(b"IHDR", struct.pack(">IIBBBBB", 9, 3, 8, 0, 0, 0, 0))),
    "png ihdr bad mode": _png_with(_png_chunk(b"IHDR", struct.pack(">IIBBBBB", 9, 3, 3, 2, 0, 0, 0))),
    "png ihdr filter": _png_with(_png_chunk(b"IHDR", struct.pack(">IIBBBBB", 9, 3, 8, 2, 0, 1, 0))),
    "png zero width": _png_with(_png_chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 3, 8, 2, 0, 0, 0))),
    "png iend first": _png_with(_png_chunk(b"IEND", b"")),
}


def _webp_riff(chunks: list[tuple[bytes, bytes]]) -> bytes:
    body = b"WEBP" + b"".join(
        fourcc + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)
        for fourcc, payload in chunks
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _webp_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, position = [], 12
    while position < len(data):
        size = struct.unpack("<I", data[position + 4 : position + 8])[0]
        chunks.append((data[position : position + 4], data[position + 8 : position + 8 + size]))
        position += 8 + size + (size & 1)
    return chunks


def _webp_image(**options) -> bytes:
    stream = io.BytesIO()
    Image.new(options.pop("mode", "RGB"), (6, 4), (1, 2, 3)).save(stream, "WEBP", **options)
    return stream.getvalue()


def _vp8x(flags: int, width: int = 6, height: int = 4) -> tuple[bytes, bytes]:
    return b"VP8X", bytes([flags, 0, 0, 0]) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(
        3, "little"
    )


_LOSSY = _webp_chunks(_webp_image())[0]
_LOSSLESS = _webp_chunks(_webp_image(lossless=True))[0]
_EXIF6 = (b"EXIF", exif_bytes(6))
WEBP_CASES = {
    "vp8x exif without flag": _webp_riff([_vp8x(0), _LOSSY, _EXIF6]),
    "vp8x exif with flag": _webp_riff([_vp8x(0x08), _LOSSY, _EXIF6]),
    "vp8x exif before image": _webp_riff([_vp8x(0x08), _EXIF6, _LOSSY]),
    "vp8x exif twice": _webp_riff([_vp8x(0x08), _EXIF6, _LOSSY, _EXIF6]),
    "vp8x alpha flag lossy": _webp_riff([_vp8x(0x10), _LOSSY]),
    "vp8x alpha flag lossless": _webp_riff([_vp8x(0x10), _LOSSLESS]),
    "vp8x bad flags": _webp_riff([_vp8x(0x01), _LOSSY]),
    "vp8x wrong canvas": _webp_riff([_vp8x(0, 7, 4), _LOSSY]),
    "vp8x no image": _webp_riff([_vp8x(0)]),
    "vp8x two images": _webp_riff([_vp8x(0), _LOSSY, _LOSSY]),
    "vp8x unknown chunk": _webp_riff([_vp8x(0), (b"abcd", b"12"), _LOSSY]),
    "vp8x alph then exif then image": _webp_riff([_vp8x(0x18), (b"ALPH", b"\0\0"), _EXIF6, _LOSSY]),
    "vp8x alph lossless": _webp_riff([_vp8x(0x10), (b"ALPH", b"\0\0"), _LOSSLESS]),
    "vp8x alph lossy": _webp_riff([_vp8x(0x00), (b"ALPH", b"\0\0"), _LOSSY]),
    "riff size short": _webp_image()[:4] + b"\x04\0\0\0" + _webp_image()[8:],
    "trailing bytes": _webp_image() + b"\0\0",
    "lossy not keyframe": _webp_riff([(b"VP8 ", bytes([_LOSSY[1][0] | 1]) + _LOSSY[1][1:])]),
    "lossless version": _webp_riff(
        [(b"VP8L", _LOSSLESS[1][:4] + bytes([_LOSSLESS[1][4] | 0x20]) + _LOSSLESS[1][5:])]
    ),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES) + sorted(WEBP_CASES))
def test_edge_cases(name, monkeypatch):
    data = EDGE_CASES.get(name) or WEBP_CASES[name]
    check(data)
    with_fast, pil_only = read_both(data, monkeypatch)
    assert with_fast == pil_only


def test_edge_cases_are_answered_where_pil_answers():
    """The fast reader is not only safe: it answers the common variants itself."""
    for name in ("jfif dpi and exif", "exif twice", "xmp orientation", "adobe", "fill bytes", "junk between"):
        assert check(EDGE_CASES[name]), name
    for name in ("png raw exif", "png exif key", "png exif chunk", "png xmp text", "png unknown chunk"):
        data = EDGE_CASES[name]
        assert read_fast(io.BytesIO(data), len(data)) is not None or pil_answer(data) is None, name
    for name in ("vp8x exif with flag", "vp8x exif before image", "vp8x alpha flag lossy", "vp8x alph lossy"):
        assert check(WEBP_CASES[name]), name


def test_embedded_orientation_swaps_the_size():
    data = EDGE_CASES["exif twice"]
    header = images.read_header(ImageRef(reference="x", data=data))
    assert (header.orientation, header.width, header.height) == (6, 6, 8)
