"""Rules about a video's container header (vlmlint/video.py's probe: RowResult.media[i].video).

VLM210 video-frames-unknown: an MKV/WebM header without a frame count, which the PyAV-based readers
(transformers 5.24's read_video_pyav, LLaMA-Factory 0.9.5's mm_plugin, ms-swift's load_video_llava)
read as 0 frames. VLM211 rotated-video: a display-matrix rotation, which torchcodec (>= 0.11)
applies and the PyAV, decord and torchvision readers do not. VLM212 video-frames-capped: the
sampler's max_frames keeps fewer frames than its rate asks for. VLM409 video-token-budget: one
video above max_video_tokens_per_video.
"""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.records import Finding, MediaInfo, RowResult, Severity, VideoMeta
from vlmlint.rules.base import Rule, RuleContext


def _videos(row: RowResult) -> Iterator[tuple[int, MediaInfo, VideoMeta]]:
    """(position among the row's videos, info, header facts) of each probed video file."""
    position = 0
    for info in row.media:
        if info.kind != "video":
            continue
        position += 1
        if info.video is not None and info.video.frames_from != "frame list":
            yield position, info, info.video


class VideoFramesUnknown(Rule):
    """A video's container header gives no frame count (MKV, WebM): PyAV-based readers see 0 frames.

    **Why** transformers 5.24's PyAV reader (`load_video(..., backend="pyav")`, `read_video_pyav`)
    takes `total_num_frames` from the stream header's `frames`, which Matroska does not write: it is
    0, so with no sampling it raises `IndexError: index -1 is out of bounds for axis 0 with size 0`,
    and with `fps` or `num_frames` `ValueError: ... the requested number of frames exceeds
    total_num_frames=0`. LLaMA-Factory (0.9.5, mm_plugin `_get_video_sample_indices`) takes 0
    frames for an endless stream and asks for the first `video_maxlen` frames (128 by default),
    every one of them instead of `video_fps` per second: many more video tokens than the clip's
    length asks for, and only its beginning; and where the clip has a stream duration, its Qwen
    plugin writes the tokens of all `video_maxlen` frames while the decoder yields only the clip's
    own (fewer, for a short clip): "Video features and video tokens do not match" (`--pipeline
    llamafactory` predicts it row by row). ms-swift's PyAV loader for LLaVA-style models
    (`load_video_llava`) samples indices from 0 to -1, gets no frame and `np.stack` raises. torchcodec (transformers' video processors' default) and decord
    count the frames themselves and are not affected. vlmlint counts the packets (demuxing, no
    decode), so its count is right; the reader's is not.

    **Example** `clip.mkv`, 300 frames at 30 fps: the header says 0 frames; vlmlint counts 300
    packets; LLaMA-Factory's Qwen2-VL plugin samples frames 0-127 (128 frames, 4.3 s of 10 s) instead
    of 20 at video_fps 2.

    **Fix** Remux to MP4, which writes the count, without re-encoding: `ffmpeg -i clip.mkv -c copy
    clip.mp4`, or decode with torchcodec (`pip install torchcodec`: transformers' video processors
    use it by default).
    """

    code = "VLM210"
    name = "video-frames-unknown"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info, video in _videos(row):
            if video.header_frames or video.frames_from != "packets":
                continue
            yield self.finding(
                row,
                f"video {position} ({info.reference}) has no frame count in its container header (vlmlint "
                f"counted {video.frames} frames by demuxing): transformers' PyAV reader sees total_num_frames=0 "
                "and raises (IndexError with no sampling, ValueError 'exceeds total_num_frames=0' with fps or "
                "num_frames); LLaMA-Factory takes it for an endless stream and asks for its first video_maxlen "
                "frames (a clip with fewer crashes there: --pipeline llamafactory says which rows)",
                f"remux it to MP4 without re-encoding: ffmpeg -i {_quoted(info.reference)} -c copy "
                f"{_quoted(_as_mp4(info.reference))}; or decode with torchcodec (pip install torchcodec)",
            )


class RotatedVideo(Rule):
    """A video's display matrix rotates it: readers disagree on whether the model sees it upright.

    **Why** Phones store a portrait clip as landscape frames plus a display matrix saying "turn by
    90 degrees". torchcodec (0.11 and later, transformers' video processors' default backend)
    applies it: its frames come out upright, with width and height swapped for 90 and 270. The
    PyAV readers (transformers' `backend="pyav"`, LLaMA-Factory, ms-swift), decord and
    torchvision do not: the model sees the clip sideways or upside down, while its caption
    describes it upright. For 90 and 270 the two give different frame sizes, hence different video
    token counts for the same row. (The display matrix of a clip is the container's, vlmlint reads
    it from the MP4/MOV track header or the Matroska projection; the rotation is counter-clockwise,
    as ffprobe's `displaymatrix: rotation of -90.00 degrees` is 270 here.)

    **Example** `IMG_0042.mov`, 1920x1080 frames with `rotation of -90.00 degrees`: 1080x1920 once
    torchcodec turns it, 1920x1080 and sideways through PyAV.

    **Fix** Re-encode with the rotation applied, so that every reader sees the same upright frames:
    `ffmpeg -i in.mov -c:a copy out.mp4` (FFmpeg applies the display matrix when it re-encodes and
    writes none in the output).
    """

    code = "VLM211"
    name = "rotated-video"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info, video in _videos(row):
            if not video.rotation:
                continue
            stored = f"{video.width}x{video.height}"
            turned = f"{video.height}x{video.width}" if video.rotation in (90, 270) else stored
            yield self.finding(
                row,
                f"video {position} ({info.reference}) has a display matrix that rotates it {video.rotation} "
                f"degrees counter-clockwise: torchcodec (transformers' default video backend) turns its "
                f"{stored} frames upright ({turned}); the PyAV readers (LLaMA-Factory, ms-swift, "
                "backend='pyav'), decord and torchvision give them as stored, so the model sees it "
                + ("sideways" if video.rotation in (90, 270) else "upside down"),
                f"re-encode it with the rotation applied: ffmpeg -i {_quoted(info.reference)} -c:a copy "
                f"{_quoted(_as_mp4(info.reference, '_upright'))}",
            )


class VideoFramesCapped(Rule):
    """The sampler keeps fewer frames of a long video than its frame rate asks for (its max_frames).

    **Why** A video processor that samples at a rate (Qwen2-VL with do_sample_frames, Qwen3-VL: fps 2)
    stops at `max_frames` (768 by default): past 384 s at 2 fps, the frames it keeps are spread over
    the whole clip, one every few seconds, so the model sees fewer frames per second than it was
    trained on, and short events can fall between two frames. The row still trains; its tokens are
    counted as the processor keeps them.

    **Example** A 30-minute lecture for Qwen3-VL: fps 2 asks for 3,600 frames, max_frames keeps 768,
    one every 2.34 s.

    **Fix** Cut the clip into shorter clips (one row each), or sample it yourself at the rate the
    model expects; raising max_frames costs video tokens (VLM409).
    """

    code = "VLM212"
    name = "video-frames-capped"
    severity = Severity.INFO

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        position = 0
        for info in row.media:
            if info.kind != "video":
                continue
            position += 1
            if info.capped:
                yield self.finding(
                    row,
                    f"video {position} ({info.reference}): {info.capped}",
                    "cut the clip into shorter clips, one row each, or sample its frames yourself",
                )


class VideoTokenBudget(Rule):
    """One video becomes more tokens than the memory budget allows.

    **Why** A video's tokens are its frames' tokens added up: a few seconds of 720p through a
    processor that keeps every frame (Qwen2-VL and Qwen2.5-VL by default: do_sample_frames is
    false) is tens of thousands of tokens, and the activations (and attention, with their square)
    can run a GPU out of memory in the middle of a run even where the row fits the length limit.
    The budget is the threshold `max_video_tokens_per_video` (default 16384).

    **Example** Qwen2-VL on a 10 s 720p clip at 30 fps: every frame kept, 150 temporal groups of
    1,196 tokens: 179,400 video tokens.

    **Fix** Sample fewer frames (the video processor's fps or num_frames with do_sample_frames, or a
    trainer's video_fps / video_maxlen), lower the frames' resolution (the video processor's
    max_pixels), cut the clip, or raise the threshold if the GPU has room.
    """

    code = "VLM409"
    name = "video-token-budget"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        budget = int(context.thresholds["max_video_tokens_per_video"])
        position = 0
        for info in row.media:
            if info.kind != "video":
                continue
            position += 1
            if info.tokens is not None and info.tokens > budget:
                sampled = f" from {info.sampled} frames" if info.sampled is not None else ""
                yield self.finding(
                    row,
                    f"video {position} ({info.reference}): {info.tokens} video tokens{sampled} > "
                    f"{budget} per video ({info.counted_by})",
                    "sample fewer frames (fps / num_frames with do_sample_frames), lower the video processor's "
                    "max_pixels, cut the clip, or raise max_video_tokens_per_video if the GPU has room",
                )


def _as_mp4(reference: str, suffix: str = "") -> str:
    stem = reference.rsplit(".", 1)[0] if "." in reference.rsplit("/", 1)[-1] else reference
    return f"{stem}{suffix}.mp4"


def _quoted(path: str) -> str:
    return (
        path if all(ch.isalnum() or ch in "._-/+" for ch in path) else "'" + path.replace("'", "'\\''") + "'"
    )
