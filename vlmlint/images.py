"""Image facts from file headers, and the one full decode the exact path needs.

The default path never decodes pixels: PIL's lazy open reads the header (about 20 us), the EXIF
orientation is applied to width and height the way transformers' `load_image` applies
`ImageOps.exif_transpose`, and truncation is caught cheaply by the format's end marker (a file whose
marker is missing is then decoded once to confirm, so valid files with trailers are not flagged).
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
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82", "GIF": b"\x3b"}


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


def _looks_truncated(ref: ImageRef, image_format: str | None) -> bool:
    marker = _END_MARKERS.get(image_format or "")
    if marker is None:
        return False
    tail = _tail(ref).rstrip(b"\x00\r\n ")
    if image_format == "GIF":
        return not tail.endswith(marker)
    return marker not in tail


def _orientation(image: Image.Image) -> int:
    # PngImageFile.getexif() decodes the whole image when no eXIf chunk precedes the pixel data;
    # only ask PNGs whose header already carried one. (An eXIf chunk after IDAT is not seen: documented.)
    if image.format == "PNG" and "exif" not in image.info:
        return 1
    value = image.getexif().get(0x0112, 1)
    return value if isinstance(value, int) else 1


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
            width, height = image.size
            image_format, mode = image.format, image.mode
            orientation = _orientation(image)
    except UnidentifiedImageError:
        raise ImageProblem("unreadable", f"not an image file PIL can read: {ref.reference}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageProblem("unreadable", f"cannot read image header of {ref.reference}: {exc}") from None
    if width <= 0 or height <= 0:
        raise ImageProblem("unreadable", f"image {ref.reference} has an empty size {width}x{height}")
    if _looks_truncated(ref, image_format):
        # Rare: confirm with one real decode, so files with trailing data after the marker pass.
        decode_image(ref)
    shown_width, shown_height = (height, width) if orientation in _SWAPPING_ORIENTATIONS else (width, height)
    return ImageHeader(shown_width, shown_height, image_format, mode, orientation, width, height)


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
