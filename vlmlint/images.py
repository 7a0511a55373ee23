"""Image facts from file headers, and the one full decode the exact path needs.

The default path never decodes pixels: PIL's lazy open reads the header (about 20 us), the EXIF
orientation is applied to width and height the way transformers' `load_image` applies
`ImageOps.exif_transpose`, and truncation is caught cheaply by the format's end marker, or for TIFF by
where its last strip ends (a file whose marker is missing is then decoded once to confirm, so valid
files with trailers are not flagged). Animation and transparency come from the header too.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from vlmlint.sample import ImageRef

# EXIF orientations 5-8 rotate by 90 or 270 degrees: width and height swap after exif_transpose.
_SWAPPING_ORIENTATIONS = frozenset({5, 6, 7, 8})
_TAIL_BYTES = 16384
_END_MARKERS = {"JPEG": b"\xff\xd9", "MPO": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82", "GIF": b"\x3b"}


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
    if not os.path.exists(ref.path):
        raise ImageProblem("missing", f"image file not found: {ref.reference}")
    if not os.path.isfile(ref.path):
        raise ImageProblem("unreadable", f"not a regular file: {ref.reference}")
    return ref.path


def _tail(ref: ImageRef) -> bytes:
    if ref.data is not None:
        return ref.data[-_TAIL_BYTES:]
    assert ref.path is not None
    with open(ref.path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - _TAIL_BYTES))
        return handle.read()


def _above_pil_limit(width: int, height: int) -> bool:
    """Above PIL's decompression-bomb limit: Image.open would warn (and raise above twice it)."""
    limit = Image.MAX_IMAGE_PIXELS
    return limit is not None and width * height > limit


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


def _size_of(ref: ImageRef) -> int:
    if ref.data is not None:
        return len(ref.data)
    assert ref.path is not None
    return os.path.getsize(ref.path)


def read_header(ref: ImageRef) -> ImageHeader:
    """Size, format and mode from the header alone; raises ImageProblem for unusable images."""
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
            tiff_end = _tiff_data_end(image) if image_format == "TIFF" else None
    except UnidentifiedImageError:
        raise ImageProblem("unreadable", f"not an image file PIL can read: {ref.reference}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageProblem("unreadable", f"cannot read image header of {ref.reference}: {exc}") from None
    if width <= 0 or height <= 0:
        raise ImageProblem("unreadable", f"image {ref.reference} has an empty size {width}x{height}")
    if tiff_end is not None and tiff_end > _size_of(ref):
        decode_image(ref)  # the pixel data runs past the end of the file: confirm with one decode
    elif _looks_truncated(ref, image_format) and not _above_pil_limit(width, height):
        # Rare: confirm with one real decode, so files with trailing data after the marker pass.
        # (Not for images above PIL's pixel limit: those are never decoded, VLM202 reports them.)
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
