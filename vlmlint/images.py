"""Image facts from file headers, and the one full decode the exact path needs.

The default path never decodes pixels: PIL's lazy open reads the header (about 20 us), the EXIF
orientation is applied to width and height the way transformers' `load_image` applies
`ImageOps.exif_transpose`, and truncation is caught cheaply by the format's end marker, or for TIFF by
where its last strip ends (a file whose marker is missing is then decoded once to confirm, so valid
files with trailers are not flagged). Animation and transparency come from the header too.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from vlmlint.sample import ImageRef

# EXIF orientations 5-8 rotate by 90 or 270 degrees: width and height swap after exif_transpose.
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
_TAIL_BYTES = 16384
_END_MARKERS = {"JPEG": b"\xff\xd9", "MPO": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82", "GIF": b"\x3b"}


FILE_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


class ImageProblem(Exception):
    """An image that cannot be used; `kind` is one of: missing, unreadable, remote."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ImageHeader:
    width: int  # after EXIF orientation, as the processor will see it
    height: int
    format: str | None
    mode: str
    orientation: int = 1
    stored_width: int | None = None  # before EXIF orientation
    stored_height: int | None = None
    animated: bool = False
    transparency: bool = False


MAX_REMOTE_BYTES = 64 * 1024 * 1024


def fetch(url: str, timeout: float = 20.0) -> bytes:
    """Download an image for --allow-remote: bounded in size and time; errors become ImageProblem."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) only, checked by the reader)
            data = response.read(MAX_REMOTE_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise ImageProblem("missing", f"cannot fetch {url}: {exc}") from None
    if len(data) > MAX_REMOTE_BYTES:
        raise ImageProblem("unreadable", f"{url} is larger than {MAX_REMOTE_BYTES // 2**20} MiB; not read")
    return data


def _open(ref: ImageRef):
    if ref.url is not None:
        raise ImageProblem("remote", f"{ref.url} is a URL; vlmlint does not fetch images")
    if ref.data is not None:
        return io.BytesIO(ref.data)
    assert ref.path is not None
    try:
        mode = os.stat(ref.path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # a dangling symlink too
            raise ImageProblem("missing", f"image file not found: {ref.reference}") from None
        raise ImageProblem("unreadable", f"cannot open {ref.reference}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        # Why: opening a FIFO blocks the scan forever, a device never ends; only regular files are read.
        kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
        raise ImageProblem("unreadable", f"not a regular file: {ref.reference} (a {kind})")
    return ref.path


def _tail(ref: ImageRef) -> bytes:
    if ref.data is not None:
        return ref.data[-_TAIL_BYTES:]
    assert ref.path is not None
    with open(ref.path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - _TAIL_BYTES))
        return handle.read()


def _decodable(width: int, height: int, max_pixels: int | None) -> bool:
    """Whether a confirming decode is allowed: within PIL's decompression-bomb limit and the caller's."""
    limits = [limit for limit in (Image.MAX_IMAGE_PIXELS, max_pixels) if limit is not None]
    return not limits or width * height <= min(limits)


def _looks_truncated(ref: ImageRef, image_format: str | None) -> bool:
    marker = _END_MARKERS.get(image_format or "")
    if marker is None:
        return False
    tail = _tail(ref).rstrip(b"\x00\r\n ")
    if image_format == "GIF":
        return not tail.endswith(marker)
    return marker not in tail


def _orientation(image: Image.Image) -> int:
    # PngImageFile.getexif() decodes the whole image when no eXIf chunk precedes the pixel data; the
    # base method reads what the header already holds (eXIf, a "Raw profile type exif" text chunk, XMP)
    # without decoding. (An eXIf chunk after IDAT is not seen: documented.)
    exif = Image.Image.getexif(image) if image.format == "PNG" else image.getexif()
    value = exif.get(0x0112, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _stored_size(image: Image.Image) -> tuple[int, int]:
    """Width and height as stored, before the EXIF orientation.

    Recent Pillow reports a TIFF's size already oriented (its load() transposes in place); the
    ImageWidth / ImageLength tags hold the stored size whatever the Pillow version.
    """
    width, height = image.size
    if image.format == "TIFF":
        tags = getattr(image, "tag_v2", None) or {}
        stored = tags.get(256), tags.get(257)
        if all(isinstance(v, int) and v > 0 for v in stored):
            return stored[0], stored[1]
    return width, height


def _animated(image: Image.Image) -> bool:
    # An MPO (a camera JPEG carrying a second, preview or depth, picture) is not an animation: its
    # first frame is the photo. GIF reads as far as a second frame; APNG, WebP and TIFF know it from
    # their headers (acTL chunk, ANIM chunk, next IFD offset).
    if image.format == "MPO":
        return False
    return bool(getattr(image, "is_animated", False))


def _tiff_data_end(image: Image.Image) -> int | None:
    """Where a TIFF's last strip or tile ends, from its offset and byte-count tags (None: unknown)."""
    tags = getattr(image, "tag_v2", None) or {}
    for offsets_tag, counts_tag in ((273, 279), (324, 325)):  # strips, tiles
        offsets, counts = tags.get(offsets_tag), tags.get(counts_tag)
        if offsets is None or counts is None:
            continue
        offsets = offsets if isinstance(offsets, tuple) else (offsets,)
        counts = counts if isinstance(counts, tuple) else (counts,)
        if offsets and len(offsets) == len(counts):
            return max(o + c for o, c in zip(offsets, counts, strict=True))
    return None


def _raw_data_end(image: Image.Image) -> int | None:
    """Where uncompressed rows of a known stride end (BMP): tile offset + stride x rows (None: unknown)."""
    end = None
    for tile in image.tile:
        codec, box, offset, args = tile[0], tile[1], tile[2], tile[3]
        if codec == "raw" and isinstance(args, tuple) and len(args) > 1 and isinstance(args[1], int):
            if args[1] > 0 and box is not None:
                end = max(end or 0, offset + args[1] * (box[3] - box[1]))
    return end


def _box_data_end(ref: ImageRef) -> int | None:
    """Where an AVIF/HEIF file's last top-level ISOBMFF box ends, from the box headers (None: unknown)."""
    stream = io.BytesIO(ref.data) if ref.data is not None else open(ref.path, "rb")
    with stream:
        position = 0
        for _ in range(4096):  # a handful of boxes in practice (ftyp, meta, mdat); the bound guards the loop
            stream.seek(position)
            header = stream.read(16)
            if len(header) < 8:
                return position
            size = int.from_bytes(header[:4], "big")
            if size == 1 and len(header) == 16:
                size = int.from_bytes(header[8:16], "big")  # a 64-bit size follows the type
            if size < 8:
                return None  # 0: the box runs to the end of the file; below 8: not a box header
            position += size
    return None


def _size_of(ref: ImageRef) -> int:
    if ref.data is not None:
        return len(ref.data)
    assert ref.path is not None
    return os.path.getsize(ref.path)


def read_header(ref: ImageRef, max_decode_pixels: int | None = None) -> ImageHeader:
    """Size, format and mode from the header alone; raises ImageProblem for unusable images.

    A file that looks truncated is decoded once to confirm, unless it has more pixels than PIL's
    limit or `max_decode_pixels` (the bomb_pixels threshold): such images are never decoded.
    """
    source = _open(ref)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            previous_limit = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None  # only the header is read here; size limits are a rule's business
            try:
                image = Image.open(source)
            finally:
                Image.MAX_IMAGE_PIXELS = previous_limit
        with image:
            width, height = _stored_size(image)
            image_format, mode = image.format, image.mode
            orientation = _orientation(image)
            # What transformers' convert_to_rgb composites on white (load_image's convert("RGB") drops it).
            transparency = (
                bool({"A", "a"} & set(image.getbands())) or image.info.get("transparency") is not None
            )
            animated = _animated(image)
            if image_format == "TIFF":
                data_end = _tiff_data_end(image)
            elif image_format in ("AVIF", "HEIF"):
                data_end = _box_data_end(ref)
            else:
                data_end = _raw_data_end(image)
    except UnidentifiedImageError:
        raise ImageProblem("unreadable", f"not an image file PIL can read: {ref.reference}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageProblem("unreadable", f"cannot read image header of {ref.reference}: {exc}") from None
    except Exception as exc:  # PIL's plugins raise struct.error, IndexError, EOFError... on hostile bytes
        message = f"cannot read image header of {ref.reference}: {type(exc).__name__}: {exc}"
        raise ImageProblem("unreadable", message) from None
    if width <= 0 or height <= 0:
        raise ImageProblem("unreadable", f"image {ref.reference} has an empty size {width}x{height}")
    # Pixel data running past the end of the file (TIFF, BMP, AVIF), or a missing end marker: confirm with
    # one real decode, so that files with trailing data after the marker pass. Never for images above
    # the pixel limits, not even to confirm: VLM202 reports those.
    if _decodable(width, height, max_decode_pixels) and (
        (data_end is not None and data_end > _size_of(ref)) or _looks_truncated(ref, image_format)
    ):
        decode_image(ref)
    shown_width, shown_height = (height, width) if orientation in _SWAPPING_ORIENTATIONS else (width, height)
    return ImageHeader(
        shown_width, shown_height, image_format, mode, orientation, width, height, animated, transparency
    )


def decode_image(ref: ImageRef) -> Image.Image:
    """Decode fully as transformers' load_image does: EXIF transpose, then RGB."""
    source = _open(ref)
    try:
        with Image.open(source) as image:
            image.load()
            return ImageOps.exif_transpose(image).convert("RGB")
    except Image.DecompressionBombError as exc:
        raise ImageProblem("unreadable", f"{ref.reference}: {exc}") from None
    except UnidentifiedImageError:
        raise ImageProblem("unreadable", f"not an image file PIL can read: {ref.reference}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageProblem("unreadable", f"image {ref.reference} is truncated or corrupt: {exc}") from None
    except Exception as exc:  # as in read_header: any decoder failure is the file's, not the scan's
        message = f"image {ref.reference} is truncated or corrupt: {type(exc).__name__}: {exc}"
        raise ImageProblem("unreadable", message) from None
