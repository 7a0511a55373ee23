"""A video's header facts, read through PyAV without decoding a frame (issue 20, part 2).

    probe_video(source) -> VideoMeta     source: a path, the file's bytes, or a binary file object

PyAV (`av`, FFmpeg bundled in its wheel) is imported inside `probe_video`: `import vlmlint` does not
load it. From the container's first video stream, as transformers 5.24's `read_video_pyav`
(transformers/video_utils.py) reads it:

- `header_frames` is `stream.frames`, the frame count the container writes (MP4/MOV: the sample
  table; AVI: its index). MKV and WebM write none (0): `read_video_pyav` then builds its metadata
  with `total_num_frames=0`, so no frame can be sampled (rules/media.py VLM210). `frames` is
  `stream.frames` where it is above 0 (`frames_from="header"`), else the stream's packets counted by
  demuxing (`container.demux(stream)`, no decode; `frames_from="packets"`): one packet holds one
  frame in these containers (tests/test_video_probe.py checks it against a full decode of every
  fixture clip). Counting packets reads the whole file: its cost grows with the file's size.
- `content_fps` is the frame rate torchcodec reports in its exact mode (transformers 5.24's default
  video reader, which every video processor uses): the packets over the span of their timestamps
  (first pts to the last one's pts + duration), read by demuxing every packet without decoding.
  It equals `average_rate` for most MP4s but not all (29.97 fps in the last bits), and differs in
  MKV/WebM (60.06 for a 60 fps MKV); tests/test_video_probe.py checks it bit for bit against
  torchcodec's records (fixtures/clips_torchcodec.yaml). Demuxing reads the whole file.
- `fps` is `float(stream.average_rate)` (None when the header has none); `duration` is
  `frames / fps`, the figure `read_video_pyav` computes (`total_num_frames / video_fps`) and the
  samplers use; `stream_duration` is what the stream header says (`stream.duration * time_base`,
  which LLaMA-Factory 0.9.5's mm_plugin samples with; None in MKV/WebM). They differ by a frame's
  worth or so (an MP4's last frame duration, B-frame delay).
- `width`/`height` are the stream's (codec parameters, the cropped size): the size of every decoded
  frame, which is what a video processor sees. The coded size (macroblock-padded) is not used and
  the sample aspect ratio is not applied (no reader applies it either).
- `rotation` is the display matrix's rotation in degrees counter-clockwise, in 0, 90, 180 or 270
  (FFmpeg's `av_display_rotation_get`, as PyAV's `VideoFrame.rotation`, taken modulo 360). PyAV 18
  exposes it only on decoded frames, so it is read from the header here: an ISO BMFF (MP4, MOV)
  track's `tkhd` matrix times the movie's `mvhd` matrix (FFmpeg's mov.c `mov_read_tkhd`), or a
  Matroska track's ProjectionPoseRoll (matroskadec.c `mkv_create_display_matrix`). Other
  containers: 0. transformers' readers, qwen-vl-utils and LLaMA-Factory all ignore it (VLM211).

A clip that cannot be probed raises VideoProbeError with a message that names the problem (not a
container PyAV can open, no video stream, an MP4 whose index runs past the end of the file, no
frame); vlmlint/media.py turns it into VLM201.
"""

from __future__ import annotations

import io
import math
import os
import struct
from collections.abc import Callable
from typing import BinaryIO

from vlmlint.records import VideoMeta

Source = str | os.PathLike | bytes | BinaryIO

_IDENTITY = (65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30)


class VideoProbeError(Exception):
    """A clip whose header PyAV cannot read as a video; str() is the reason, for a VLM201 message."""


def probe_video(source: Source) -> VideoMeta:
    """The header facts of the first video stream of `source` (no frame is decoded)."""
    import av  # lazily: PyAV loads FFmpeg's libraries (tens of ms) and most scans have no video

    handle, owned = _binary(source)
    try:
        size = _size(handle)
        try:
            container = av.open(handle, mode="r", metadata_errors="ignore")
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise VideoProbeError(f"not a video container FFmpeg can open ({_reason(exc)})") from None
        with container:
            if not container.streams.video:
                others = ", ".join(sorted({s.type for s in container.streams})) or "no streams"
                raise VideoProbeError(f"no video stream in the {container.format.name} container ({others})")
            stream = container.streams.video[0]
            width, height = stream.width, stream.height
            if not width or not height:
                raise VideoProbeError("the video stream's header gives no frame size")
            header_frames = max(int(stream.frames or 0), 0)
            fps = float(stream.average_rate) if stream.average_rate else None
            stream_duration = (
                float(stream.duration * stream.time_base)
                if stream.duration is not None and stream.time_base is not None
                else None
            )
            formats = set(container.format.name.split(","))
            if header_frames:
                _check_index(stream, size)
            packets, span = _scan_packets(container, stream)
            if header_frames:
                frames, frames_from = header_frames, "header"
            else:
                frames, frames_from = packets, "packets"
            if frames == 0:
                raise VideoProbeError("the video stream holds no frame")
        rotation = _rotation(handle, formats)
    finally:
        if owned:
            handle.close()
    return VideoMeta(
        frames=frames,
        fps=fps,
        duration=frames / fps if fps else None,
        width=width,
        height=height,
        rotation=rotation,
        header_frames=header_frames,
        frames_from=frames_from,
        stream_duration=stream_duration,
        content_fps=packets / span if span else None,
    )


def _binary(source: Source) -> tuple[BinaryIO, bool]:
    """A seekable binary handle on the source, and whether it is ours to close."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source)), True
    if isinstance(source, (str, os.PathLike)):
        try:
            return open(source, "rb"), True  # noqa: SIM115 (closed by probe_video)
        except OSError as exc:
            raise VideoProbeError(f"cannot open the file: {exc.strerror or exc}") from None
    source.seek(0)
    return source, False


def _size(handle: BinaryIO) -> int:
    end = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    return end


def _reason(exc: Exception) -> str:
    """FFmpeg's words without the file name PyAV appends (the row already names the clip)."""
    strerror = getattr(exc, "strerror", None)
    return strerror or str(exc)


def _check_index(stream, size: int) -> None:
    """An MP4 whose moov (written first) indexes samples past the end of the file: a cut download.

    Its header still says N frames but a decoder yields fewer; `read_video_pyav` would sample
    indices that never come. Only ISO BMFF gives positions here (an index entry per sample).
    """
    entries = stream.index_entries
    if not len(entries):
        return
    end = max(entry.pos + entry.size for entry in entries)
    if end > size:
        raise VideoProbeError(
            f"truncated: the header indexes {len(entries)} frames up to byte {end:,} but the file ends at "
            f"byte {size:,} (a cut download or copy?)"
        )


def _scan_packets(container, stream) -> tuple[int, float | None]:
    """The stream's packets, demuxed without decoding (the last, empty one flushes the demuxer), and the
    span of their timestamps in seconds: from the first pts to the end of the last (pts + duration),
    as torchcodec's exact-mode scan measures it (None without timestamps)."""
    import av

    count = 0
    first = end = None  # in the stream's time base (whole numbers: seconds only once, at the end)
    base = stream.time_base
    try:
        for packet in container.demux(stream):
            if not packet.size:
                continue
            count += 1
            pts = packet.pts
            if pts is None:
                continue
            stop = pts + (packet.duration or 0)
            first = pts if first is None or pts < first else first
            end = stop if end is None or stop > end else end
    except av.FFmpegError as exc:
        raise VideoProbeError(f"the video stream cannot be read to its end ({_reason(exc)})") from None
    if first is None or end is None or base is None or end <= first:
        return count, None
    return count, float(end * base) - float(first * base)  # as torchcodec: each end in seconds, then the span


# -- the display matrix, from the container header -------------------------------------------------------------


def _rotation(handle: BinaryIO, formats: set[str]) -> int:
    """The display matrix's counter-clockwise rotation in degrees (0, 90, 180 or 270), 0 if none."""
    try:
        if formats & {"mov", "mp4"}:
            matrix = _bmff_matrix(handle)
        elif "matroska" in formats:
            matrix = _matroska_matrix(handle)
        else:
            matrix = None
    except (struct.error, ValueError, OSError):  # a header PyAV accepted but that we cannot walk
        matrix = None
    if matrix is None:
        return 0
    degrees = _rotation_get(matrix)
    return 0 if degrees is None else round(degrees) % 360


def _rotation_get(matrix: tuple[int, ...]) -> float | None:
    """FFmpeg's libavutil/display.c av_display_rotation_get: degrees counter-clockwise, None if degenerate."""
    a, b, c, d = (matrix[i] / 65536.0 for i in (0, 1, 3, 4))
    scale0, scale1 = math.hypot(a, c), math.hypot(b, d)
    if scale0 == 0.0 or scale1 == 0.0:
        return None
    return -math.degrees(math.atan2(b / scale1, a / scale0))


def _boxes(read: Callable[[int, int], bytes], start: int, end: int):
    """(type, payload start, payload end) of the ISO BMFF boxes in [start, end)."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", read(pos, 8))
        header = 8
        if size == 1:
            (size,) = struct.unpack(">Q", read(pos + 8, 8))
            header = 16
        elif size == 0:
            size = end - pos
        if size < header:
            return
        yield kind, pos + header, min(pos + size, end)
        pos += size


def _bmff_matrix(handle: BinaryIO) -> tuple[int, ...] | None:
    """The first video track's display matrix (tkhd x mvhd, FFmpeg's mov.c mov_read_tkhd), None if identity."""

    def read(pos: int, count: int) -> bytes:
        handle.seek(pos)
        data = handle.read(count)
        if len(data) < count:
            raise ValueError("short read")
        return data

    end = _size(handle)
    moov = next(((s, e) for kind, s, e in _boxes(read, 0, end) if kind == b"moov"), None)
    if moov is None:
        return None
    movie = _IDENTITY
    for kind, start, stop in _boxes(read, *moov):
        if kind == b"mvhd":
            version = read(start, 1)[0]
            movie = struct.unpack(">9i", read(start + (48 if version == 1 else 36), 36))
        elif kind == b"trak":
            track, handler = None, None
            for inner, s, e in _boxes(read, start, stop):
                if inner == b"tkhd":
                    version = read(s, 1)[0]
                    track = struct.unpack(">9i", read(s + (52 if version == 1 else 40), 36))
                elif inner == b"mdia":
                    for box, s2, _ in _boxes(read, s, e):
                        if box == b"hdlr":
                            handler = read(s2 + 8, 4)
            if handler == b"vide" and track is not None:
                matrix = _consolidate(track, movie)
                return None if matrix == _IDENTITY else matrix
    return None


def _consolidate(track: tuple[int, ...], movie: tuple[int, ...]) -> tuple[int, ...]:
    """mov.c: res[i][j] = sum_e (track[i][e] * movie[e][j]) >> (16, 16, 30)[e], in fixed point."""
    shifts = (16, 16, 30)
    result = []
    for i in range(3):
        for j in range(3):
            total = sum((track[i * 3 + e] * movie[e * 3 + j]) >> shifts[e] for e in range(3))
            result.append(((total + 2**31) % 2**32) - 2**31)  # the int32 the C code stores
    return tuple(result)


# Matroska element IDs (RFC 9559) on the way to a track's projection.
_SEGMENT, _TRACKS, _TRACK_ENTRY, _TRACK_TYPE = 0x18538067, 0x1654AE6B, 0xAE, 0x83
_VIDEO, _PROJECTION, _YAW, _PITCH, _ROLL = 0xE0, 0x7670, 0x7673, 0x7674, 0x7675
_CLUSTER = 0x1F43B675
_MASTERS = {_SEGMENT, _TRACKS, _TRACK_ENTRY, _VIDEO, _PROJECTION}


def _matroska_matrix(handle: BinaryIO) -> tuple[int, ...] | None:
    """The first video track's display matrix from its Projection (matroskadec.c), None if none."""
    handle.seek(0)
    end = _size(handle)

    def vint(pos: int, keep_marker: bool) -> tuple[int, int, bool]:
        """(value, length, all value bits set) of the EBML variable-size integer at pos."""
        handle.seek(pos)
        first = handle.read(1)
        if not first:
            raise ValueError("end of file")
        length = 9 - first[0].bit_length()
        if length > 8:
            raise ValueError("bad EBML length")
        data = first + handle.read(length - 1)
        value = int.from_bytes(data, "big")
        if not keep_marker:
            value &= (1 << (7 * length)) - 1
        unknown = value == (1 << (7 * length)) - 1
        return value, length, unknown

    def elements(start: int, stop: int):
        pos, seen = start, 0
        while pos < stop and seen < 4096:
            seen += 1
            ident, id_len, _ = vint(pos, keep_marker=True)
            size, size_len, unknown = vint(pos + id_len, keep_marker=False)
            body = pos + id_len + size_len
            body_end = stop if unknown else min(body + size, stop)
            yield ident, body, body_end
            if unknown and ident not in _MASTERS:
                return  # a cluster of unknown size (a live stream): nothing past it can be found
            pos = body if unknown else body_end

    def number(start: int, stop: int, is_float: bool) -> float:
        handle.seek(start)
        data = handle.read(stop - start)
        if is_float:
            return struct.unpack(">f" if len(data) == 4 else ">d", data)[0] if data else 0.0
        return int.from_bytes(data, "big")

    for ident, start, stop in elements(0, end):
        if ident != _SEGMENT:
            continue
        for child, s, e in elements(start, stop):
            if child == _CLUSTER:
                break
            if child != _TRACKS:
                continue
            for entry, s2, e2 in elements(s, e):
                if entry != _TRACK_ENTRY:
                    continue
                fields = dict((k, (a, b)) for k, a, b in elements(s2, e2))
                if _TRACK_TYPE not in fields or number(*fields[_TRACK_TYPE], False) != 1:
                    continue  # not a video track
                if _VIDEO not in fields:
                    return None
                video = dict((k, (a, b)) for k, a, b in elements(*fields[_VIDEO]))
                if _PROJECTION not in video:
                    return None
                pose = dict((k, (a, b)) for k, a, b in elements(*video[_PROJECTION]))
                yaw, pitch, roll = (
                    number(*pose[k], True) if k in pose else 0.0 for k in (_YAW, _PITCH, _ROLL)
                )
                return _matroska_pose(yaw, pitch, roll)
        return None
    return None


def _matroska_pose(yaw: float, pitch: float, roll: float) -> tuple[int, ...] | None:
    """matroskadec.c mkv_create_display_matrix: a 2-D rotation (roll, counter-clockwise) and yaw 180 flip."""
    if yaw == pitch == roll == 0.0:
        return None
    if pitch != 0.0 or yaw not in (0.0, 180.0, -180.0) or math.isnan(roll):
        return None  # FFmpeg ignores a non-2-D projection
    hflip = yaw != 0.0
    radians = -(roll * (2 * hflip - 1)) * math.pi / 180.0  # av_display_rotation_set(matrix, angle)
    cos, sin = math.cos(radians), math.sin(radians)
    matrix = [int(cos * 65536), int(-sin * 65536), 0, int(sin * 65536), int(cos * 65536), 0, 0, 0, 1 << 30]
    if hflip:  # av_display_matrix_flip(matrix, 1, 0): the first column negated
        for i in (0, 3, 6):
            matrix[i] = -matrix[i]
    return tuple(matrix)
