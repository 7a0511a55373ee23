"""Image facts from file headers, and the one full decode the exact path needs.

The default path never decodes pixels: PIL's lazy open reads the header (about 20 us), the EXIF
orientation is applied to width and height the way transformers' `load_image` applies
`ImageOps.exif_transpose`, and truncation is caught cheaply by the format's end marker, or for TIFF by
where its last strip ends (a file whose marker is missing is then decoded once to confirm, so valid
files with trailers are not flagged). Animation and transparency come from the header too.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import struct
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from vlmlint.image_header import read_fast
from vlmlint.records import MAX_EMBEDDED_BYTES, ImageError, ImageRef

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


# The formats vlmlint opens (PIL's names), on the header and the decode path alike. Never EPS / PS (PIL
# starts Ghostscript to load them) nor the plugins that only identify a file for an external handler
# (WMF/EMF, MPEG, FITS, HDF5, GRIB, BUFR); a file of another format is VLM201, named.
IMAGE_FORMATS = (
    "JPEG",
    "PNG",
    "GIF",
    "WEBP",
    "BMP",
    "DIB",
    "TIFF",
    "AVIF",
    "HEIF",
    "ICO",
    "JPEG2000",
    "PPM",
    "TGA",
    "QOI",
)
# What one header read may cost: bytes read from the file (WebP and AVIF headers read the whole file) and,
# for TIFF, numeric values in the first IFD's tags (StripOffsets...), which PIL unpacks into Python ints
# and one tile per strip (1M strips: some 350 MB and 3 s).
MAX_HEADER_BYTES = 64 * 2**20
MAX_TIFF_TAG_VALUES = 2**19


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


MAX_REMOTE_BYTES = 32 * 2**20
# The whole download's deadline: the socket timeout bounds each read, not a server that trickles a byte
# every few seconds.
REMOTE_DEADLINE_S = 30.0
_REMOTE_CHUNK = 64 * 1024


def fetch(url: str, timeout: float = 20.0) -> bytes:
    """Download an image for --allow-remote: bounded in size and time; errors become ImageProblem.

    The socket timeout bounds each read; REMOTE_DEADLINE_S bounds the whole fetch (headers, redirects,
    body): when it passes, a timer shuts the connection's socket down, which ends any read in progress.
    """
    import http.client
    import socket
    import threading
    import urllib.request

    connections: list = []

    def recorded(http_class):
        def make(*args, **kwargs):
            connection = http_class(*args, **kwargs)
            connections.append(connection)
            return connection

        return make

    class Http(urllib.request.HTTPHandler):
        def do_open(self, http_class, req, **kwargs):
            return super().do_open(recorded(http_class), req, **kwargs)

    class Https(urllib.request.HTTPSHandler):
        def do_open(self, http_class, req, **kwargs):
            return super().do_open(recorded(http_class), req, **kwargs)

    expired = threading.Event()

    def expire():
        expired.set()
        for connection in connections:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(REMOTE_DEADLINE_S, expire)
    timer.daemon = True
    timer.start()
    chunks: list[bytes] = []
    received = 0
    try:
        opener = urllib.request.build_opener(Http, Https)
        with opener.open(url, timeout=min(timeout, REMOTE_DEADLINE_S)) as response:
            while received <= MAX_REMOTE_BYTES and not expired.is_set():
                chunk = response.read1(_REMOTE_CHUNK)  # what has arrived, at most a chunk
                if not chunk:
                    break
                chunks.append(chunk)
                received += len(chunk)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # IncompleteRead...
        if not expired.is_set():
            raise ImageProblem(ImageError.MISSING, f"cannot fetch {url}: {exc}") from None
    finally:
        timer.cancel()
        for connection in connections:
            connection.close()
    if expired.is_set():
        message = (
            f"cannot fetch {url}: not complete within {REMOTE_DEADLINE_S:g} s ({received:,} bytes received)"
        )
        raise ImageProblem(ImageError.UNREADABLE, message)
    if received > MAX_REMOTE_BYTES:
        raise ImageProblem(
            ImageError.UNREADABLE, f"{url} is larger than {MAX_REMOTE_BYTES // 2**20} MiB; not read"
        )
    return b"".join(chunks)


def _open(ref: ImageRef) -> io.BufferedIOBase:
    """The image's bytes as one open stream: a buffer, or the regular file opened once, without blocking."""
    if ref.url is not None:
        raise ImageProblem(ImageError.REMOTE, f"{ref.url} is a URL; vlmlint does not fetch images")
    if ref.problem is not None:  # the reader refused it (an embedded image above MAX_EMBEDDED_BYTES)
        raise ImageProblem(ImageError.UNREADABLE, ref.problem)
    if ref.data is not None:
        if len(ref.data) > MAX_EMBEDDED_BYTES:
            limit = f"{MAX_EMBEDDED_BYTES // 2**20} MiB"
            raise ImageProblem(
                ImageError.UNREADABLE, f"embedded image {ref.reference} is larger than {limit}; not read"
            )
        return io.BytesIO(ref.data)
    assert ref.path is not None
    return open_regular(ref.path, ref.reference)


def open_regular(path: str, reference: str | None = None, what: str = "image") -> io.BufferedReader:
    """Open a regular file for reading, or raise ImageProblem: never blocks on a FIFO, never reads a device.

    The check is made on the open descriptor (fstat), so a file swapped for a FIFO after a stat cannot
    hang the scan in open(): O_NONBLOCK makes that open return at once.
    """
    reference = reference or path
    try:
        mode = os.stat(path).st_mode  # first, for the kind in the message (a socket cannot be opened)
        if stat.S_ISREG(mode):
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            mode = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(mode):
                os.close(descriptor)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # a dangling symlink too
            raise ImageProblem(ImageError.MISSING, f"{what} file not found: {reference}") from None
        raise ImageProblem(ImageError.UNREADABLE, f"cannot open {reference}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        # Why: opening a FIFO blocks the scan forever, a device never ends; only regular files are read.
        kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
        raise ImageProblem(ImageError.UNREADABLE, f"not a regular file: {reference} (a {kind})")
    return os.fdopen(descriptor, "rb")


def open_image(stream) -> Image.Image:
    """PIL's lazy open restricted to IMAGE_FORMATS: no plugin that starts a program is ever tried."""
    return Image.open(stream, formats=_formats())


_OPENABLE: tuple[str, ...] | None = None


def _formats() -> tuple[str, ...]:
    global _OPENABLE
    if _OPENABLE is None:
        Image.init()  # every plugin registered: HEIF only where a plugin provides it
        _OPENABLE = tuple(name for name in IMAGE_FORMATS if name in Image.OPEN)
    return _OPENABLE


def _other_format(stream) -> str | None:
    """The PIL format a file vlmlint does not open would have been read as (from its first bytes only)."""
    stream.seek(0)
    prefix = stream.read(16)
    for name, (_, accept) in Image.OPEN.items():
        if name not in IMAGE_FORMATS and accept is not None:
            try:
                if accept(prefix) is True:
                    return name
            except Exception:  # an accept() that cannot judge 16 bytes judges nothing
                continue
    return None


class _Capped:
    """A read-only view of a stream that stops a header read after MAX_HEADER_BYTES."""

    def __init__(self, stream):
        self._stream = stream
        self.read_bytes = 0

    def _count(self, data: bytes) -> bytes:
        self.read_bytes += len(data)
        if self.read_bytes > MAX_HEADER_BYTES:
            raise _HeaderTooLarge()
        return data

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = MAX_HEADER_BYTES + 1 - self.read_bytes
        return self._count(self._stream.read(size))

    def readline(self, size: int = -1) -> bytes:
        return self._count(self._stream.readline(size if size and size > 0 else MAX_HEADER_BYTES))

    def __getattr__(self, name):  # seek, tell, fileno...
        return getattr(self._stream, name)


class _HeaderTooLarge(Exception):
    pass


def _tiff_values(stream, size: int) -> int:
    """How many numeric values the first IFD of a TIFF declares (what PIL unpacks at open); 0 if not TIFF."""
    stream.seek(0)
    head = stream.read(16)
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        order, big = "<" if head[:2] == b"II" else ">", False
        offset = struct.unpack(order + "I", head[4:8])[0]
    elif head[:4] in (b"II+\x00", b"MM\x00+") and len(head) == 16:  # BigTIFF
        order, big = "<" if head[:2] == b"II" else ">", True
        offset = struct.unpack(order + "Q", head[8:16])[0]
    else:
        return 0
    if offset >= size:
        return 0  # PIL reports the IFD past the end itself
    stream.seek(offset)
    count_bytes = stream.read(8 if big else 2)
    if len(count_bytes) < (8 if big else 2):
        return 0
    entries = struct.unpack(order + ("Q" if big else "H"), count_bytes)[0]
    entry_size = 20 if big else 12
    table = stream.read(min(entries, 65536) * entry_size)
    values = 0
    for start in range(0, len(table) - entry_size + 1, entry_size):
        kind = struct.unpack(order + "H", table[start + 2 : start + 4])[0]
        count = struct.unpack(order + ("Q" if big else "I"), table[start + 4 : start + (12 if big else 8)])[0]
        if kind not in (1, 2, 7):  # BYTE, ASCII and UNDEFINED stay bytes, bounded by the file's size
            values += count
    return values


def _tail(stream) -> bytes:
    stream.seek(0, os.SEEK_END)
    stream.seek(max(0, stream.tell() - _TAIL_BYTES))
    return stream.read()


def _decodable(width: int, height: int, max_pixels: int | None) -> bool:
    """Whether a confirming decode is allowed: within PIL's decompression-bomb limit and the caller's."""
    limits = [limit for limit in (Image.MAX_IMAGE_PIXELS, max_pixels) if limit is not None]
    return not limits or width * height <= min(limits)


def _looks_truncated(stream, image_format: str | None) -> bool:
    marker = _END_MARKERS.get(image_format or "")
    if marker is None:
        return False
    tail = _tail(stream).rstrip(b"\x00\r\n ")
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


def _box_data_end(stream) -> int | None:
    """Where an AVIF/HEIF file's last top-level ISOBMFF box ends, from the box headers (None: unknown)."""
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


def _size_of(stream) -> int:
    if isinstance(stream, io.BytesIO):
        return stream.getbuffer().nbytes
    return os.fstat(stream.fileno()).st_size


def _unsupported(stream, reference: str) -> ImageProblem:
    other = _other_format(stream)
    if other is None:
        return ImageProblem(ImageError.UNREADABLE, f"not an image file PIL can read: {reference}")
    return ImageProblem(
        ImageError.UNREADABLE,
        f"{reference} is in {other} format, not one vlmlint reads ({', '.join(_formats())}); "
        "convert it, e.g. to PNG",
    )


def _first_warning(caught: list) -> str:
    return f" (PIL: {caught[0].message})" if caught else ""


def read_header(ref: ImageRef, max_decode_pixels: int | None = None) -> ImageHeader:
    """Size, format and mode from the header alone; raises ImageProblem for unusable images.

    A file that looks truncated is decoded once to confirm, unless it has more pixels than PIL's
    limit or `max_decode_pixels` (the bomb_pixels threshold): such images are never decoded. The read
    is bounded (MAX_HEADER_BYTES, MAX_TIFF_TAG_VALUES) and PIL's warnings are kept off stderr.
    """
    with _open(ref) as stream:
        return _read_header(ref, stream, max_decode_pixels)


def _read_header(ref: ImageRef, stream, max_decode_pixels: int | None) -> ImageHeader:
    size = _size_of(stream)
    # JPEG, PNG and WebP from the bytes they need (image_header.py); None: PIL's open decides, as before.
    fast = read_fast(stream, size)
    if fast is not None:
        width, height, image_format, mode = fast.width, fast.height, fast.format, fast.mode
        orientation, animated, transparency = fast.orientation, fast.animated, fast.transparency
        data_end = None  # their ends are markers (JPEG, PNG) or checked by the reader (WebP's RIFF size)
    else:
        width, height, image_format, mode, orientation, animated, transparency, data_end = _pil_header(
            ref, stream, size
        )
    if width <= 0 or height <= 0:
        raise ImageProblem(ImageError.UNREADABLE, f"image {ref.reference} has an empty size {width}x{height}")
    # Pixel data running past the end of the file (TIFF, BMP, AVIF), or a missing end marker: confirm with
    # one real decode, so that files with trailing data after the marker pass. Never for images above
    # the pixel limits, not even to confirm: VLM202 reports those.
    if _decodable(width, height, max_decode_pixels) and (
        (data_end is not None and data_end > size) or _looks_truncated(stream, image_format)
    ):
        stream.seek(0)
        _decode(ref, stream)
    shown_width, shown_height = (height, width) if orientation in _SWAPPING_ORIENTATIONS else (width, height)
    return ImageHeader(
        shown_width, shown_height, image_format, mode, orientation, width, height, animated, transparency
    )


def _pil_header(ref: ImageRef, stream, size: int) -> tuple:
    """What PIL's lazy open tells: (width, height, format, mode, orientation, animated, transparency, data end)."""
    values = _tiff_values(stream, size)
    if values > MAX_TIFF_TAG_VALUES:
        raise ImageProblem(
            ImageError.UNREADABLE,
            f"TIFF {ref.reference} declares {values:,} values in its tags (strips, tiles...), above the "
            f"{MAX_TIFF_TAG_VALUES:,} vlmlint reads; not read",
        )
    stream.seek(0)
    capped = _Capped(stream)
    # Why record: a hostile TIFF makes PIL warn once per tag (thousands of lines on stderr).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            previous_limit = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None  # only the header is read here; size limits are a rule's business
            try:
                image = open_image(capped)
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
                    data_end = _box_data_end(stream)
                else:
                    data_end = _raw_data_end(image)
        except _HeaderTooLarge:
            message = (
                f"image header of {ref.reference} is larger than {MAX_HEADER_BYTES // 2**20} MiB; not read"
            )
            raise ImageProblem(ImageError.UNREADABLE, message) from None
        except UnidentifiedImageError:
            raise _unsupported(stream, ref.reference) from None
        except (OSError, SyntaxError, ValueError) as exc:
            message = f"cannot read image header of {ref.reference}: {exc}{_first_warning(caught)}"
            raise ImageProblem(ImageError.UNREADABLE, message) from None
        except Exception as exc:  # PIL's plugins raise struct.error, IndexError, EOFError... on hostile bytes
            message = f"cannot read image header of {ref.reference}: {type(exc).__name__}: {exc}"
            raise ImageProblem(ImageError.UNREADABLE, message + _first_warning(caught)) from None
    return width, height, image_format, mode, orientation, animated, transparency, data_end


def decode_image(ref: ImageRef) -> Image.Image:
    """Decode fully as transformers' load_image does: EXIF transpose, then RGB."""
    with _open(ref) as stream:
        return _decode(ref, stream)


def _decode(ref: ImageRef, stream) -> Image.Image:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with open_image(stream) as image:
                image.load()
                return ImageOps.exif_transpose(image).convert("RGB")
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageProblem(ImageError.UNREADABLE, f"{ref.reference}: {exc}") from None
        except UnidentifiedImageError:
            raise _unsupported(stream, ref.reference) from None
        except (OSError, SyntaxError, ValueError) as exc:
            message = f"image {ref.reference} is truncated or corrupt: {exc}{_first_warning(caught)}"
            raise ImageProblem(ImageError.UNREADABLE, message) from None
        except Exception as exc:  # as in read_header: any decoder failure is the file's, not the scan's
            message = f"image {ref.reference} is truncated or corrupt: {type(exc).__name__}: {exc}"
            raise ImageProblem(ImageError.UNREADABLE, message + _first_warning(caught)) from None
