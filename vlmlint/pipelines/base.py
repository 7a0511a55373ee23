"""Trainer pipelines: what a trainer does to a row between the dataset and the model.

The raw processor (`--pipeline hf`, the default) is not what a trainer feeds the model: trainers resize
images first, apply their own templates, and truncate or drop long rows. A pipeline preset predicts,
for each row, the trainer's fate for it (`TrainerFate`): kept as is, truncated (how many answer tokens
are lost), dropped or deleted before training, an error raised (the run stops), or a crash (the cut falls
inside an image's tokens, so image features and tokens no longer match). Rules VLM601-VLM604 turn fates
into findings.

A preset is one class with:
- `name`, `trainer` (the trainer and the version whose behaviour it reproduces, e.g. "LLaMA-Factory 0.9.3");
- `resize(height, width)`: the trainer's own image pre-resize, applied to header sizes before the
  model family counts image tokens (identity by default);
- `exif_transpose`: whether the trainer's image loading applies the EXIF orientation as transformers'
  `load_image` does (True by default); False counts images of orientations 5-8 at their stored,
  unrotated size (a plain `PIL.Image.open`, as LLaMA-Factory does);
- `bind(model)`: called once by the Scanner with the loaded model, before any row: a preset that
  depends on the model (its template, its image plugin) resolves it here, and raises PipelineError
  for a model it does not support;
- `video_sampling`: how the trainer samples video frames, "transformers" (the model's video
  processor, the default), a preset's own name where it reproduces its trainer's sampling (e.g.
  "llamafactory"), or None where vlmlint does not (the row's videos are then not counted, and VLM109
  says so);
- `count_video(family, meta, settings)`: one video's VideoCount as the trainer's model gets it, from
  the clip's header facts (VideoMeta) and the model's video processor settings. The default hands the
  clip to the family's `count_video` as transformers' default reader (torchcodec) decodes it; a preset
  that samples frames itself (LLaMA-Factory decodes them with PyAV and pre-resizes them) passes the
  family the frames it keeps and the settings its processor call runs with (do_sample_frames off), so
  that the family's formula still does the counting. CountError: the trainer or processor refuses it;
- `prepare(sample)`: the row as the trainer reads it, before anything is counted (identity by default;
  InternVL's finetune script writes `<image>\n` before a one-image row's first turn when it has none);
- `count_image(family, height, width, settings, images_in_row)`: one image's ImageCount as the
  trainer's model gets it (by default the family's formula on the `resize`d size; InternVL's script
  splits its tile budget across a row's images); `count_exact(family, image_processor, images,
  settings)` the same on decoded images (--exact, --verify; by default the real image processor);
- `fate(result, row, encoder)`: the prediction for one counted row (None: nothing to say).
  `row` (vlmlint.counting.CountedRow) holds the sample and each image's ImageCount; `encoder`
  (vlmlint.counting.TextEncoder) gives the model (tokenizer, family, settings), `render(messages)`,
  `render_prefix(messages, generation_prompt)` (a conversation prefix as trainers render it),
  `compose(text, counts)`, `encode(texts)` and `image_spans(row)` (each image's token positions).

Presets are pure: no printing, no exits; options come from `--pipeline-option KEY=VALUE` (or
`pipeline-options` in the config file) and are validated in the constructor (PipelineError).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.records import TrainerFate

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models import Model
    from vlmlint.models.base import Family, ImageCount, VideoCount
    from vlmlint.records import RowResult, Sample, VideoMeta


class PipelineError(ValueError):
    """A pipeline name or option vlmlint cannot use; the message names it."""


class Pipeline:
    """Base class of the presets; `hf` (the raw processor) is this class itself."""

    name: ClassVar[str] = "hf"
    trainer: ClassVar[str] = "the raw transformers processor"
    option_names: ClassVar[tuple[str, ...]] = ()  # the --pipeline-option keys this preset accepts
    exif_transpose: ClassVar[bool] = True  # False: the trainer opens images without EXIF orientation

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            known = ", ".join(self.option_names) or "none"
            raise PipelineError(
                f"--pipeline {self.name}: unknown option(s) {', '.join(unknown)}; known: {known}"
            )
        self.options = options

    @property
    def video_sampling(self) -> str | None:
        """How the trainer samples a video's frames, as vlmlint reproduces it: "transformers" (the model's
        own video processor) for the raw processor; None (not reproduced: the row's videos are not
        counted, VLM109 says why) for a preset unless it declares its own."""
        return "transformers" if type(self) is Pipeline else None

    def count_video(self, family: Family, meta: VideoMeta, settings: Any) -> VideoCount:
        """One video's count as the trainer's model gets it (video_sampling not None): here the clip as
        transformers' default reader (torchcodec) gives it to the model's video processor."""
        assert family.count_video is not None
        return family.count_video(meta.as_torchcodec(), settings)

    def bind(self, model: Model) -> None:
        """Learn the model (family, tokenizer, settings) before the first row; PipelineError if unsupported."""

    def resize(self, height: int, width: int) -> tuple[int, int]:
        """The image size the trainer hands to the processor (its own pre-resize); identity here."""
        return height, width

    def video_knobs(self, model: Model, at: Any) -> list[Any] | None:
        """`vlmlint stats`: the trainer's own video sampling options as models/knobs.VideoKnob, each
        knob's `at` from `at(option key)` (models/knobs.OptionSetter); None: not searched."""
        return None

    def image_size_option(self) -> tuple[str, int, int] | None:
        """The trainer's own option that sizes images (`vlmlint stats` recommends it, as the trainer names
        it): (its --pipeline-option key, the current value, the smallest value it takes); None when the
        trainer leaves the size to the processor (its knob is searched)."""
        return None

    def prepare(self, sample: Sample) -> Sample:
        """The row as the trainer reads it (its own edits to the conversation); unchanged here."""
        return sample

    def count_image(
        self, family: Family, height: int, width: int, settings: Any, images_in_row: int
    ) -> ImageCount:
        """One image's count as the trainer's model gets it: the family's formula on the pre-resized size."""
        return family.count(*self.resize(height, width), settings, images_in_row=images_in_row)

    def count_exact(
        self, family: Family, image_processor: Any, images: list[Any], settings: Any
    ) -> list[ImageCount]:
        """The row's decoded (pre-resized) images counted by the model's real image processor."""
        return family.count_exact(image_processor, images, settings)

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        """The trainer's fate for a counted row; None when this preset predicts nothing (hf)."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "trainer": self.trainer, "options": dict(self.options)}
