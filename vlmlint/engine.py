"""The engine: samples -> image facts and token counts -> rule findings. It never prints or exits.

Rows are processed in chunks so that the tokenizer sees a batch at a time. For each row the engine
reads every image's header (or, with `exact`, decodes it and runs the real image processor), counts
its placeholder tokens with the model family's formula, renders the conversation with the model's
chat template exactly as `processor.apply_chat_template` does, and tokenizes it. The sequence length
is that of the input_ids `processor(text=rendered, images=images)` would return: the rendered text's
tokens plus, per image, the ids its placeholder expands into beyond the one the template wrote.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import islice
from typing import Any

from vlmlint.config import ScanConfig
from vlmlint.counting import CountedRow, TextEncoder
from vlmlint.images import ImageProblem, decode_image, fetch, read_header
from vlmlint.models import CountError, ImageCount, Model, load_model
from vlmlint.models.base import VideoCount
from vlmlint.models.registry import MARKER_TOKENS
from vlmlint.records import (
    IMAGE_PLACEHOLDER,
    Finding,
    ImageError,
    ImageInfo,
    ImageRef,
    MediaInfo,
    MediaRef,
    Message,
    RowOutcome,
    RowProblem,
    RowResult,
    Sample,
    evolve,
    sample_beyond_bounds,
)
from vlmlint.rules import ALL_RULES, Rule, RuleContext

_IMAGE_CACHE_SIZE = 65536
# Embedded bytes (data: URIs, parquet image cells, webdataset members) a scan keeps in the outcomes of
# rows with findings, for the HTML report's thumbnails and --verify; beyond, a row's bytes are dropped
# once it is counted (ImageRef.dropped), so reports keep thousands of flagged rows in flat memory.
KEEP_EMBEDDED_BYTES = 64 * 1024 * 1024
# Text one tokenizer call is given: the tokenizer needs about 0.3 GB per MB of text, and two
# chunks are in flight, so a chunk of long rows ends once it holds this many characters.
MAX_BATCH_TEXT_CHARS = 1_000_000
# The fallback decodes each image once per scan: decoded RGB images kept up to this many pixels.
_DECODED_CACHE_PIXELS = 64_000_000
# Image tokens of families beyond the registry's placeholders (start/end markers users paste by hand):
# the union of each family's marker_tokens.
FOREIGN_IMAGE_TOKENS = MARKER_TOKENS


@dataclass
class _Prepared:
    sample: Sample
    images: tuple[ImageInfo, ...]
    placeholders: int
    text: str | None = None
    extra_tokens: int = 0
    count_error: str | None = None
    counts: list[ImageCount] = field(default_factory=list)
    # The real-processor fallback's whole-row count: the length of its input_ids, and image spans.
    fixed_length: int | None = None
    fixed_spans: tuple[tuple[int, int], ...] | None = None
    media: tuple[MediaInfo, ...] = ()  # videos and audio clips: checked, videos counted where the family can
    videos: list[VideoCount] = field(default_factory=list)  # the row's video counts (all its videos, or none)


# What a file's header tells of an image (images.read_header), as ImageInfo keeps it.
_HEADER_FACTS = ("width", "height", "format", "mode", "orientation", "animated", "transparency")


def _counted(prepared: _Prepared) -> CountedRow:
    return CountedRow(prepared.sample, tuple(prepared.counts), tuple(prepared.videos))


def _special_tokens(tokenizer: Any) -> frozenset[str]:
    """The tokenizer's special tokens as text (added tokens marked special, and the named ones)."""
    if tokenizer is None:
        return frozenset()
    found = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(token))
    return frozenset(t for t in found if t)


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of one token of the tokenizer's vocabulary (added tokens included), or None."""
    if tokenizer is None or not token:
        return None
    found = tokenizer.convert_tokens_to_ids(token)
    if found is None or (found == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return int(found)


def _foreign_placeholders(family: Any, tokenizer: Any) -> frozenset[str]:
    """Other families' image tokens that this tokenizer does not know: they stay plain text here."""
    from vlmlint.models import FAMILIES

    own = _special_tokens(tokenizer) | {family.placeholder, IMAGE_PLACEHOLDER}
    others = {f.placeholder for f in FAMILIES if f.placeholder} | FOREIGN_IMAGE_TOKENS
    return frozenset(token for token in others if token not in own)


_FAST_PROBES = (
    "Hello world",
    "  two  spaces and\ttabs\n\nnewlines ",
    "ÉCOLE 你好 🙂 ﬁ ９９",
    "<image>\n<|image_pad|>[IMG]<start_of_image><s></s><|im_start|>user\n",
    "",
)


def _fast_encoder(tokenizer: Any, add_special_tokens: bool) -> Any:
    """The tokenizers (Rust) batch encoder when it gives exactly what tokenizer(...) gives, else None.

    Why: transformers' __call__ turns every row's ids into Python lists and a BatchEncoding while
    holding the GIL (some 30 us a row), which the reading/rules thread then waits for; vlmlint needs
    only lengths. Used only for classes that keep TokenizersBackend's own encoding path (no override),
    with no special-token splitting, truncation or padding, and when probe texts agree.
    """
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    cls = type(tokenizer)
    if not isinstance(tokenizer, TokenizersBackend):
        return None
    for name in ("__call__", "_encode_plus", "_batch_encode_plus", "encode", "tokenize", "_call_one"):
        if getattr(cls, name, None) is not getattr(TokenizersBackend, name, None):
            return None
    if getattr(tokenizer, "split_special_tokens", False):
        return None
    backend = tokenizer._tokenizer
    # One call through transformers leaves the backend as transformers sets it (no truncation/padding).
    expected = [
        len(ids) for ids in tokenizer(list(_FAST_PROBES), add_special_tokens=add_special_tokens)["input_ids"]
    ]
    if backend.truncation is not None or backend.padding is not None or backend.encode_special_tokens:
        return None
    encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
    got = [len(encoding) for encoding in encode(list(_FAST_PROBES), add_special_tokens=add_special_tokens)]
    return encode if got == expected else None


def _fast_lengths(model: Model, add_special_tokens: bool) -> Any:
    """The fastest exact counter of token lengths for this model, or None (then tokenizer(...) is used):
    tiktoken for the built-in Qwen profiles (models/qwen_lengths.py), else the Rust batch encoder."""
    if model.tokenizer is None:
        return None
    light = getattr(model.tokenizer, "length_counter", None)
    if light is not None:  # a built-in profile loaded without transformers (vlmlint/models/light.py)
        return light()
    from vlmlint.models.profiles import find_profile
    from vlmlint.models.qwen_lengths import counter_for

    profile = find_profile(model.profile) if model.profile else None
    counter = counter_for(profile, model.tokenizer, add_special_tokens)
    if counter is not None:
        return counter
    encode = _fast_encoder(model.tokenizer, add_special_tokens)
    if encode is None:
        return None
    return lambda texts: [len(encoding) for encoding in encode(texts, add_special_tokens=add_special_tokens)]


def _embedded_size(sample: Sample) -> int:
    """Bytes a sample holds beyond its references: embedded images and clips, stored token lists."""
    size = sum(len(ref.data) for ref in sample.images if ref.data is not None)
    for ref in sample.media:
        size += len(ref.data) if ref.data is not None else 0
        size += sum(len(frame.data) for frame in ref.frames if frame.data is not None)
    if sample.pretokenized:
        size += 8 * sum(len(v) for v in sample.pretokenized.values() if isinstance(v, list))
    return size


def _dropped(ref: Any) -> Any:
    return evolve(ref, data=None, dropped=True) if ref.data is not None else ref


def _without_embedded(sample: Sample) -> Sample:
    """The sample without its embedded bytes (the refs say `dropped`) nor its stored token lists."""
    media = tuple(
        evolve(_dropped(ref), frames=tuple(_dropped(f) for f in ref.frames)) if ref.frames else _dropped(ref)
        for ref in sample.media
    )
    images = tuple(_dropped(ref) for ref in sample.images)
    return evolve(
        sample, images=images, media=media, pretokenized=None if sample.pretokenized is None else {}
    )


class Scanner:
    """Scans samples against one model. Build once, then call `scan()`; safe to reuse across datasets."""

    def __init__(
        self,
        config: ScanConfig,
        model: Model | None = None,
        rules: Iterable[type[Rule]] = ALL_RULES,
        length_counter: Any = False,
    ):
        """`model` and `length_counter`: an already loaded model and batch length counter to share."""
        self.config = config
        self.model = model or load_model(
            config.model,
            trust_remote_code=config.trust_remote_code,
            processor_options=config.processor_options,
            # a built-in profile without transformers where the formula counts with the processor's
            # own text path (a trainer's pipeline asks the real tokenizer more: vlmlint/models/light.py)
            light=config.pipeline == "hf" and not config.exact,
        )
        self.family = self.model.family
        self.rules = [rule() for rule in rules if config.rule_enabled(rule.code)]
        settings = self.model.settings
        self.context = RuleContext(
            max_length=config.max_length or self.model.max_position_embeddings,
            image_placeholder=self.family.placeholder,
            vision_max_positions=getattr(settings, "vision_max_positions", None),
            vision_image_size=getattr(settings, "vision_image_size", None),
            max_position_embeddings=self.model.max_position_embeddings,
            truncation_side=config.truncation_side,
            thresholds=config.thresholds,
            special_tokens=_special_tokens(self.model.tokenizer) - frozenset(self.family.data_tokens),
            foreign_placeholders=_foreign_placeholders(self.family, self.model.tokenizer),
            family=self.family.name,
            image_settings=settings,
            image_token_id=_token_id(self.model.tokenizer, self.family.placeholder),
            merge_size=getattr(settings, "merge_size", None),
        )
        self.template = self.model.chat_template if config.use_chat_template else None
        self.encoder = TextEncoder(self.model, self.template, config.add_generation_prompt)
        from vlmlint.pipelines import load_pipeline

        # The trainer's preprocessing (--pipeline): its image pre-resize and its fate for each row.
        self.pipeline = load_pipeline(config.pipeline, config.pipeline_options)
        self.pipeline.bind(self.model)
        # Why rows' videos are not counted (None: the family's formula counts them as the pipeline samples).
        self.video_refusal = self.model.video_refusal
        if self.video_refusal is None and self.pipeline.video_sampling is None:
            self.video_refusal = (
                f"--pipeline {config.pipeline}: the trainer's video sampling is not reproduced yet"
            )
        self.context = replace(self.context, video_refusal=self.video_refusal)
        self._fast_lengths: Any = length_counter  # False: _fast_lengths(...) on first use (a counter or None)
        # A family without a header formula (the real-processor fallback) always counts on decoded pixels.
        self.exact = config.exact or not self.family.header_formula
        self._image_cache: OrderedDict[str, ImageInfo] = OrderedDict()
        self._decoded_cache: OrderedDict[str, Any] = OrderedDict()  # path -> decoded image (fallback)
        self._decoded_pixels = 0
        self._source_ignores: dict[str, tuple[str, ...]] = {}  # source -> per-source-ignores codes
        # What is left of KEEP_EMBEDDED_BYTES; None: keep everything (a worker: its parent decides).
        self.embedded_budget: int | None = KEEP_EMBEDDED_BYTES
        count_image = self.pipeline.count_image  # the trainer's pre-resize, then the family's formula
        self._count = lru_cache(maxsize=_IMAGE_CACHE_SIZE)(
            lambda h, w, n: count_image(self.family, h, w, settings, n)
        )
        # A trainer that opens images without their EXIF orientation sees them at the stored size.
        self._stored_size = not self.pipeline.exif_transpose

    # -- images -----------------------------------------------------------------------------------

    def _header(self, ref: ImageRef) -> ImageInfo:
        if ref.dropped:  # a kept outcome scanned again (--verify): its bytes are gone
            return ImageInfo(
                reference=ref.reference, error_code=ImageError.UNREADABLE, error="embedded bytes not kept"
            )
        if ref.outside_root and not self.config.allow_outside_root:
            real = os.path.realpath(ref.path)  # a symlink inside the folder may point out of it
            where = ref.path if real == ref.path else f"{ref.path} -> {real}"
            return ImageInfo(
                reference=ref.reference,
                error_code=ImageError.OUTSIDE,
                error=f"{where} is outside the dataset folder",
            )
        try:
            if ref.url is not None and self.config.allow_remote:
                ref = replace(ref, data=self._fetch(ref.url), url=None)
            header = read_header(ref, max_decode_pixels=int(self.config.thresholds["bomb_pixels"]))
        except ImageProblem as problem:
            return ImageInfo(reference=ref.reference, error_code=problem.kind, error=problem.message)
        return ImageInfo(reference=ref.reference, **{name: getattr(header, name) for name in _HEADER_FACTS})

    @lru_cache(maxsize=8)  # noqa: B019 (one Scanner per scan): the exact path reuses the header's download
    def _fetch(self, url: str) -> bytes:
        return fetch(url)

    def image_header(self, ref: ImageRef) -> ImageInfo:
        """Header facts about one image; files are cached by path since datasets reuse images."""
        key = ref.path or ref.url
        if key is None:
            return self._header(ref)
        cached = self._image_cache.get(key)
        if cached is None:
            cached = self._header(ref)
            self._image_cache[key] = cached
            if len(self._image_cache) > _IMAGE_CACHE_SIZE:
                self._image_cache.popitem(last=False)
        if cached.reference != ref.reference:
            cached = evolve(cached, reference=ref.reference)
        return cached

    def _count_videos(self, media: tuple[MediaInfo, ...]) -> tuple[tuple[MediaInfo, ...], list[VideoCount]]:
        """Each video's count from its header facts, when every video of the row can be counted.

        A row with an audio clip, a video that cannot be read, or a model or pipeline whose videos are
        not counted keeps them uncounted (its lengths are lower bounds, VLM109). CountError: the video
        processor refuses a video (the row's count error).
        """
        if self.video_refusal is not None or not any(info.kind == "video" for info in media):
            return media, []
        if self.family.count_row is not None:  # the fallback: its real processor counts them (_count_row)
            return media, []
        videos = [info for info in media if info.kind == "video"]
        if any(info.video is None or info.error_code is not None for info in videos):
            return media, []
        counts = []
        for position, info in enumerate(videos, start=1):
            try:
                # as the pipeline samples it (hf: the clip as its default reader, torchcodec, decodes it)
                counts.append(self.pipeline.count_video(self.family, info.video, self.model.video_settings))
            except CountError as exc:
                raise CountError(f"video {position} ({info.reference}): {exc}") from None
        if len(counts) > 1 and self.family.check_videos is not None:
            self.family.check_videos(counts, self.model.video_settings)  # CountError: the row's error
        if len(counts) > 1 and self.family.row_videos is not None:  # texts that depend on the row's others
            counts = self.family.row_videos(counts, self.model.video_settings)
        counted = iter(counts)
        media = tuple(
            evolve(
                info,
                tokens=(count := next(counted)).tokens,
                sampled=count.frames,
                counted_by=f"{self.family.name}: {count.mode}",
                capped=count.capped,
            )
            if info.kind == "video"
            else info
            for info in media
        )
        return media, counts

    def _fallback_videos(self, sample: Sample, media: tuple[MediaInfo, ...]) -> list[Any] | None:
        """The row's videos decoded for the real-processor fallback (models/fallback.decode_video), or
        None: not counted (no video; one unreadable, a frame list or embedded bytes; VLM109 says so).
        CountError: a clip its decoder refuses."""
        if self.family.count_row is None or self.video_refusal is not None:
            return None
        pairs = [(ref, info) for ref, info in zip(sample.media, media, strict=True) if info.kind == "video"]
        if not pairs or any(
            info.video is None or info.error_code is not None or ref.path is None for ref, info in pairs
        ):
            return None
        from vlmlint.models.fallback import decode_video

        decoded = []
        for position, (ref, info) in enumerate(pairs, start=1):
            try:
                decoded.append(decode_video(ref.path, info.video))
            except CountError as exc:
                raise CountError(f"video {position} ({info.reference}): {exc}") from None
        return decoded

    def media_info(self, ref: MediaRef) -> MediaInfo:
        """Whether one video or audio clip can be read (vlmlint/media.py; frames are images)."""
        from vlmlint.media import media_info

        allowed = self.config.allow_outside_root
        return media_info(ref, allow_outside_root=allowed, image_header=self.image_header)

    def _decoded(
        self, sample: Sample, headers: tuple[ImageInfo, ...]
    ) -> tuple[tuple[ImageInfo, ...], list[Any] | None]:
        """The row's images decoded as transformers' load_image does, at the trainer's size (--pipeline).

        An image above the pixel limit is not decoded; one a full decode finds broken is marked so.
        """
        decoded = []
        for position, ref in enumerate(sample.images):
            info = headers[position]
            if info.width * info.height > self.config.thresholds["bomb_pixels"]:
                refused = replace(
                    info, error_code=ImageError.BOMB, error="not decoded: above the pixel limit"
                )
                return headers[:position] + (refused,) + headers[position + 1 :], None
            try:
                decoded.append(self._decode(ref))
            except ImageProblem as problem:  # a full decode finds what the header could not
                failed = replace(headers[position], error_code=problem.kind, error=problem.message)
                return headers[:position] + (failed,) + headers[position + 1 :], None
        resized = [
            self._trainer_resized(image, info, ref)
            for image, info, ref in zip(decoded, headers, sample.images, strict=True)
        ]
        return headers, resized

    def _decode(self, ref: ImageRef) -> Any:
        """One image decoded; with the fallback each file once per scan (a bounded cache by pixels)."""
        if ref.url is not None and self.config.allow_remote:
            ref = replace(ref, data=self._fetch(ref.url), url=None)
        if self.family.count_row is None or ref.path is None:
            return decode_image(ref)
        image = self._decoded_cache.get(ref.path)
        if image is not None:
            self._decoded_cache.move_to_end(ref.path)
            return image
        image = decode_image(ref)
        self._decoded_cache[ref.path] = image
        self._decoded_pixels += image.width * image.height
        while self._decoded_pixels > _DECODED_CACHE_PIXELS and len(self._decoded_cache) > 1:
            _, dropped = self._decoded_cache.popitem(last=False)
            self._decoded_pixels -= dropped.width * dropped.height
        return image

    def _with_counts(
        self, sample: Sample, headers: tuple[ImageInfo, ...]
    ) -> tuple[tuple[ImageInfo, ...], list[ImageCount] | None]:
        """Each image's count: the family's formula on header sizes, or the real image processor."""
        try:
            if self.exact:
                headers, decoded = self._decoded(sample, headers)
                if decoded is None:
                    return headers, None
                counts = self.pipeline.count_exact(
                    self.family, self.model.image_processor, decoded, self.model.settings
                )
            else:
                counts = [
                    self._count(*self._loader_size(ref, info), len(headers))
                    for ref, info in zip(sample.images, headers, strict=True)
                ]
        except CountError as exc:
            rejected = tuple(self._rejected(info, exc) for info in headers)
            if not any(info.error_code for info in rejected):
                raise  # no image to blame: the row's count error (_prepare)
            return rejected, None
        infos = tuple(
            evolve(
                info,
                resized_width=count.resized_width,
                resized_height=count.resized_height,
                grid=count.grid,
                tokens=count.tokens,
                tokens_without_exif=self._unrotated_tokens(info, len(headers)),
            )
            for info, count in zip(headers, counts, strict=True)
        )
        return infos, list(counts)

    def _count_row(
        self, prepared: _Prepared, rendered: str, decoded: list[Any], videos: list[Any] | None = None
    ) -> None:
        """The fallback: the real processor's __call__ on the whole row gives its length, image tokens
        and (with `videos`, _fallback_videos) video tokens."""
        try:
            counted = self.family.count_row(
                rendered, decoded, self.family.placeholder, self.model.settings, videos=videos or ()
            )
        except CountError as exc:
            prepared.count_error = f"processor: {exc}"
            return
        if videos:
            tokens = iter(counted.video_tokens)
            counts = []
            media = []
            for info in prepared.media:
                if info.kind == "video":
                    video = videos[len(counts)]
                    count = next(tokens)
                    mode = f"real processor, {video.reader}"
                    counts.append(VideoCount(info.video.frames, 0, 0, (), count or 0, mode))
                    info = evolve(info, tokens=count, counted_by=f"{self.family.name}: {mode}")
                media.append(info)
            prepared.media = tuple(media)
            # (a video the output cannot single out stays uncounted: text tokens are then unknown)
            prepared.videos = counts if None not in counted.video_tokens else []
        prepared.fixed_length = counted.seq_len
        prepared.fixed_spans = counted.image_spans
        prepared.images = tuple(
            evolve(info, tokens=tokens)
            for info, tokens in zip(prepared.images, counted.image_tokens, strict=True)
        )

    def _trainer_size(self, info: ImageInfo) -> tuple[int, int]:
        """(height, width) as the trainer opens the image: unrotated when it ignores EXIF (--pipeline)."""
        if self._stored_size and info.orientation in (5, 6, 7, 8):
            return info.width, info.height
        return info.height, info.width

    def _loader_size(self, ref: ImageRef, info: ImageInfo) -> tuple[int, int]:
        """(height, width) the processor gets: the family's loader resize of a row's per-image settings
        (ImageRef.sizing: qwen-vl-utils' fetch_image for Qwen-VL, which opens the file without its EXIF
        orientation), else _trainer_size."""
        if ref.sizing is None or self.family.loader_size is None or self.config.pipeline != "hf":
            return self._trainer_size(info)
        stored = (info.width, info.height) if info.orientation in (5, 6, 7, 8) else (info.height, info.width)
        return self.family.loader_size(*stored, ref.sizing, self.model.settings)

    def _trainer_resized(self, image: Any, info: ImageInfo, ref: ImageRef | None = None) -> Any:
        """A decoded image at the size the trainer's pre-resize gives it (--pipeline), or qwen-vl-utils'."""
        if (
            ref is not None
            and ref.sizing is not None
            and self.family.loader_size is not None
            and self.config.pipeline == "hf"
        ):
            height, width = self._loader_size(ref, info)
            return image if (height, width) == (image.height, image.width) else image.resize((width, height))
        if self._stored_size and info.orientation in (5, 6, 7, 8):
            from PIL import Image

            image = image.transpose(Image.Transpose.TRANSPOSE)  # back to the stored width and height
        height, width = self.pipeline.resize(image.height, image.width)
        if (height, width) == (image.height, image.width):
            return image
        return image.resize((width, height))

    def _unrotated_tokens(self, info: ImageInfo, images_in_row: int) -> int | None:
        """For EXIF orientations 5-8: the count a pipeline that ignores the orientation would get."""
        if info.orientation not in (5, 6, 7, 8) or not self.family.header_formula:
            return None
        try:
            return self._count(info.width, info.height, images_in_row).tokens  # height and width swapped
        except CountError:
            return None

    def _rejected(self, info: ImageInfo, exc: CountError) -> ImageInfo:
        """Mark the image(s) the processor refuses; with several, only those the formula refuses alone."""
        if not self.family.header_formula:
            return replace(info, error_code=ImageError.REJECTED, error=str(exc))
        try:
            self._count(*self._trainer_size(info), 1)
        except CountError:
            return replace(info, error_code=ImageError.REJECTED, error=str(exc))
        return info

    # -- text -------------------------------------------------------------------------------------

    def render(self, messages: tuple[Message, ...]) -> str:
        """The text the processor tokenizes (TextEncoder.render)."""
        return self.encoder.render(messages)

    def _render_template(self, messages: tuple[Message, ...]) -> str:
        """One full jinja render, without the shape cache (TextEncoder._render_template)."""
        return self.encoder._render_template(messages)

    @property
    def _shape_cache(self) -> Any:
        """The encoder's template shape cache (None before the first render); tests swap it."""
        return self.encoder._shape_cache

    @_shape_cache.setter
    def _shape_cache(self, cache: Any) -> None:
        self.encoder._shape_cache = cache

    def _prepare(self, sample: Sample) -> _Prepared:
        if sample.problems or sample.pretokenized is not None:
            return _Prepared(sample, (), 0)  # nothing to count: unusable, or the processor already ran
        sample = self.pipeline.prepare(sample)  # the trainer's own edits (InternVL's implicit <image>)
        too_many = sample_beyond_bounds(sample)  # readers refuse such rows; a Sample built elsewhere too
        if too_many:
            problem = RowProblem("VLM101", too_many)
            return _Prepared(evolve(sample, messages=(), images=(), media=(), problems=(problem,)), (), 0)
        images = tuple(self.image_header(ref) for ref in sample.images)
        media = tuple(self.media_info(ref) for ref in sample.media) if sample.media else ()
        videos: list[VideoCount] = []
        row_videos = None  # the fallback's decoded videos (counted by its real processor)
        if media:
            try:
                media, videos = self._count_videos(media)
                row_videos = self._fallback_videos(sample, media)
            except CountError as exc:
                prepared = _Prepared(sample, images, 0, media=media)
                prepared.count_error = f"processor: {exc}"
                return prepared
        placeholders = sum(part.is_image for message in sample.messages for part in message.parts)
        counts = decoded = None
        if images and not any(info.error_code for info in images):
            if self.family.count_row is not None:  # the fallback counts the whole row at once, below
                images, decoded = self._decoded(sample, images)
            else:
                try:
                    images, counts = self._with_counts(sample, images)
                except CountError as exc:  # the real image processor refuses the row as a whole
                    prepared = _Prepared(sample, images, placeholders, media=media)
                    prepared.count_error = f"processor: {exc}"
                    return prepared
        prepared = _Prepared(sample, images, placeholders, counts=counts or [], media=media, videos=videos)
        if placeholders != len(images) or any(info.error_code for info in images):
            return prepared  # the processor would refuse the row; the rules say why
        counted = videos or row_videos or ()
        if counted and sum(part.media == "video" for m in sample.messages for part in m.parts) != len(
            counted
        ):
            return prepared  # as for images: the reader's VLM301 says the placeholders do not match
        if self.model.tokenizer is None:
            return prepared  # a vision encoder without a text side: image counts only
        try:
            rendered = self.encoder.render(sample.messages, videos=bool(videos or row_videos))
        except Exception as exc:  # jinja's TemplateError and raise_exception() from templates
            prepared.count_error = f"template: the chat template rejects this row: {exc}"
            return prepared
        limit = self.config.thresholds["max_text_chars"]
        if len(rendered) > limit:  # time and memory bound: tokenizers need ~0.3 GB per MB of text
            prepared.count_error = (
                f"oversized: the rendered text is {len(rendered):,} characters, above max_text_chars "
                f"({int(limit):,}); not tokenized"
            )
            return prepared
        written = rendered.count(self.family.placeholder) if self.family.placeholder else len(images)
        if written != len(images):
            prepared.count_error = (
                f"placeholder: the rendered text holds {written} {self.family.placeholder} token(s) "
                f"for {len(images)} image(s)"
            )
            return prepared
        if videos and rendered.count(self.family.video_placeholder) != len(videos):
            prepared.count_error = (
                f"placeholder: the rendered text holds {rendered.count(self.family.video_placeholder)} "
                f"{self.family.video_placeholder} token(s) for {len(videos)} video(s)"
            )
            return prepared
        if row_videos and rendered.count(self.family.video_placeholder) != len(row_videos):
            prepared.count_error = (
                f"placeholder: the rendered text holds {rendered.count(self.family.video_placeholder)} "
                f"{self.family.video_placeholder} token(s) for {len(row_videos)} video(s)"
            )
            return prepared
        if self.family.count_row is not None:
            self._count_row(prepared, rendered, decoded or [], row_videos)
            return prepared
        try:
            prepared.text, prepared.extra_tokens = self.encoder.compose(
                rendered, prepared.counts, videos=tuple(videos)
            )
        except CountError as exc:  # the processor refuses the row as a whole (PaliGemma without an image)
            prepared.count_error = f"processor: {exc}"
        return prepared

    def compose(self, rendered: str, counts: list[ImageCount], settings: Any = None) -> tuple[str, int]:
        """The processor's text with every run of one special token written once (TextEncoder.compose)."""
        return self.encoder.compose(rendered, counts, settings)

    def image_spans(self, prepared: _Prepared) -> tuple[tuple[int, int], ...] | None:
        """Each image's [first, last + 1) token positions in input_ids (TextEncoder.image_spans)."""
        return self.encoder.image_spans(_counted(prepared))

    def _token_lengths(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        counter = self.length_counter()
        if counter is not None:
            return counter(texts)
        encoded = self.model.tokenizer(
            texts, add_special_tokens=self.family.add_special_tokens, return_attention_mask=False
        )
        return [len(ids) for ids in encoded["input_ids"]]

    # -- rows -------------------------------------------------------------------------------------

    def _result(self, prepared: _Prepared, length: int | None) -> RowResult:
        seq_len = text_tokens = None
        if length is not None:
            seq_len = length + prepared.extra_tokens
            text_tokens = seq_len
            if any(info.tokens is None for info in prepared.images):
                text_tokens = None  # the fallback could not share the image tokens out between images
            elif self.family.placeholder or prepared.fixed_length is not None:
                # (a plain encoder's image tokens are not in the text sequence; the fallback's always are)
                text_tokens -= sum(info.tokens or 0 for info in prepared.images)
            if text_tokens is not None:
                text_tokens -= sum(video.tokens for video in prepared.videos)
        spans = max_position = None
        if seq_len is not None:
            limit = self.context.max_length
            if prepared.fixed_length is not None:
                spans = prepared.fixed_spans if limit is not None and seq_len > limit else None
            elif limit is not None and seq_len > limit and prepared.counts and self.family.placeholder:
                spans = self.image_spans(prepared)
            if self.family.position_span is not None and (
                not prepared.videos or self.family.video_position_span is not None
            ):
                settings = self.model.settings
                taken = sum(self.family.position_span(count, settings) for count in prepared.counts)
                max_position = seq_len - sum(count.tokens for count in prepared.counts) + taken - 1
                if prepared.videos:  # (a family without a video position span: no max position)
                    max_position = self._video_max_position(prepared, max_position)
        result = RowResult(
            sample=prepared.sample,
            images=prepared.images,
            placeholders=prepared.placeholders,
            text_tokens=text_tokens,
            seq_len=seq_len,
            count_error=prepared.count_error,
            image_spans=spans,
            max_position_id=max_position,
            media=prepared.media,
        )
        if seq_len is not None and self.pipeline.name != "hf":
            fate = self.pipeline.fate(result, _counted(prepared), self.encoder)
            if fate is not None:
                result = replace(result, trainer=fate)
        return result

    def _video_max_position(self, prepared: _Prepared, last: int) -> int | None:
        """The row's largest M-RoPE position id with its videos, from `last` (the last token's with the
        images' spans): each video moves it by its advance; where a video's own positions reach beyond
        the text after it (Qwen2-VL's long clips: time is not an advance), the largest of them, from
        where the video sits in input_ids (one tokenization with offsets). None: not known."""
        hook = self.family.video_position_span
        assert hook is not None and self.family.position_span is not None
        videos = prepared.videos
        spans = [hook(video, self.model.video_settings) for video in videos]
        if any(span.beyond is None for span in spans):
            return None
        last += sum(span.advance - video.tokens for span, video in zip(spans, videos, strict=True))
        if all(span.beyond is not None and span.beyond < 0 for span in spans):
            return last  # (every video's positions stay below the text after it)
        ends = self.encoder.media_ends(_counted(prepared))
        if ends is None or len(ends[0]) != len(prepared.counts):
            return None
        settings = self.model.settings
        # each medium's end in input_ids, and how many positions fewer than tokens it takes
        saved = [
            (end, count.tokens - self.family.position_span(count, settings))
            for end, count in zip(ends[0], prepared.counts, strict=True)
        ] + [
            (end, video.tokens - span.advance)
            for end, video, span in zip(ends[1], videos, spans, strict=True)
        ]
        largest = last
        for end, span in zip(ends[1], spans, strict=True):
            assert span.beyond is not None
            after = end - sum(fewer for at, fewer in saved if at <= end)  # the next token's position
            largest = max(largest, after + span.beyond)
        return largest

    def check(self, result: RowResult) -> tuple[Finding, ...]:
        findings = tuple(finding for rule in self.rules for finding in rule.check(result, self.context))
        if findings and self.config.per_source_ignores:
            findings = tuple(finding for finding in findings if self.keep(finding))
        return findings

    def keep(self, finding: Finding) -> bool:
        """Whether select/ignore and per-source-ignores let this finding through (also --verify's)."""
        if not self.config.rule_enabled(finding.code):
            return False
        ignored = self._source_ignores.get(finding.source)
        if ignored is None:  # glob matching once per file, not per finding
            ignored = self._source_ignores[finding.source] = self.config.source_ignores(finding.source)
        return not finding.code.startswith(ignored)

    def scan_samples(self, samples: Iterable[Sample], reset: bool = True) -> Iterator[RowOutcome]:
        """One scan of `samples`: rules that compare rows (duplicate ids) start afresh with each call."""
        if reset:
            for rule in self.rules:
                rule.reset()
        iterator = iter(samples)
        # The tokenizer (Rust, releases the GIL) works on chunk k in a thread while this thread reads,
        # counts and renders chunk k+1 and runs the rules on chunk k-1: two cores busy, one process.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlmlint-tokenizer") as tokenizer:
            pending: tuple[list[_Prepared], Future] | None = None
            while True:
                prepared = []
                chars = 0
                for sample in islice(iterator, self.config.batch_size):
                    prepared.append(self._prepare(sample))
                    chars += len(prepared[-1].text or "")
                    if chars >= MAX_BATCH_TEXT_CHARS:  # a chunk of long rows is cut short
                        break
                submitted = None
                if prepared:
                    texts = [p.text for p in prepared if p.text is not None]
                    submitted = (prepared, tokenizer.submit(self._token_lengths, texts))
                if pending is not None:
                    yield from self._finish(*pending)
                if submitted is None:
                    return
                pending = submitted

    def _finish(self, prepared: list[_Prepared], lengths: Future) -> Iterator[RowOutcome]:
        counted = iter(lengths.result())
        for item in prepared:
            if item.fixed_length is not None:  # counted whole by the real processor (the fallback)
                length = item.fixed_length
            else:
                length = next(counted) if item.text is not None else None
            result = self._result(item, length)
            findings = self.check(result)
            yield RowOutcome(self.retained(result, findings), findings)

    def retained(self, result: RowResult, findings: tuple[Finding, ...]) -> RowResult:
        """The result a caller may keep: a flagged row's embedded bytes while KEEP_EMBEDDED_BYTES lasts."""
        sample = result.sample
        if not findings or self.embedded_budget is None:
            return result  # a row without findings is not kept (reports keep flagged rows only)
        size = _embedded_size(sample)
        if size <= self.embedded_budget:
            self.embedded_budget -= size
            return result
        return evolve(result, sample=_without_embedded(sample))

    def scan(self, dataset: str | None = None, skip: int = 0) -> Iterator[RowOutcome]:
        """Scan config.dataset, or another dataset with the same settings and the already loaded model.

        `skip`: rows already counted (--resume): read and shown to the rules that compare rows, not
        counted or reported again. --jobs processes (runner.LocalExecutor): same outcomes, same order.
        """
        from vlmlint.runner import LocalExecutor

        return LocalExecutor(self).scan(dataset, skip)

    def default_jobs(self) -> int:
        """--jobs 0: every core when tokenizing is cheap for this model, else one process per two."""
        from vlmlint.models.qwen_lengths import QwenLengths
        from vlmlint.runner import default_jobs

        # The fallback's work (decoding, the processor's Python and numpy) fills a core per process.
        cheap = self.family.count_row is not None or isinstance(self.length_counter(), QwenLengths)
        return default_jobs(cheap_tokenizer=cheap)

    def length_counter(self) -> Any:
        """The batch length counter (_fast_lengths), chosen once; None: tokenizer(...) itself."""
        if self._fast_lengths is False:
            self._fast_lengths = _fast_lengths(self.model, self.family.add_special_tokens)
        return self._fast_lengths
