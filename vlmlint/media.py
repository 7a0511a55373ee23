"""Videos and audio clips: whether each can be read at all, from its first bytes (no frame is decoded).

vlmlint does not count video or audio tokens yet (every row naming one gets VLM109 and its lengths
are lower bounds), but the checks media share with images apply: a missing file (VLM103), one outside
the dataset folder (VLM104), a URL (VLM105, never fetched) and a file no reader can open (VLM201):
not a regular file, empty, or text where a container should be (an HTML error page saved as
`clip.mp4` by a failed download). The check reads at most 512 bytes of the file. A video given as
a list of frames is checked frame by frame as images are (their headers, through `image_header`).

A video that passes is probed (vlmlint/video.py, PyAV, no frame decoded) on the same open file:
its header facts fill `MediaInfo.video`, and a clip the probe cannot read (not a container FFmpeg
opens, no video stream, an index past the end of the file) is VLM201 with the probe's reason. A
frame list's facts come from its frames' image headers: VideoMeta(frames=len(frames), no fps, the
first frame's size, frames_from="frame list"). Audio clips are only sniffed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from vlmlint.images import ImageProblem, open_regular
from vlmlint.records import ImageError, ImageInfo, ImageRef, MediaInfo, MediaRef, VideoMeta
from vlmlint.video import VideoProbeError, probe_video

_SNIFF_BYTES = 512
# Containers whose leading bytes are printable text: not to be mistaken for a saved text page.
_TEXT_LIKE_MEDIA = (
    b"#EXTM3U",
    b"#!AMR",
    b"RIFF",
    b"OggS",
    b"fLaC",
    b"ID3",
    b"FORM",
    b"FLV",
    b".snd",
    b"MThd",
)


def media_info(
    ref: MediaRef, *, allow_outside_root: bool, image_header: Callable[[ImageRef], ImageInfo]
) -> MediaInfo:
    """Whether the clip can be read; `image_header` checks each frame of a frame-list video."""
    kind = ref.kind
    if ref.frames:
        first: ImageInfo | None = None
        for position, frame in enumerate(ref.frames, start=1):
            header = image_header(frame)
            if header.error_code is not None:
                return MediaInfo(
                    kind,
                    ref.reference,
                    error_code=header.error_code,
                    error=f"frame {position} of {len(ref.frames)} ({frame.reference}): {header.error}",
                    frames=len(ref.frames),
                )
            first = first or header
        assert first is not None
        video = None
        if kind == "video" and first.width and first.height:
            video = VideoMeta(
                frames=len(ref.frames),
                fps=None,
                duration=None,
                width=first.width,
                height=first.height,
                frames_from="frame list",
            )
        return MediaInfo(kind, ref.reference, frames=len(ref.frames), video=video)
    if ref.outside_root and not allow_outside_root and ref.path is not None:
        real = os.path.realpath(ref.path)
        where = ref.path if real == ref.path else f"{ref.path} -> {real}"
        return MediaInfo(kind, ref.reference, ImageError.OUTSIDE, f"{where} is outside the dataset folder")
    if ref.url is not None:
        return MediaInfo(
            kind, ref.reference, ImageError.REMOTE, f"{ref.url} is a URL; vlmlint does not fetch {kind}"
        )
    if ref.problem is not None:  # the reader refused it (embedded bytes above MAX_EMBEDDED_BYTES)
        return MediaInfo(kind, ref.reference, ImageError.UNREADABLE, ref.problem)
    if ref.data is not None:
        problem = _sniff(ref, ref.data[:_SNIFF_BYTES])
        return problem or _probed(ref, ref.data)
    assert ref.path is not None
    try:  # a regular file only, checked on the open descriptor: a FIFO swapped in cannot block
        with open_regular(ref.path, ref.reference, ref.kind) as handle:
            problem = _sniff(ref, handle.read(_SNIFF_BYTES))
            return problem or _probed(ref, handle)
    except ImageProblem as exc:
        return MediaInfo(kind, ref.reference, exc.kind, exc.message)
    except OSError as exc:
        return MediaInfo(
            kind, ref.reference, ImageError.UNREADABLE, f"cannot open {ref.reference}: {exc.strerror or exc}"
        )


def _sniff(ref: MediaRef, start: bytes) -> MediaInfo | None:
    """The clip's MediaInfo with its error when its first bytes cannot be a container, else None."""
    if not start:
        return MediaInfo(
            ref.kind, ref.reference, ImageError.UNREADABLE, f"empty file (0 bytes): {ref.reference}"
        )
    if _is_text(start):
        return MediaInfo(
            ref.kind,
            ref.reference,
            ImageError.UNREADABLE,
            f"{ref.reference} holds text, not a {ref.kind} ({_preview(start)}...): an error page saved by a "
            "failed download?",
        )
    return None


def _probed(ref: MediaRef, source) -> MediaInfo:
    """A video's header facts (the handle or bytes already sniffed); audio is not probed."""
    if ref.kind != "video":
        return MediaInfo(ref.kind, ref.reference)
    try:
        video = probe_video(source)
    except VideoProbeError as exc:
        return MediaInfo(ref.kind, ref.reference, ImageError.UNREADABLE, f"{ref.reference}: {exc}")
    return MediaInfo(ref.kind, ref.reference, video=video)


def _is_text(start: bytes) -> bool:
    """Whether the leading bytes are plain text (UTF-8, no control bytes) and no known text-led container."""
    if start.startswith(_TEXT_LIKE_MEDIA):
        return False
    try:
        text = start.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(start) - 3:  # not just a character cut at the end of the sample
            return False
        text = start[: exc.start].decode("utf-8")
    return all(ch.isprintable() or ch in "\t\r\n\f" for ch in text)


def _preview(start: bytes) -> str:
    text = start.decode("utf-8", "replace").strip()
    return repr(" ".join(text.split())[:24])
