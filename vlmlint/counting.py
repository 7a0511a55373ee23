"""The model's text side, as the processor and trainers see it: render, compose, tokenize.

`TextEncoder` holds what turns a row's conversation into the processor's token sequence for one model:
the chat-template render (the processor's, or a trainer's conversation prefix with or without the
generation prompt), the composed text (every image placeholder expanded into its tokens, each run of
one special token written once) and each image's token span. The engine counts rows with it, and
trainer pipelines (vlmlint/pipelines) get it with a `CountedRow`: they never see the Scanner.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vlmlint.models import ImageCount, Model, Run
from vlmlint.models.base import Segment, VideoCount, compose_default
from vlmlint.records import Message, Sample
from vlmlint.template_cache import render_conversation, without_media

Span = tuple[int, int]


@dataclass(frozen=True)
class CountedRow:
    """One row the processor counts: its sample and each image's count, in order (a pipeline's input);
    `videos`: each video's count where the row's videos are counted (rendered and expanded too)."""

    sample: Sample
    counts: tuple[ImageCount, ...]
    videos: tuple[VideoCount, ...] = ()


@dataclass(frozen=True)
class _RunAt:
    image: int | None  # which image's expansion the run belongs to
    char_start: int  # where its one written token starts in the composed text
    count: int
    video: bool = False  # a run of a video's expansion


@lru_cache(maxsize=64)
def _added_special(tokenizer: Any) -> tuple[int, int]:
    """How many ids the tokenizer adds before and after a text with add_special_tokens=True."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for lead in range(len(full) - len(plain) + 1):
        if full[lead : lead + len(plain)] == plain:
            return lead, len(full) - len(plain) - lead
    return 0, 0


_VIDEO = frozenset({"video"})


@dataclass(frozen=True)
class _VideoRun(Run):
    """A run of a video's expansion: never taken for an image's run of the same token and length."""


class TextEncoder:
    """One model's render -> compose -> tokenize; `template` None: the raw turns joined."""

    def __init__(self, model: Model, template: str | None, add_generation_prompt: bool) -> None:
        self.model = model
        self.family = model.family
        self.template = template
        self.add_generation_prompt = add_generation_prompt
        self._shape_cache = None  # built on the first render (template_cache.ShapeCache)

    def render(self, messages: tuple[Message, ...], videos: bool = False) -> str:
        """The text the processor tokenizes: the chat template's output, or the raw turns joined.

        Audio parts are not rendered, nor video parts unless `videos` (the row's videos are counted):
        a row's lengths are then lower bounds.
        """
        messages = without_media(messages, _VIDEO if videos else frozenset())
        if self.template is None:
            turns = (
                "".join(
                    self.family.raw_image_prompt
                    if part.is_image
                    else (self.family.raw_video_prompt if part.media else part.text)
                    for part in message.parts
                )
                for message in messages
            )
            if not self.family.placeholder:  # a plain encoder: only the text (a caption) is tokenized
                return "\n".join(turn for turn in turns if turn)
            return "\n".join(turns)
        if self._shape_cache is None:
            from vlmlint.template_cache import ShapeCache

            self._shape_cache = ShapeCache(self._render_template)
        return self._shape_cache.render(messages)

    def _render_template(self, messages: tuple[Message, ...]) -> str:
        """One full jinja render, exactly as processor.apply_chat_template does it, within its bounds."""
        return render_conversation(
            self.template, messages, self.add_generation_prompt, self.model.tokenizer.special_tokens_map
        )

    def render_prefix(self, messages: tuple[Message, ...], generation_prompt: bool) -> str:
        """A conversation prefix as a trainer renders it, with or without the generation prompt
        (the raw turns joined without a template, a newline standing for the prompt)."""
        if self.template is None:
            text = self.render(messages) if messages else ""
            return text + "\n" if generation_prompt and messages else text
        return render_conversation(  # trainers' video sampling is not reproduced: no video part
            self.template, without_media(messages), generation_prompt, self.model.tokenizer.special_tokens_map
        )

    def compose(
        self, rendered: str, counts: Any, settings: Any = None, videos: tuple[VideoCount, ...] = ()
    ) -> tuple[str, int]:
        """The processor's text with every run of one special token written once, and the ids saved.

        `settings`: other image settings than the model's (vlmlint stats tries image-size knobs).
        `videos`: the row's video counts, whose placeholders are expanded too.
        """
        text, saved, _ = self._compose(rendered, counts, settings, videos)
        return text, saved

    def _video_segments(self, segments: list[Segment], videos: tuple[VideoCount, ...]) -> list[Segment]:
        """Each video placeholder of the text segments replaced by its video's expansion, in order."""
        placeholder = self.family.video_placeholder
        expand = self.family.expand_video
        assert placeholder and expand is not None
        expansions = iter(expand(video, self.model.video_settings) for video in videos)
        wrapper = self.family.video_wrapper(self.model.video_settings) if self.family.video_wrapper else ""
        out: list[Segment] = []
        for segment in segments:
            if isinstance(segment, Run) or placeholder not in segment:
                out.append(segment)
                continue
            if wrapper:  # the processor drops the template's pair around the placeholder first
                segment = segment.replace(wrapper, placeholder)
            pieces = segment.split(placeholder)
            out.append(pieces[0])
            for piece in pieces[1:]:
                out.extend(
                    _VideoRun(seg.token, seg.count) if isinstance(seg, Run) else seg
                    for seg in next(expansions)
                )
                out.append(piece)
        return out

    def _compose(
        self, rendered: str, counts: Any, settings: Any = None, videos: tuple[VideoCount, ...] = ()
    ) -> tuple[str, int, list[_RunAt]]:
        """compose(), also saying where each image's runs sit in the text (for image spans)."""
        settings = self.model.settings if settings is None else settings
        expansions = [self.family.expand(count, settings) for count in counts]
        if self.family.compose is not None:
            segments = self.family.compose(rendered, expansions, settings)
        elif not self.family.placeholder:  # no image token in the text: nothing to expand
            segments = [rendered]
        else:
            segments = compose_default(rendered, self.family.placeholder, expansions)
        if videos:
            segments = self._video_segments(segments, videos)
        # The runs of each image, in order: composition keeps image i's runs before image i+1's.
        expected = [
            (i, seg)
            for i, expansion in enumerate(expansions)
            for seg in expansion
            if isinstance(seg, Run) and seg.count
        ]
        pieces: list[str] = []
        runs: list[_RunAt] = []
        saved = 0
        length = 0
        matched = 0  # image runs matched so far (video runs are not images')
        for segment in segments:
            if isinstance(segment, Run):
                if segment.count:
                    image = None
                    if matched < len(expected) and expected[matched][1] == segment:
                        image = expected[matched][0]
                        matched += 1
                    runs.append(_RunAt(image, length, segment.count, isinstance(segment, _VideoRun)))
                    pieces.append(segment.token)
                    length += len(segment.token)
                    saved += segment.count - 1
            else:
                pieces.append(segment)
                length += len(segment)
        return "".join(pieces), saved, runs

    def image_spans(self, row: CountedRow) -> tuple[Span, ...] | None:
        """Each image's [first, last + 1) token positions in input_ids (from its first to last run)."""
        located = self._located_runs(row)
        if located is None:
            return None
        spans: dict[int, list[int]] = {}
        for first, run in located:
            if run.image is not None:
                span = spans.setdefault(run.image, [first, first + run.count])
                span[1] = first + run.count
        return tuple((spans[i][0], spans[i][1]) for i in sorted(spans))

    def media_ends(self, row: CountedRow) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Where each image's and each video's expansion ends in input_ids (one past its last run's
        last token), from one tokenization. None: a run this tokenizer's offsets do not place, or runs
        that do not add up to the row's images and videos."""
        located = self._located_runs(row)
        if located is None:
            return None
        images: dict[int, int] = {}
        for first, run in located:
            if run.image is not None:
                images[run.image] = first + run.count
        expand = self.family.expand_video
        per_video = [
            sum(isinstance(seg, Run) and seg.count > 0 for seg in expand(video, self.model.video_settings))
            for video in row.videos
        ] if expand is not None else []  # fmt: skip
        ends = [first + run.count for first, run in located if run.video]
        if len(ends) != sum(per_video) or 0 in per_video or sorted(images) != list(range(len(images))):
            return None
        videos, taken = [], 0
        for runs in per_video:
            taken += runs
            videos.append(ends[taken - 1])
        return tuple(images[i] for i in range(len(images))), tuple(videos)

    def _located_runs(self, row: CountedRow) -> list[tuple[int, _RunAt]] | None:
        """Each run of the row's composed text with its first token's position in input_ids (None:
        offsets this tokenizer does not report: no positions rather than wrong ones)."""
        rendered = self.render(row.sample.messages, videos=bool(row.videos))
        text, _, runs = self._compose(rendered, row.counts, videos=row.videos)
        encoding = self.model.tokenizer(
            text, add_special_tokens=self.family.add_special_tokens, return_offsets_mapping=True
        )
        starts = {
            start: index for index, (start, end) in enumerate(encoding["offset_mapping"]) if end > start
        }
        located = []
        extra = 0
        for run in runs:
            token = starts.get(run.char_start)
            if token is None:
                return None
            located.append((token + extra, run))
            extra += run.count - 1
        return located

    def encode(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text without special tokens (a trainer's own tokenization)."""
        return self.model.tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]

    def added_special_tokens(self) -> tuple[int, int]:
        """Ids the processor-equivalent length counts beyond a trainer's (BOS/EOS the call adds)."""
        if not self.family.add_special_tokens or self.model.tokenizer is None:
            return 0, 0
        return _added_special(self.model.tokenizer)
