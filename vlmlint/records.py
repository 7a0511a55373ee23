"""Typed, frozen records that flow through the pipeline: readers -> engine -> rules -> report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

# The placeholder a dataset author writes in the text for "an image goes here".
IMAGE_PLACEHOLDER = "<image>"
# LLaMA-Factory's and ms-swift's placeholders for a video and an audio clip.
VIDEO_PLACEHOLDER = "<video>"
AUDIO_PLACEHOLDER = "<audio>"
MEDIA_PLACEHOLDERS = {"video": VIDEO_PLACEHOLDER, "audio": AUDIO_PLACEHOLDER}

# An embedded image or clip (a data: URI, a dataset's stored bytes) above this many bytes is not decoded
# nor kept by the readers: the ref holds `problem` instead (VLM201), so a row holds no large copy.
MAX_EMBEDDED_BYTES = 32 * 2**20

# Bounds on one row, so that a hostile row costs bounded time and memory (readers/layouts.py and the
# engine report a row beyond them as VLM101 and do not count it). Real multi-image rows hold tens of
# images; long videos are given as videos (or frame lists), and no model's context holds 1,024 images.
MAX_IMAGES_PER_ROW = 1_024  # images, and <image> placeholders (or image parts) in the text
MAX_MEDIA_PER_ROW = 1_024  # videos and audio clips, and their placeholders (or parts)
MAX_FRAMES_PER_ROW = 8_192  # the frames of a row's frame-list videos, all together
MAX_PARTS_PER_ROW = 10_000  # turns and content parts: a conversation beyond is no training row


class Role(str, Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True)
class ImageSizing:
    """Size settings a row gives one image for its loader: qwen-vl-utils' per-item `min_pixels`,
    `max_pixels`, `resized_height` and `resized_width` (fetch_image resizes the image by them before
    the processor sees it). The Qwen-VL count honours them (engine.Scanner); other families ignore them.
    """

    min_pixels: int | None = None
    max_pixels: int | None = None
    resized_height: int | None = None
    resized_width: int | None = None


@dataclass(frozen=True)
class ImageRef:
    """Where one image of a sample comes from: a file, embedded bytes, or a URL.

    `reference` is the value as written in the dataset (a path or URL, or a label for embedded
    bytes); `path` is the resolved absolute file path when the image is a local file.
    """

    reference: str
    path: str | None = None
    data: bytes | None = field(default=None, repr=False)
    url: str | None = None
    outside_root: bool = False  # the resolved file (symlinks followed) lies outside the dataset folder
    problem: str | None = None  # why the reader kept no image (an embedded one above MAX_EMBEDDED_BYTES)
    # Embedded bytes dropped from a counted row's outcome (engine.KEEP_EMBEDDED_BYTES): no image to show.
    dropped: bool = False
    sizing: ImageSizing | None = None  # the row's per-image loader settings (qwen-vl-utils), if any

    @property
    def kind(self) -> str:
        if self.data is not None or self.dropped:
            return "bytes"
        if self.url is not None:
            return "url"
        return "file"


@dataclass(frozen=True)
class MediaRef:
    """One video or audio clip of a sample, which vlmlint reads the references of but does not count yet.

    `kind` is "video" or "audio". The other fields are ImageRef's: the reference as written, the
    resolved file, embedded bytes (a data: URI, an OpenAI `input_audio`), or a URL. A video given as
    a list of frame images (LLaMA-Factory, ms-swift, qwen-vl-utils) has them in `frames`, each an
    ImageRef; `path` is then None.
    """

    kind: str
    reference: str
    path: str | None = None
    data: bytes | None = field(default=None, repr=False)
    url: str | None = None
    outside_root: bool = False
    frames: tuple[ImageRef, ...] = ()
    problem: str | None = None  # as ImageRef's
    dropped: bool = False  # as ImageRef's


@dataclass(frozen=True)
class Part:
    """One piece of a turn: text, the place where an image goes, or (`media`) where a video or audio goes.

    A media part ("video" / "audio") has no text and is_image False; it is left out of the text
    vlmlint renders and tokenizes (its tokens are not counted yet, so lengths are lower bounds).
    """

    text: str = ""
    is_image: bool = False
    media: str = ""


@dataclass(frozen=True)
class Message:
    role: Role
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class RowProblem:
    """Something the reader could not make sense of; becomes a finding on that row."""

    code: str
    message: str


@dataclass(frozen=True)
class Sample:
    """One dataset row, as the reader understood it.

    `messages` holds the conversation with text parts still carrying the author's literal
    placeholders (e.g. "<image>"); the engine turns those into image parts. `images` are in the
    order the row lists them. A row the reader could not parse has `problems` and no messages.
    """

    source: str
    index: int
    line: int | None = None
    id: str | None = None
    layout: str = "unknown"
    messages: tuple[Message, ...] = ()
    images: tuple[ImageRef, ...] = ()
    media: tuple[MediaRef, ...] = ()  # videos and audio clips, in the order the row lists them
    # True when the layout places the image implicitly (captions, image folders): no placeholder expected.
    implicit_image_placement: bool = False
    problems: tuple[RowProblem, ...] = ()  # the row cannot be used: no counts
    notes: tuple[RowProblem, ...] = ()  # the row is used, but something in it deserves a finding
    fields: tuple[str, ...] = ()
    # Pre-tokenized rows (processor output stored in the dataset): input_ids, labels, image_grid_thw...
    pretokenized: dict | None = field(default=None, compare=False, repr=False)
    # Hash of the row's content as read (readers/fingerprint.py); baselines key findings by it.
    fingerprint: str | None = field(default=None, compare=False, repr=False)
    key: str | None = None  # a webdataset sample's key in its tar shard (it has no line)

    @property
    def location(self) -> str:
        if self.line is not None:
            return f"{self.source}:{self.line}"
        return f"{self.source}:{self.key}" if self.key is not None else f"{self.source}[{self.index}]"


@dataclass(frozen=True)
class ImageInfo:
    """What the engine learnt about one image: header facts and the model's count for it."""

    reference: str
    width: int | None = None
    height: int | None = None
    format: str | None = None
    mode: str | None = None
    error_code: ImageError | None = None
    error: str | None = None
    resized_width: int | None = None
    resized_height: int | None = None
    grid: tuple[int, ...] | None = None
    tokens: int | None = None  # image-placeholder token ids this image contributes to input_ids
    orientation: int = 1  # EXIF orientation; 5-8 swap width and height (already applied above)
    tokens_without_exif: int | None = None  # the count had the orientation been ignored (5-8 only)
    animated: bool = False  # several frames: only the first is used
    transparency: bool = False  # an alpha channel or a transparent palette colour (flattened on convert)


@dataclass(frozen=True)
class VideoMeta:
    """A video's facts from its container header (no frame is decoded), or from its frame list's images.

    `frames` is how many frames a decoder yields (the stream's frame count where the container writes
    one, else its video packets counted by demuxing, without decoding: `frames_from` says which), and
    `header_frames` what the container's header says (0 in MKV/WebM: transformers' PyAV reader reads
    that field). `rotation`: the display matrix's rotation in degrees (no video reader applies it).
    `duration` is frames / fps (as transformers' read_video_pyav computes it); `stream_duration` what
    the stream header says (stream.duration * time_base, which LLaMA-Factory samples with; None in
    MKV/WebM and for a frame list).
    """

    frames: int
    fps: float | None  # the stream's average frame rate; None for a frame list
    duration: float | None  # seconds
    width: int
    height: int
    rotation: int = 0
    header_frames: int = 0
    frames_from: str = "header"  # "header", "packets" (demuxed and counted) or "frame list"
    stream_duration: float | None = None  # seconds
    # frames / the span of their timestamps: the fps torchcodec (transformers' default reader) reports
    content_fps: float | None = None

    def as_torchcodec(self) -> VideoMeta:
        """The clip as transformers 5.24's default video reader gives it to a video processor (torchcodec
        in exact mode, tests/test_video_probe.py): frames turned upright (a 90/270 rotation swaps the
        sides) and the fps measured over the frames' timestamps."""
        width, height = (self.height, self.width) if self.rotation in (90, 270) else (self.width, self.height)
        fps = self.content_fps if self.content_fps is not None else self.fps
        return replace(self, width=width, height=height, fps=fps, rotation=0)


@dataclass(frozen=True)
class MediaInfo:
    """What the engine learnt about one video or audio clip: whether it can be read (no frame is decoded).

    `error_code` as ImageInfo's: missing, unreadable, outside, remote. `frames`: the images of a
    video given as a frame list. `video`: the header facts of a readable video. `tokens`: the
    placeholder tokens the model's processor gives the clip (None: not counted, VLM109), with
    `sampled` frames after the sampler, and `counted_by` naming the family and sampling mode.
    """

    kind: str
    reference: str
    error_code: ImageError | None = None
    error: str | None = None
    frames: int | None = None
    video: VideoMeta | None = None
    tokens: int | None = None
    sampled: int | None = None
    counted_by: str | None = None
    capped: str | None = None  # the sampler keeps fewer frames than its rate asks for, and why (VLM212)


@dataclass(frozen=True)
class RowResult:
    """A sample plus every fact the engine computed for it; rules read these facts."""

    sample: Sample
    images: tuple[ImageInfo, ...] = ()
    placeholders: int = 0
    text_tokens: int | None = None
    seq_len: int | None = None
    count_error: str | None = None
    # Token positions [start, end) in input_ids of each image's image tokens, from its first run to
    # its last (tile markers between runs included); computed only for rows longer than the length
    # limit, where a truncation may cut through them. () when the family expands nothing (Mllama).
    image_spans: tuple[tuple[int, int], ...] | None = None
    # M-RoPE (Qwen-VL): the largest position id, as Qwen2VLModel.get_rope_index gives it (below seq_len
    # for images, whose tokens share positions; a long video's time steps can pass it).
    max_position_id: int | None = None
    # --pipeline llamafactory|swift|trl: what that trainer does with the row (pipelines.TrainerFate);
    # None with the raw processor (hf).
    trainer: object | None = None
    # The row's videos and audio clips; one not counted (tokens None) makes seq_len a lower bound.
    media: tuple[MediaInfo, ...] = ()

    @property
    def image_tokens(self) -> list[int | None]:
        return [info.tokens for info in self.images]

    @property
    def lengths_lower_bound(self) -> bool:
        """Whether the row's lengths leave out tokens vlmlint does not count (its videos, audio)."""
        return any(info.tokens is None for info in self.media)


def evolve(record, **changes):
    """dataclasses.replace for the records above, several times faster (it runs on every image of every row).

    A copy of the instance's __dict__ with `changes` applied: no __init__ runs, which is only right
    because these records have no __post_init__ and no validation (a test holds each to that).
    """
    unknown = changes.keys() - record.__dataclass_fields__.keys()
    if unknown:
        raise TypeError(f"{type(record).__name__} has no field(s) {sorted(unknown)}")
    copy = object.__new__(type(record))
    copy.__dict__.update(record.__dict__, **changes)
    return copy


def beyond_bounds(
    images: int, placeholders: int, media: int = 0, frames: int = 0, parts: int = 0
) -> str | None:
    """Why a row with these counts is beyond the per-row bounds above (a VLM101 message), or None."""
    for count, limit, what in (
        (images, MAX_IMAGES_PER_ROW, "images"),
        (placeholders, MAX_IMAGES_PER_ROW, "image placeholders"),
        (media, MAX_MEDIA_PER_ROW, "videos and audio clips"),
        (frames, MAX_FRAMES_PER_ROW, "video frames"),
        (parts, MAX_PARTS_PER_ROW, "turns and content parts"),
    ):
        if count > limit:
            return (
                f"the row holds {count:,} {what}, above the limit of {limit:,} per row; "
                "not counted (split it into several rows)"
            )
    return None


def sample_beyond_bounds(sample: Sample) -> str | None:
    """beyond_bounds() for a parsed sample (one pass over its parts)."""
    parts = placeholders = media_parts = 0
    for message in sample.messages:
        parts += 1 + len(message.parts)
        for part in message.parts:
            placeholders += part.is_image
            media_parts += bool(part.media)
    frames = sum(len(ref.frames) for ref in sample.media)
    media = max(len(sample.media), media_parts)
    return beyond_bounds(len(sample.images), placeholders, media, frames, parts)


class ImageError(str, Enum):
    """Why an image (or a video, an audio clip) has no count: what ImageInfo.error_code holds."""

    MISSING = "missing"  # no such file
    UNREADABLE = "unreadable"  # a file that is not an image vlmlint reads, or a damaged one
    OUTSIDE = "outside"  # a path that leaves the dataset folder (without --allow-outside-root)
    REMOTE = "remote"  # a URL, not fetched (without --allow-remote)
    BOMB = "bomb"  # above the pixel limit: not decoded
    REJECTED = "rejected"  # the model's processor refuses it (e.g. an aspect ratio above its limit)

    def __str__(self) -> str:  # the value, as the free strings it replaced printed
        return self.value

    __format__ = str.__format__


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return ("info", "warning", "error").index(self.value)


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    fix: str
    source: str
    line: int | None
    index: int
    id: str | None
    # Rule code + the row's content hash (not its position): what a baseline matches on.
    fingerprint: str | None = None

    @classmethod
    def from_dict(cls, record: dict) -> Finding:
        """The inverse of to_dict (findings spilled to disk are read back with it)."""
        return cls(**{**record, "severity": Severity(record["severity"])})

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
            "line": self.line,
            "index": self.index,
            "id": self.id,
            "fingerprint": self.fingerprint,
        }


FateStatus = Literal["kept", "truncated", "dropped", "raise", "crash"]


@dataclass(frozen=True)
class TrainerFate:
    """What the trainer does with one row."""

    status: FateStatus
    trainer: str  # e.g. "LLaMA-Factory 0.9.3 (cutoff_len 2048)"
    length: int | None = None  # tokens the trainer feeds the model (after its truncation), if it does
    answer_tokens_lost: int = 0  # trained-on (label) tokens cut away
    image_tokens_lost: int = 0  # image placeholder tokens cut away (a crash when 0 < lost < all)
    reason: str = ""  # one sentence: why, with the numbers
    fix: str = ""  # one sentence: what to change


@dataclass(frozen=True)
class RowOutcome:
    result: RowResult
    findings: tuple[Finding, ...]
    # A parallel scan (vlmlint/runner.py) brings a row without findings back from a worker with a
    # headline Sample only (source, index, line, id, layout, fingerprint: what reports print); this
    # rebuilds the whole Sample (messages, images) for a caller that needs it, e.g. --verify.
    reload: Callable[[], Sample] | None = field(default=None, compare=False, repr=False)

    def complete(self) -> RowOutcome:
        """This outcome with the row's whole Sample (itself unless a parallel scan left a headline)."""
        if self.reload is None:
            return self
        return RowOutcome(evolve(self.result, sample=self.reload()), self.findings)
