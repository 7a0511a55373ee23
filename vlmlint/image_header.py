"""Image headers read from the bytes they need, without PIL's open: JPEG, PNG and WebP.

`read_fast(stream, size)` answers what `images.read_header` takes from PIL's lazy open (stored width and
height, format, mode, EXIF orientation, animation, transparency) for the three formats that make up
nearly every training set, or returns None, and then the PIL path runs as before. It reproduces what
Pillow 13.0.0's `_open` accepts and what it answers, and gives up on everything else:

- JPEG: `JpegImagePlugin.JpegImageFile._open`'s marker loop up to SOS, with its handlers' failures (SOF,
  DQT, APP0 JFIF, APP13 Photoshop, APP14 Adobe, the ICC fragments), the mode from SOF's layer count and
  `jpeg_factory`'s MPO test (an APP2 "MPF" segment: None).
- PNG: `PngImagePlugin.PngImageFile._open`'s chunk loop up to the first IDAT, every CRC checked, the
  IHDR / PLTE / tRNS / gAMA / cHRM / sRGB / pHYs / iCCP / tEXt / eXIf handlers; zTXt, iTXt, APNG chunks
  and IEND before IDAT: None.
- WebP: what `WebPImagePlugin.WebPImageFile._open` gets from libwebp 1.6.0's `WebPAnimDecoderNew`
  (src/demux/anim_decode.c: `WebPGetFeatures` in src/dec/webp_dec.c, `VP8GetInfo` / `VP8LGetInfo`,
  then `WebPDemux`'s chunk validation in src/demux/demux.c) and the mode `_webp.c` sniffs (RGBA unless
  the features say no alpha); only files whose chunks tile the RIFF exactly, with known chunk types.

The EXIF orientation of a clean block (classic TIFF header, IFD0 and its values inside the block,
Orientation a single SHORT) is read from IFD0 directly; any other block is PIL's own reading:
`Image.Image.getexif` (and, for JPEG, `_read_dpi_from_exif`, which Pillow's open runs first) called on a
stand-in holding the `info` the plugin would build, so that every EXIF quirk, XMP fallback and failure
is Pillow's. Any failure the plugin would raise is a None here:
the PIL path then raises it, with its message. GIF (whose animation PIL finds by reading the first
frame), BMP, TIFF and the rest always take the PIL path. tests/test_image_header.py compares both paths.
"""

from __future__ import annotations

import re
import struct
import warnings
import zlib
from dataclasses import dataclass

from PIL import Image, ImageFile, ImageMode, JpegImagePlugin, PngImagePlugin, TiffImagePlugin, WebPImagePlugin

_FIRST_READ = 16384
# Never answer where PIL's read would come near images.MAX_HEADER_BYTES (64 MiB): the PIL path decides.
_MAX_PREFIX = 4 * 2**20  # JPEG up to SOS, PNG up to IDAT
_MAX_WEBP_FILE = 16 * 2**20  # PIL reads the whole WebP file
# libwebp allocates two canvases when the decoder is created; PIL decides for large ones.
_MAX_WEBP_CANVAS = 2**26

_unpack_be16 = struct.Struct(">H").unpack_from
_unpack_be32 = struct.Struct(">I").unpack_from
_unpack_le32 = struct.Struct("<I").unpack_from


@dataclass(frozen=True)
class FastHeader:
    width: int  # as stored, before the EXIF orientation
    height: int
    format: str
    mode: str
    orientation: int
    animated: bool
    transparency: bool


class _Source:
    """The file's first bytes, read once and grown on demand; `at` reads a far piece on its own."""

    def __init__(self, stream, size: int):
        self.stream = stream
        self.size = size
        stream.seek(0)
        self.data = stream.read(min(size, _FIRST_READ))

    def need(self, end: int) -> bool:
        """Whether the first `end` bytes are in `data` (read if the file has them, within _MAX_PREFIX)."""
        if end <= len(self.data):
            return True
        if end > self.size or end > _MAX_PREFIX:
            return False
        want = min(self.size, _MAX_PREFIX, max(end, 2 * len(self.data)))
        self.stream.seek(len(self.data))
        self.data += self.stream.read(want - len(self.data))
        return end <= len(self.data)

    def at(self, offset: int, length: int) -> bytes:
        if offset + length <= len(self.data):
            return self.data[offset : offset + length]
        self.stream.seek(offset)
        return self.stream.read(length)


class _InfoHolder:
    """What Image.Image.getexif reads of an image (info, _exif), so that the orientation is PIL's reading."""

    getexif = Image.Image.getexif
    _read_dpi_from_exif = JpegImagePlugin.JpegImageFile._read_dpi_from_exif

    def __init__(self, info: dict):
        self.info = info
        self._exif = None


_EXIF_PREFIX = re.compile(b"^(Exif\x00\x00){1,2}")  # what Image.Exif.load strips
_TIFF_UNITS = {typ: unit for typ, (unit, _) in TiffImagePlugin.ImageFileDirectory_v2._load_dispatch.items()}
_SHORT, _RATIONAL = 3, 5


def _ifd0_orientation(info: dict, dpi_read: bool) -> int | None:
    """The orientation in a clean EXIF block's first IFD, read directly; None: let PIL's Exif read it.

    Clean: a classic TIFF header, every entry of IFD0 and every value it points to inside the block,
    Orientation a single SHORT (PIL gives it as an int). `dpi_read`: Pillow's JPEG open looks up
    ResolutionUnit and XResolution first; those must then be a single SHORT and a single RATIONAL, whose
    reading cannot raise. Unknown types are skipped as PIL skips them.
    """
    data = info["exif"]
    base = _EXIF_PREFIX.match(data)
    base = base.end() if base else 0  # offsets below are the TIFF block's, from `base` (no copy)
    end = len(data) - base
    if end < 8 or data[base : base + 4] not in (b"II*\x00", b"MM\x00*"):
        return None
    order = "<" if data[base] == 0x49 else ">"
    offset = struct.unpack_from(order + "I", data, base + 4)[0]
    if offset < 8 or offset + 2 > end:
        return None
    count = struct.unpack_from(order + "H", data, base + offset)[0]
    if offset + 2 + 12 * count + 4 > end:
        return None
    entries: dict[int, tuple[int, int, int]] = {}
    for start in range(base + offset + 2, base + offset + 2 + 12 * count, 12):
        tag, typ, number = struct.unpack_from(order + "HHI", data, start)
        unit = _TIFF_UNITS.get(typ)
        if unit is None or not number:
            continue  # PIL: unsupported type, or no data
        if number * unit > 4 and struct.unpack_from(order + "I", data, start + 8)[0] + number * unit > end:
            return None  # PIL stops loading at this tag
        entries[tag] = (typ, number, start + 8)
    if dpi_read:
        for tag, typ in ((0x0128, _SHORT), (0x011A, _RATIONAL)):
            if tag in entries and entries[tag][:2] != (typ, 1):
                return None
    if 0x0112 not in entries:
        xmp = "xmp" in info or "XML:com.adobe.xmp" in info
        return None if xmp else 1  # PIL then looks for an XMP orientation
    typ, number, value_at = entries[0x0112]
    if (typ, number) != (_SHORT, 1):
        return None
    value = struct.unpack_from(order + "H", data, value_at)[0]
    return value if 1 <= value <= 8 else 1


def _orientation(holder: _InfoHolder) -> int | None:
    """images._orientation's answer from the plugin's info, or None where reading it raises."""
    info = holder.info
    if "exif" in info and holder._exif is None:
        quick = _ifd0_orientation(info, False)
        if quick is not None:
            return quick
    if "exif" not in info and "Raw profile type exif" not in info and "xmp" not in info:
        if "XML:com.adobe.xmp" not in info:
            return 1  # nothing getexif would read
    with warnings.catch_warnings(record=True):  # as the PIL path: EXIF warnings never reach stderr
        warnings.simplefilter("always")
        try:
            value = holder.getexif().get(0x0112, 1)
        except Exception:
            return None
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _transparency(mode: str, info: dict) -> bool:
    return bool({"A", "a"} & set(ImageMode.getmode(mode).bands)) or info.get("transparency") is not None


def read_fast(stream, size: int) -> FastHeader | None:
    """The header of a JPEG, PNG or WebP file as the PIL path reads it, or None (the PIL path decides)."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # Pillow then tolerates what this reader refuses
        return None
    source = _Source(stream, size)
    head = source.data
    if head.startswith(b"\xff\xd8\xff"):
        return _jpeg(source)
    if head.startswith(PngImagePlugin._MAGIC):
        return _png(source)
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return _webp(source)
    return None


# --- JPEG ------------------------------------------------------------------------------------------

_SOF_MARKERS = frozenset(range(0xFFC0, 0xFFD0)) - {0xFFC4, 0xFFC8, 0xFFCC} | {0xFFDE}
_SKIP_MARKERS = frozenset({0xFFC4, 0xFFCC, 0xFFDA, 0xFFDC, 0xFFDD, 0xFFDF})
_APP_MARKERS = frozenset(range(0xFFE0, 0xFFF0)) | {0xFFFE}  # COM reads its segment the same way
_QUIET_MARKERS = frozenset(range(0xFFD0, 0xFFDA)) | frozenset(range(0xFFF0, 0xFFFE)) | {0xFFC8}
_DPI_ERRORS = (struct.error, KeyError, SyntaxError, TypeError, ValueError, ZeroDivisionError)


def _photoshop_ok(s: bytes) -> bool:
    """Whether PIL's APP13 "Photoshop 3.0" walk ends without an error other than struct.error."""
    offset = 14
    try:
        while s[offset : offset + 4] == b"8BIM":
            offset += 4
            code = _unpack_be16(s, offset)[0]
            offset += 2
            if offset >= len(s):
                return False  # PIL: IndexError on the name length
            offset += 1 + s[offset]
            offset += offset & 1
            size = _unpack_be32(s, offset)[0]
            offset += 4
            data = s[offset : offset + size]
            if code == 0x03ED:
                _unpack_be32(data, 0), _unpack_be16(data, 4), _unpack_be32(data, 8), _unpack_be16(data, 12)
            offset += size
            offset += offset & 1
    except struct.error:
        pass
    return True


def _jpeg(source: _Source) -> FastHeader | None:  # noqa: C901, PLR0912, PLR0915 (one grammar)
    data = source.data
    position = 3
    pending = 0xFF  # the byte PIL's loop holds in `s`
    info: dict = {}
    icc: list[bytes] = []
    mode = ""
    width = height = 0
    while True:
        if pending != 0xFF:  # junk between segments: PIL reads on, a byte at a time
            if not source.need(position + 1):
                return None
            data = source.data
            pending = data[position]
            position += 1
            continue
        if not source.need(position + 1):
            return None  # the file ends before SOS: the PIL path reads what PIL makes of it
        data = source.data
        marker = 0xFF00 | data[position]
        position += 1
        if marker == 0xFFFF:
            pending = 0xFF
            continue
        if marker == 0xFF00:
            if not source.need(position + 1):
                return None
            data = source.data
            pending = data[position]
            position += 1
            continue
        if marker < 0xFFC0:
            return None  # PIL: "no marker found"
        if marker not in _QUIET_MARKERS:
            if not source.need(position + 2):
                return None
            data = source.data
            length = _unpack_be16(data, position)[0] - 2
            position += 2
            if length > 0:
                if not source.need(position + length):
                    return None  # PIL: "Truncated File Read"
                data = source.data
                segment = data[position : position + length]
                position += length
            else:
                segment = b""
            if marker in _SOF_MARKERS:
                if len(segment) < 6 or segment[0] != 8 or segment[5] not in (1, 3, 4):
                    return None
                if (len(segment) - 6) % 3:
                    return None  # PIL: IndexError on the last component
                height, width = _unpack_be16(segment, 1)[0], _unpack_be16(segment, 3)[0]
                mode = {1: "L", 3: "RGB", 4: "CMYK"}[segment[5]]
                if icc:
                    if len(min(icc)) <= 13:
                        return None  # PIL: IndexError on the fragment count
                    icc = []
            elif marker == 0xFFDB:
                rest = segment
                while rest:
                    table = 1 + (1 if rest[0] // 16 == 0 else 2) * 64
                    if len(rest) < table:
                        return None  # PIL: "bad quantization table marker"
                    rest = rest[table:]
            elif marker in _APP_MARKERS and not _jpeg_app(marker, segment, info, icc):
                return None
            if marker == 0xFFDA:
                break
        if not source.need(position + 1):
            return None
        pending = source.data[position]
        position += 1
    if not mode or width <= 0 or height <= 0 or "mp" in info:
        return None  # not identified by PIL, or an MPO (jpeg_factory's decision: the PIL path makes it)
    holder = _InfoHolder(info)
    orientation = _ifd0_orientation(info, "dpi" not in info) if "exif" in info else None
    if orientation is None:
        if "exif" in info and "dpi" not in info:
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                try:
                    holder._read_dpi_from_exif()  # Pillow's open runs it; it loads the EXIF read next
                except Exception:
                    return None
        orientation = _orientation(holder)
    if orientation is None:
        return None
    return FastHeader(width, height, "JPEG", mode, orientation, False, False)


def _jpeg_app(marker: int, s: bytes, info: dict, icc: list[bytes]) -> bool:
    """JpegImagePlugin.APP's effects that matter here; False where PIL's handler raises."""
    if marker == 0xFFFE:
        return True
    if marker == 0xFFE0 and s.startswith(b"JFIF"):
        if len(s) < 7:
            return False
        if len(s) >= 12 and s[7] in (1, 2):
            info["dpi"] = True  # only its presence matters: _read_dpi_from_exif then reads no EXIF
    elif marker == 0xFFE1 and s.startswith(b"Exif\0\0"):
        if "exif" in info:
            info["exif"] += s[6:]
        else:
            info["exif"] = s
    elif marker == 0xFFE1 and s.startswith(b"http://ns.adobe.com/xap/1.0/\x00"):
        info["xmp"] = s.split(b"\x00", 1)[1]
    elif marker == 0xFFE2 and s.startswith(b"FPXR\0"):
        pass
    elif marker == 0xFFE2 and s.startswith(b"ICC_PROFILE\0"):
        icc.append(s)
    elif marker == 0xFFED and s.startswith(b"Photoshop 3.0\x00"):
        return _photoshop_ok(s)
    elif marker == 0xFFEE and s.startswith(b"Adobe"):
        return len(s) >= 7
    elif marker == 0xFFE2 and s.startswith(b"MPF\0"):
        info["mp"] = s[4:]
    return True


# --- PNG -------------------------------------------------------------------------------------------

# PngImagePlugin._MODES: (bit depth, colour type) -> mode
_PNG_MODES = {
    (1, 0): "1",
    (2, 0): "L",
    (4, 0): "L",
    (8, 0): "L",
    (16, 0): "I;16",
    (8, 2): "RGB",
    (16, 2): "RGB",
    (1, 3): "P",
    (2, 3): "P",
    (4, 3): "P",
    (8, 3): "P",
    (8, 4): "LA",
    (16, 4): "RGBA",
    (8, 6): "RGBA",
    (16, 6): "RGBA",
}
_is_cid = re.compile(rb"\w\w\w\w").match
# Chunks before IDAT whose handling here is not PIL's: the PIL path reads them.
_PNG_REFUSED = frozenset({b"IEND", b"zTXt", b"iTXt", b"acTL", b"fcTL", b"fdAT"})
_simple_palette = re.compile(b"^\xff*\x00\xff*$")


def _png(source: _Source) -> FastHeader | None:  # noqa: C901, PLR0912, PLR0915 (one grammar)
    position = 8
    info: dict = {}
    mode = ""
    width = height = 0
    text_memory = 0
    while True:
        if not source.need(position + 8):
            return None
        data = source.data
        length = _unpack_be32(data, position)[0]
        cid = data[position + 4 : position + 8]
        position += 8
        if not _is_cid(cid):
            return None
        if cid == b"IDAT":
            break
        if cid in _PNG_REFUSED:
            return None
        if not source.need(position + length + 4):
            return None
        data = source.data
        s = data[position : position + length]
        crc = _unpack_be32(data, position + length)[0]
        position += length + 4
        if zlib.crc32(s, zlib.crc32(cid)) & 0xFFFFFFFF != crc:
            return None  # PIL: "broken PNG file (bad header checksum)"
        if cid == b"IHDR":
            if length < 13 or s[11]:
                return None
            width, height = _unpack_be32(s, 0)[0], _unpack_be32(s, 4)[0]
            mode = _PNG_MODES.get((s[8], s[9]), mode)
        elif cid == b"tRNS":
            if mode == "P":
                if _simple_palette.match(s):
                    index = s.find(b"\0")
                    if index >= 0:
                        info["transparency"] = index
                else:
                    info["transparency"] = s
            elif mode in ("1", "L", "I;16", "RGB"):
                if length < (6 if mode == "RGB" else 2):
                    return None
                info["transparency"] = True
        elif cid == b"gAMA":
            if length < 4:
                return None
        elif cid == b"cHRM":
            if length < 32:
                return None
        elif cid == b"sRGB":
            if length < 1:
                return None
        elif cid == b"pHYs":
            if length < 9:
                return None
        elif cid == b"iCCP":
            index = s.find(b"\0")
            if index + 1 >= len(s) or s[index + 1] != 0:
                return None
            try:
                PngImagePlugin._safe_zlib_decompress(s[index + 2 :])
            except ValueError:
                return None  # PIL: "Decompressed data too large"
            except zlib.error:
                pass
        elif cid == b"tEXt":
            key, _, value = s.partition(b"\0")
            if key:
                text = value.decode("latin-1", "replace")
                info[key.decode("latin-1")] = value if key == b"exif" else text
                text_memory += len(text)
                if text_memory > PngImagePlugin.MAX_TEXT_MEMORY:
                    return None
        elif cid == b"eXIf":
            info["exif"] = b"Exif\x00\x00" + s
    if not mode or width <= 0 or height <= 0:
        return None
    orientation = _orientation(_InfoHolder(info))
    if orientation is None:
        return None
    return FastHeader(width, height, "PNG", mode, orientation, False, _transparency(mode, info))


# --- WebP ------------------------------------------------------------------------------------------

_ALPHA_FLAG, _ANIMATION_FLAG, _EXIF_FLAG, _XMP_FLAG = 0x10, 0x02, 0x08, 0x04
_VALID_FLAGS = 0x3E  # ALPHA | ANIMATION | EXIF | ICCP | XMP
_MAX_IMAGE_AREA = 2**32


def _le24(data: bytes, offset: int) -> int:
    return data[offset] | data[offset + 1] << 8 | data[offset + 2] << 16


def _bitstream(fourcc: bytes, payload: bytes, size: int) -> tuple[int, int, bool] | None:
    """VP8GetInfo / VP8LGetInfo on a chunk's first bytes: (width, height, VP8L alpha bit) or None."""
    if fourcc == b"VP8 ":
        if len(payload) < 10 or payload[3:6] != b"\x9d\x01\x2a":
            return None
        bits = payload[0] | payload[1] << 8 | payload[2] << 16
        if bits & 1 or (bits >> 1) & 7 > 3 or not (bits >> 4) & 1 or bits >> 5 >= size:
            return None  # not a key frame, unknown profile, invisible, partition past the chunk
        width = (payload[6] | payload[7] << 8) & 0x3FFF
        height = (payload[8] | payload[9] << 8) & 0x3FFF
        if not width or not height:
            return None
        return width, height, False
    if len(payload) < 5 or payload[0] != 0x2F or payload[4] >> 5:
        return None
    bits = _unpack_le32(payload, 1)[0]
    return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, bool((bits >> 28) & 1)


def _chunks(source: _Source, start: int, end: int) -> list[tuple[bytes, int, int]] | None:
    """(fourcc, payload offset, payload size) of the chunks tiling [start, end) exactly, or None."""
    chunks = []
    position = start
    while position < end:
        if position + 8 > end:
            return None
        header = source.at(position, 8)
        if len(header) < 8:
            return None
        size = _unpack_le32(header, 4)[0]
        padded = size + (size & 1)
        if position + 8 + padded > end:
            return None
        chunks.append((header[:4], position + 8, size))
        position += 8 + padded
    return chunks


def _frame(source: _Source, group: list[tuple[bytes, int, int]]) -> tuple[int, int, bool, bool] | None:
    """An image group ([ALPH] VP8 | VP8L): (width, height, VP8L alpha bit, ALPH present) or None."""
    fourccs = [fourcc for fourcc, _, _ in group]
    if fourccs not in ([b"VP8 "], [b"VP8L"], [b"ALPH", b"VP8 "]):
        return None
    fourcc, offset, size = group[-1]
    found = _bitstream(fourcc, source.at(offset, min(size, 10)), size)
    if found is None:
        return None
    return found[0], found[1], found[2], len(group) == 2


def _webp(source: _Source) -> FastHeader | None:  # noqa: C901, PLR0912, PLR0915 (one grammar)
    size = source.size
    head = source.data[:30]
    if not WebPImagePlugin.SUPPORTED or len(head) < 30 or size > _MAX_WEBP_FILE:
        return None
    riff_size = _unpack_le32(head, 4)[0]
    if riff_size < 12 or riff_size + 8 != size:
        return None
    kind = head[12:16]
    if kind in (b"VP8 ", b"VP8L"):
        chunks = _chunks(source, 12, size)
        if chunks is None or len(chunks) != 1:
            return None
        frame = _frame(source, chunks)
        if frame is None:
            return None
        width, height, vp8l_alpha, _ = frame
        if width * height > _MAX_WEBP_CANVAS:
            return None
        mode = "RGBA" if vp8l_alpha else "RGB"
        return FastHeader(width, height, "WEBP", mode, 1, False, mode == "RGBA")
    if kind != b"VP8X" or _unpack_le32(head, 16)[0] != 10:
        return None
    flags = head[20]
    width, height = 1 + _le24(head, 24), 1 + _le24(head, 27)
    if flags & ~_VALID_FLAGS or width * height >= _MAX_IMAGE_AREA or width * height > _MAX_WEBP_CANVAS:
        return None
    chunks = _chunks(source, 30, size)
    if chunks is None:
        return None
    info: dict = {}
    metadata = [(fourcc, offset, length) for fourcc, offset, length in chunks if fourcc in (b"EXIF", b"XMP ")]
    for key, fourcc, flag in (("exif", b"EXIF", _EXIF_FLAG), ("xmp", b"XMP ", _XMP_FLAG)):
        found = [(offset, length) for name, offset, length in metadata if name == fourcc]
        if len(found) > 1:
            return None
        if found and flags & flag and found[0][1]:
            info[key] = source.at(found[0][0], found[0][1])
    others = [chunk for chunk in chunks if chunk[0] not in (b"ICCP", b"EXIF", b"XMP ")]
    if flags & _ANIMATION_FLAG:
        frames = 0
        if not others or others[0][0] != b"ANIM" or others[0][2] + (others[0][2] & 1) < 6:
            return None
        for fourcc, offset, length in others[1:]:
            if fourcc != b"ANMF" or length + (length & 1) < 16:
                return None
            header = source.at(offset, 16)
            x, y = 2 * _le24(header, 0), 2 * _le24(header, 3)
            if (1 + _le24(header, 6)) * (1 + _le24(header, 9)) >= _MAX_IMAGE_AREA:
                return None
            group = _chunks(source, offset + 16, offset + length + (length & 1))
            frame = _frame(source, group) if group else None
            if frame is None:
                return None
            if x + frame[0] > width or y + frame[1] > height:
                return None
            frames += 1
        if not frames:
            return None
        mode = "RGBA" if flags & _ALPHA_FLAG else "RGB"
        animated = frames > 1
    else:
        # The image's chunks follow one another (demux stores ALPH and VP8 as one frame only so).
        first = chunks.index(others[0]) if others else 0
        if chunks[first : first + len(others)] != others:
            return None
        frame = _frame(source, others)
        if frame is None or (frame[0], frame[1]) != (width, height):
            return None
        vp8l_alpha, alph = frame[2], frame[3]
        is_lossless = others[-1][0] == b"VP8L"
        has_alpha = vp8l_alpha if is_lossless else bool(flags & _ALPHA_FLAG) or alph
        mode = "RGBA" if has_alpha else "RGB"
        animated = False
    orientation = _orientation(_InfoHolder(info))
    if orientation is None:
        return None
    return FastHeader(width, height, "WEBP", mode, orientation, animated, mode == "RGBA")
