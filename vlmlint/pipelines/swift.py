"""`--pipeline swift`: ms-swift's SFT preprocessing of a row (max_length and truncation_strategy).

Reproduces ms-swift 4.6.0 (`pip install ms-swift==4.6.0`):

- swift/template/base.py, `Template._encode_truncated`: a row whose encoded length (its input_ids,
  image tokens expanded) is above `max_length` is handled by the template's `truncation_strategy`:
  `raise` raises `MaxLengthError("Current length of row(N) is larger than the max_length(L).")`;
  `left`/`right` call `Template._truncate`, which keeps every image placeholder token
  (`placeholder_tokens`: the processor's image and video token ids) and the first (`right`) or last
  (`left`) `max_length - n_image_tokens` other tokens, so no image loses tokens but the kept length can
  exceed max_length when the images alone fill it (then nothing else is kept: no labels).
- swift/arguments/base_args/template_args.py: the command line's `--truncation_strategy` defaults to
  `delete`, which becomes the template's `raise`; swift/dataset/preprocessor/core.py (pre-encoding) and
  swift/dataset/utils.py (`LazyLLMDataset`) catch the MaxLengthError and skip the row (a random other row
  is fetched in its place). With `--strict true` the error is re-raised and the run stops: that is the
  `raise` outcome here (`truncation_strategy=raise` or `strict=true`).
- `max_length` defaults to the model's maximum length (`max_model_len`, from config.json).
- swift/loss_scale/base.py: the default loss_scale trains every assistant turn; `last_round` only the
  last, `all` every token (what counts as answer tokens lost; with `all` vlmlint also counts the tokens
  swift's image tag writes around an image, e.g. Qwen's <|vision_start|> and <|vision_end|>, which
  swift leaves unlabelled: up to two answer tokens too many per image).
- swift/template/vision_utils.py, `rescale_image`: `--max_pixels` scales a larger image down to that
  pixel count, keeping its aspect ratio, before the model's processor sees it; `load_image` opens
  images without applying their EXIF orientation.

vlmlint renders rows with the model's own chat template, which stands in for ms-swift's registered
template of that model (for Qwen2-VL and Llama 4 they agree token for token: tests/test_pipeline_swift.py).
For the templates in REPRODUCED, swift writes a few tokens the chat template does not, added here by
processor class (`SwiftTemplate`), each recorded against swift's own Template.encode:

- swift/template/base.py `_add_non_thinking_prefix` / `_remove_history_thinking`: glm4_5v (GLM-4.6V)
  puts `<think></think>\n` and minicpmv4_6 / minicpmv4_7 (MiniCPM-V 4.6 / 4.7, templates/minicpm.py)
  `<think>\n\n</think>\n\n` before every answer that starts with no thought (trained with it; with
  last_round the earlier answers get the history prefix: GLM's same string, MiniCPM's none);
- templates/glm.py GLM4TemplateMeta: glm4v and glm4_5v end the row with the suffix `<|user|>` (trained),
  and `_add_dynamic_eos` trains the `<|user|>` that opens each later turn;
- templates/llama.py Llama4Template: `placeholder_tokens` adds <|patch|> to the processor's <|image|>,
  so `_truncate` keeps each image's <|image|> too;
- templates/glm.py GLM4_5VTemplate._encode keeps the processor's `mm_token_type_ids`, on which
  `_truncate` raises IndexError: a left/right cut of a GLM-4.6V row with images is skipped (--strict: raised).

The other templates of issue 19's families are refused by name (NOT_REPRODUCED, with what differs).

Videos (`video_sampling` "swift (qwen-vl-utils)", the Qwen-VL templates qwen2_vl, qwen2_5_vl and qwen3_vl
only; other models' rows with videos are not counted, VLM109), templates/qwen.py `Qwen2VLTemplate.replace_tag`
/ `Qwen3VLTemplate`: each video goes through qwen-vl-utils 0.0.14's `fetch_video` (vision_process.py),
with `image_patch_size` 14 (Qwen2VLTemplate: fetch_video's default) or the image processor's patch_size
(Qwen3VLTemplate), and the frames it returns go to the video processor with `do_resize=False` (Qwen3-VL
also `do_sample_frames=False` and the reader's `video_metadata`). fetch_video, with the torchcodec reader
(`_read_video_torchcodec`: the reader qwen-vl-utils picks when torchcodec is installed; its frame count and
average_fps are torchcodec's exact-mode ones, frames turned upright): `smart_nframes` (FPS x the clip's
seconds, within FPS_MIN_FRAMES and FPS_MAX_FRAMES, floored to FRAME_FACTOR; ValueError below 2 frames, and
the fallback reader, torchvision's read_video, no longer exists in torchvision 0.25+), frames at
`torch.linspace(0, total - 1, nframes).round()`, then one `smart_resize` of the frame size with factor
patch x SPATIAL_MERGE_SIZE, min_pixels VIDEO_MIN_TOKEN_NUM x factor^2 and max_pixels min(VIDEO_MAX_TOKEN_NUM
x factor^2, MODEL_SEQ_LEN x factor^2 x 0.9 / nframes x FRAME_FACTOR), at least min_pixels x 1.05. The
module's constants are what swift/model/models/qwen.py sets from the environment: `patch_qwen_vl_utils`
(FPS, FPS_MIN_FRAMES, FPS_MAX_FRAMES, FRAME_FACTOR, VIDEO_MIN_TOKEN_NUM, VIDEO_MAX_TOKEN_NUM,
SPATIAL_MERGE_SIZE; VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS and VIDEO_TOTAL_PIXELS are no constants of 0.0.14, so
that only `compat_qwen_vl_utils`'s conversion of VIDEO_MAX_PIXELS / VIDEO_MIN_PIXELS into token numbers,
pixels // (14 or 16 x SPATIAL_MERGE_SIZE)^2, reaches it, and VIDEO_TOTAL_PIXELS has no effect) and
MODEL_SEQ_LEN, which qwen-vl-utils reads itself: vlmlint takes them as pipeline options under the same names
(`--pipeline-option FPS=1 VIDEO_MAX_PIXELS=200704`). The template writes <|vision_start|><|video_pad|>
<|vision_end|> as the chat template does; Qwen3VLProcessor expands it with the timestamps of the reader's
frames_indices / fps. tests/test_pipeline_swift_video.py checks this against qwen-vl-utils' and swift's own
code (fixtures/qwen_vl_utils_video_record.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.models.base import CountError
from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.pipelines.layout import Layout, Rounds, row_layout
from vlmlint.records import Role, TrainerFate

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models.base import Family, VideoCount
    from vlmlint.records import RowResult, VideoMeta

SWIFT_VERSION = "ms-swift 4.6.0"
_STRATEGIES = ("delete", "left", "right", "raise")
_LOSS_SCALES = {"default": "all_assistant", "last_round": "last_assistant", "all": "every_token"}


@dataclass(frozen=True)
class SwiftTemplate:
    """An ms-swift template vlmlint reproduces: the model's chat template's tokens plus what the template
    writes that the chat template does not (recorded token for token: tests/test_pipeline_swift.py)."""

    name: str  # swift/template/constant.py's template_type
    source: str  # swift/template/templates/<source>
    # TemplateMeta.non_thinking_prefix: `_add_non_thinking_prefix` puts it before every answer that starts
    # with neither it nor `thinking_prefix` (the last one only with loss_scale last_round)
    answer_prefix: str = ""
    thinking_prefix: str = "<think>"
    # history_thinking_prefix: with last_round, `_remove_history_thinking` writes it before every earlier
    # answer (its content after the last </think>, stripped)
    history_prefix: str = ""
    # The template's suffix where the chat template writes nothing after the last answer (GLM's
    # <|user|>): one more trained token at the end.
    suffix: str = ""
    # `_add_dynamic_eos`: after an earlier answer, the tokens that equal the suffix are trained; where the
    # chat template ends the answer before them (GLM: the next turn's <|user|>), that many more labels.
    dynamic_eos: int = 0
    # Where swift 4.6.0's `_truncate` itself fails on a row with images (left/right cut): the error. The
    # row is skipped by `swift sft` (any encode error is caught, another row fetched); --strict stops.
    truncate_error: str = ""
    # The processor's image_token is among the template's placeholder_tokens, which _truncate keeps, where
    # vlmlint counts only the run it precedes (Llama 4: <|image|> once before the global tile's patches).
    protects_placeholder: bool = False


_GLM_SUFFIX = "<|user|>"
_MINICPM = SwiftTemplate("minicpmv4_6", "minicpm.py", answer_prefix="<think>\n\n</think>\n\n")

# ms-swift 4.6.0's registered templates (swift/model/models/*.py register_model -> template, defined in
# swift/template/templates/*.py) that vlmlint reproduces, by processor class (and, for Glm4vProcessor,
# the config's model_type: GLM-4.5V shares the class and trains with glm4_5v).
REPRODUCED: dict[str, SwiftTemplate] = {
    "Llama4Processor": SwiftTemplate("llama4", "llama.py", protects_placeholder=True),
    "Glm4vProcessor": SwiftTemplate("glm4v", "glm.py", suffix=_GLM_SUFFIX, dynamic_eos=1),
    "Glm46VProcessor": SwiftTemplate(
        "glm4_5v",
        "glm.py",
        answer_prefix="<think></think>\n",
        history_prefix="<think></think>\n",
        suffix=_GLM_SUFFIX,
        dynamic_eos=1,
        # GLM4_5VTemplate._encode keeps the processor's mm_token_type_ids (of its image-only text), which
        # _truncate then indexes with the whole row's mask
        truncate_error="IndexError: The shape of the mask [N] at index 0 does not match the shape of the "
        "indexed tensor [1, M] at index 0 (mm_token_type_ids)",
    ),
    "MiniCPMV4_6Processor": _MINICPM,
    "MiniCPMV4_7Processor": SwiftTemplate("minicpmv4_7", "minicpm.py", answer_prefix=_MINICPM.answer_prefix),
}
_MODEL_TYPES = {"Glm4vProcessor": ("glm4v",)}  # config.json model_types the entry is recorded for

# The registered templates of the processors where vlmlint does not give swift's tokens: a scan of such a
# model with --pipeline swift is refused by name, saying what differs (or why it was not recorded).
NOT_REPRODUCED: dict[str, tuple[str, str, str]] = {
    "Gemma4Processor": (
        "gemma4_nothinking (E2B/E4B) or gemma4",
        "gemma.py",
        "the chat template trims every text part where swift keeps the row's text as written (the newline "
        "after an <image> stays: a token more); gemma4 also puts the empty thought <|channel>thought\\n"
        "<channel|> before every answer",
    ),
    "Gemma3nProcessor": (
        "gemma3n",
        "gemma.py",
        "the chat template trims every text part where swift keeps the row's text as written, and swift "
        "ends the row with <end_of_turn> where the template writes <end_of_turn>\\n",
    ),
    "Kimi_K25Processor": (
        "kimi_k25",
        "moonshot.py",
        "the template hands the image processor {'type': 'image', 'image': ...} entries (the checkpoint's "
        "remote-code API); transformers' Kimi_K25 image processor raises TypeError on them",
    ),
    "KimiVLProcessor": ("kimi_vl", "moonshot.py", "not recorded: no fixture processor of this class"),
    "Ernie4_5_VLMoeProcessor": (
        "ernie_vl",
        "baidu.py",
        "the template writes 'Picture N:<|IMAGE_PLACEHOLDER|>' and calls the processor with the remote-code "
        "<|image@placeholder|> token; transformers' Ernie4_5_VLMoeProcessor raises ValueError (0 "
        "<|IMAGE_PLACEHOLDER|> tokens for the row's images)",
    ),
    "Qwen2_5OmniProcessor": (
        "qwen2_5_omni",
        "qwen.py",
        "not recorded: the template imports qwen_omni_utils, whose audio stack (librosa) the recording "
        "environment lacks",
    ),
    "Qwen3OmniMoeProcessor": (
        "qwen3_omni",
        "qwen.py",
        "not recorded: the template imports qwen_omni_utils, whose audio stack (librosa) the recording "
        "environment lacks",
    ),
    "Molmo2Processor": (
        "molmo2",
        "molmo.py",
        "the template calls get_image_tokens of the checkpoint's remote-code processor, which transformers' "
        "Molmo2Processor does not have (AttributeError)",
    ),
    "Phi4MultimodalProcessor": (
        "phi4_multimodal",
        "microsoft.py",
        "not recorded: the template reads the audio feature extractor's compression_rate, which the "
        "fixture processor (built without audio) lacks",
    ),
    "PaddleOCRVLProcessor": (
        "paddle_ocr",
        "baidu.py",
        "the template writes <|IMAGE_START|> and <|IMAGE_END|> around every image (the chat template "
        "gets image_token without them: 2 tokens fewer), ends earlier answers with <|end_of_sentence|> "
        "where the template writes </s>, and tokenizes each answer apart from 'Assistant: ' (the space "
        "becomes a token of its own)",
    ),
    "HunYuanVLProcessor": (
        "hunyuan_ocr",
        "tencent.py",
        "the template reads pad_id of the checkpoint's remote-code tokenizer, which transformers' "
        "tokenizer does not have (AttributeError)",
    ),
    "DeepseekOcr2Processor": (
        "deepseek_ocr2",
        "deepseek.py",
        "the template imports the checkpoint's remote-code modeling_deepseekocr2.py to encode a row",
    ),
    "Ovis2Processor": (
        "ovis2",
        "qwen.py",
        "swift loads the original remote-code Ovis2 (its processor is the tokenizer alone), not "
        "transformers' Ovis2Processor",
    ),
}


QWEN_VL_UTILS = "qwen-vl-utils 0.0.14"
# swift's Qwen-VL templates by processor class: the template and the patch size its model loader converts
# VIDEO_MAX_PIXELS with (compat_qwen_vl_utils: Qwen2VLLoader 14, Qwen3VLLoader 16).
VIDEO_TEMPLATES: dict[str, tuple[str, int]] = {
    "Qwen2VLProcessor": ("qwen2_vl", 14),
    "Qwen2_5_VLProcessor": ("qwen2_5_vl", 14),
    "Qwen3VLProcessor": ("qwen3_vl", 16),
}
# vision_process.py's module constants (0.0.14) that swift's patch_qwen_vl_utils sets from the environment,
# with qwen-vl-utils' defaults; MODEL_SEQ_LEN is read by qwen-vl-utils itself at import.
VIDEO_DEFAULTS: dict[str, float] = {
    "FPS": 2.0,
    "FPS_MIN_FRAMES": 4,
    "FPS_MAX_FRAMES": 768,
    "FRAME_FACTOR": 2,
    "VIDEO_MIN_TOKEN_NUM": 128,
    "VIDEO_MAX_TOKEN_NUM": 768,
    "SPATIAL_MERGE_SIZE": 2,
    "MODEL_SEQ_LEN": 128000,
}
# compat_qwen_vl_utils: VIDEO_MAX_PIXELS / VIDEO_MIN_PIXELS become token numbers unless those are set;
# VIDEO_TOTAL_PIXELS is accepted as swift accepts it, and has no effect on 0.0.14 (no such constant).
VIDEO_PIXEL_OPTIONS = {"VIDEO_MAX_PIXELS": "VIDEO_MAX_TOKEN_NUM", "VIDEO_MIN_PIXELS": "VIDEO_MIN_TOKEN_NUM"}
VIDEO_READERS = ("torchcodec",)  # FORCE_QWENVL_VIDEO_READER values reproduced


@dataclass(frozen=True)
class QvuVideo:
    """What qwen-vl-utils' fetch_video hands swift's template for one clip: `frames` sampled (nframes),
    at `indices` of the reader's `total` frames read at `fps`, resized to (`height`, `width`)."""

    frames: int
    height: int
    width: int
    indices: tuple[int, ...]
    total: int
    fps: float
    wanted: float  # FPS x the clip's seconds: what smart_nframes asks for before its bounds
    max_frames: int


def torch_linspace_round(start: float, end: float, steps: int) -> list[int]:
    """torch.linspace(start, end, steps).round().long() on CPU: float32 values, the first half counted
    from start and the second from end (aten's linspace kernel), rounded half to even."""
    import numpy as np

    if steps == 1:
        return [int(np.float32(start))]
    f32 = np.float32
    step = f32((f32(end) - f32(start)) / f32(steps - 1))
    values = [
        f32(start) + step * f32(i) if i < steps // 2 else f32(end) - step * f32(steps - i - 1)
        for i in range(steps)
    ]
    return [int(np.round(value)) for value in values]


def _qvu_smart_resize(
    height: int, width: int, factor: int, min_pixels: float, max_pixels: float
) -> tuple[int, int]:
    """vision_process.smart_resize (fetch_video's call): the same as fetch_image's."""
    from vlmlint.models.qwen_vl import fetch_image_size

    sizing = SimpleNamespace(
        resized_height=None, resized_width=None, min_pixels=min_pixels, max_pixels=max_pixels
    )
    return fetch_image_size(height, width, sizing, factor)


def qvu_fetch_video(meta: VideoMeta, constants: Mapping[str, float], patch_size: int) -> QvuVideo:
    """fetch_video({"video": path}, image_patch_size=patch_size) with the torchcodec reader, on header facts.

    CountError where qwen-vl-utils raises (smart_nframes' ValueError, which fetch_video answers by trying
    torchvision's read_video: an AttributeError on torchvision 0.25+)."""
    if meta.frames_from == "frame list":
        raise CountError("a frame list: swift's qwen-vl-utils path for image lists is not reproduced")
    clip = meta.as_torchcodec()
    total, fps = clip.frames, clip.fps
    if not total or not fps:
        raise CountError("torchcodec gives no frame count or fps for this clip: qwen-vl-utils raises")
    factor_frames = int(constants["FRAME_FACTOR"])

    def floor_by(number: float, factor: int) -> int:
        return math.floor(number / factor) * factor

    # smart_nframes, the fps branch (swift passes no nframes)
    min_frames = math.ceil(constants["FPS_MIN_FRAMES"] / factor_frames) * factor_frames
    max_frames = floor_by(min(constants["FPS_MAX_FRAMES"], total), factor_frames)
    wanted = total / fps * constants["FPS"]
    nframes = floor_by(min(min(max(wanted, min_frames), max_frames), total), factor_frames)
    if not (factor_frames <= nframes <= total):
        raise CountError(
            f"qwen-vl-utils' smart_nframes: nframes should in interval [{factor_frames}, {total}], but got "
            f"{nframes} (ValueError; its fallback reader, torchvision's read_video, is gone from torchvision "
            "0.25+: AttributeError)"
        )
    indices = torch_linspace_round(0, total - 1, nframes)
    factor = patch_size * int(constants["SPATIAL_MERGE_SIZE"])
    min_pixels = constants["VIDEO_MIN_TOKEN_NUM"] * factor * factor
    total_pixels = constants["MODEL_SEQ_LEN"] * factor * factor * 0.9
    max_pixels = max(
        min(constants["VIDEO_MAX_TOKEN_NUM"] * factor * factor, total_pixels / nframes * factor_frames),
        int(min_pixels * 1.05),
    )
    try:
        height, width = _qvu_smart_resize(clip.height, clip.width, factor, min_pixels, max_pixels)
    except CountError as exc:
        raise CountError(f"fetch_video: {exc}") from None
    return QvuVideo(nframes, height, width, tuple(indices), total, fps, wanted, max_frames)


def _video_constants(options: Mapping[str, Any]) -> dict[str, float]:
    """vision_process's constants as swift sets them from these environment variables (options)."""
    constants = dict(VIDEO_DEFAULTS)
    for key in VIDEO_DEFAULTS:
        if key not in options:
            continue
        value = options[key]
        if key == "FPS" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kind = float if key == "FPS" else int
        if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
            raise PipelineError(f"--pipeline swift: {key} must be a positive {kind.__name__}, got {value!r}")
        constants[key] = value
    for key in (*VIDEO_PIXEL_OPTIONS, "VIDEO_TOTAL_PIXELS"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise PipelineError(f"--pipeline swift: {key} must be a positive integer, got {value!r}")
    return constants


def _positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    if allow_none and (value is None or (isinstance(value, str) and value.lower() == "none")):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PipelineError(f"--pipeline swift: {name} must be a positive integer, got {value!r}")
    return value


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PipelineError(f"--pipeline swift: {name} must be true or false, got {value!r}")


class SwiftPipeline(Pipeline):
    """ms-swift's `swift sft`: its max_length, truncation_strategy, loss_scale and max_pixels."""

    name: ClassVar[str] = "swift"
    trainer: ClassVar[str] = SWIFT_VERSION
    option_names: ClassVar[tuple[str, ...]] = (
        "max_length",
        "truncation_strategy",
        "strict",
        "loss_scale",
        "max_pixels",
        *VIDEO_DEFAULTS,
        *VIDEO_PIXEL_OPTIONS,
        "VIDEO_TOTAL_PIXELS",
        "FORCE_QWENVL_VIDEO_READER",
    )
    exif_transpose: ClassVar[bool] = False  # swift's load_image: Image.open, no EXIF orientation

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        options = self.options
        self.max_length = _positive_int("max_length", options.get("max_length"), allow_none=True)
        strategy = str(options.get("truncation_strategy", "delete")).lower()
        if strategy == "split":
            raise PipelineError(
                "--pipeline swift: truncation_strategy split is for pre-training only (ms-swift refuses it "
                "with a chat template)"
            )
        if strategy not in _STRATEGIES:
            raise PipelineError(
                f"--pipeline swift: truncation_strategy must be one of {', '.join(_STRATEGIES)}, got {strategy!r}"
            )
        self.strict = _bool("strict", options.get("strict", False))
        # delete is the template's raise with the error caught; --strict true lets it stop the run.
        self.strategy = "raise" if strategy == "delete" and self.strict else strategy
        loss_scale = str(options.get("loss_scale", "default")).lower()
        if loss_scale not in _LOSS_SCALES:
            raise PipelineError(
                f"--pipeline swift: loss_scale must be one of {', '.join(_LOSS_SCALES)}, got {loss_scale!r}"
            )
        self.rounds = _LOSS_SCALES[loss_scale]
        self.max_pixels = _positive_int("max_pixels", options.get("max_pixels"), allow_none=True)
        self.video_constants = _video_constants(options)
        reader = str(options.get("FORCE_QWENVL_VIDEO_READER", "torchcodec"))
        if reader not in VIDEO_READERS:
            raise PipelineError(
                f"--pipeline swift: FORCE_QWENVL_VIDEO_READER={reader} is not reproduced (only torchcodec, "
                "the reader qwen-vl-utils picks when torchcodec is installed; torchvision's read_video is gone "
                "from torchvision 0.25+)"
            )
        self.video_template: tuple[str, int] | None = None
        self.video_patch_size = 14

    @property
    def video_sampling(self) -> str | None:
        """ "swift (qwen-vl-utils)" for swift's Qwen-VL templates (fetch_video), else None (VLM109)."""
        return "swift (qwen-vl-utils)" if self.video_template is not None else None

    def bind(self, model: Any) -> None:
        processor = model.processor_class or ""
        self.video_template = VIDEO_TEMPLATES.get(processor)
        if self.video_template is not None:
            name, loader_patch = self.video_template
            # Qwen3VLTemplate passes the image processor's patch_size; Qwen2VLTemplate fetch_video's default
            self.video_patch_size = getattr(model.settings, "patch_size", 16) if name == "qwen3_vl" else 14
            constants = self.video_constants
            factor = loader_patch * int(constants["SPATIAL_MERGE_SIZE"])
            for source, target in VIDEO_PIXEL_OPTIONS.items():
                if source in self.options and target not in self.options:  # compat_qwen_vl_utils
                    constants[target] = self.options[source] // factor**2
        self.template = REPRODUCED.get(processor)
        found = NOT_REPRODUCED.get(processor)
        if self.template is not None and processor in _MODEL_TYPES:
            model_type = _model_type(model)
            if model_type not in _MODEL_TYPES[processor]:
                found = (
                    f"{self.template.name} or another (config model_type {model_type!r})",
                    self.template.source,
                    f"recorded only for model_type {', '.join(_MODEL_TYPES[processor])}",
                )
        if found is not None:
            template, source, why = found
            raise PipelineError(
                f"--pipeline swift: {SWIFT_VERSION} encodes {model.family.title} rows with its own template "
                f"{template} (swift/template/templates/{source}), which vlmlint does not reproduce: {why}; "
                "scan without --pipeline for the processor's own counts"
            )

    def count_video(self, family: Family, meta: VideoMeta, settings: Any) -> VideoCount:
        """The clip as swift's Qwen-VL template hands it to the video processor: qwen-vl-utils' frames
        (qvu_fetch_video) at their resized size, the processor run with do_resize=False (Qwen3-VL also
        do_sample_frames=False, and timestamps from the reader's frames_indices and fps)."""
        assert family.count_video is not None and self.video_template is not None
        name = self.video_template[0]
        video = qvu_fetch_video(meta, self.video_constants, self.video_patch_size)
        qwen3 = name == "qwen3_vl"
        if not qwen3 and getattr(settings, "do_sample_frames", False):
            raise CountError(
                "the video processor's do_sample_frames is on: it would sample qwen-vl-utils' frames again "
                "(not reproduced)"
            )
        frames = dataclasses.replace(
            meta,
            frames=video.frames,
            width=video.width,
            height=video.height,
            rotation=0,
            fps=video.fps,
            content_fps=None,
        )
        changes: dict[str, Any] = {"do_resize": False}
        if qwen3:
            changes["do_sample_frames"] = False
        count = family.count_video(frames, dataclasses.replace(settings, **changes))
        timestamps = count.timestamps
        if qwen3:
            from vlmlint.pipelines.llamafactory import calculate_timestamps

            timestamps = tuple(calculate_timestamps(video.indices, video.fps, settings.temporal_patch_size))
        c = self.video_constants
        mode = (
            f"{SWIFT_VERSION} {name}, {QWEN_VL_UTILS} (torchcodec, FPS {c['FPS']:g}, FPS_MAX_FRAMES "
            f"{int(c['FPS_MAX_FRAMES'])}, VIDEO_MAX_TOKEN_NUM {int(c['VIDEO_MAX_TOKEN_NUM'])}): {video.frames} "
            f"of {video.total} frames at {video.width}x{video.height}"
        )
        capped = None
        if video.wanted > video.max_frames and video.frames == video.max_frames < video.total:
            capped = (
                f"FPS {c['FPS']:g} over {video.total / video.fps:.1f} s asks for {video.wanted:.0f} frames; "
                f"FPS_MAX_FRAMES {int(c['FPS_MAX_FRAMES'])} keeps {video.frames}"
            )
        # sampled_fps: swift's template computes Qwen2.5-VL's second_per_grid_ts from qwen-vl-utils' own
        # sample fps, not reproduced: the row's largest M-RoPE position id is then not known
        return dataclasses.replace(count, mode=mode, timestamps=timestamps, capped=capped, sampled_fps=None)

    def _extra(self, row: CountedRow, encoder: TextEncoder) -> tuple[list[int], int]:
        """The tokens swift's template writes before each assistant turn's answer (in order), and after the
        last answer, beyond the model's chat template."""
        template = self.template
        if template is None:
            return [], 0
        answers = [m for m in row.sample.messages if m.role is Role.ASSISTANT]
        if not answers:
            return [], 0
        sizes = _token_sizes(encoder, (template.answer_prefix, template.history_prefix, template.suffix))
        last_round = self.rounds == "last_assistant"
        before = []
        for k, message in enumerate(answers):
            text = "".join(part.text for part in message.parts if not part.is_image)
            if last_round and k < len(answers) - 1:
                before.append(sizes[1])  # the earlier answers' thinking removed, history_prefix written
            elif (
                text.startswith((template.thinking_prefix, template.answer_prefix))
                or not template.answer_prefix
            ):
                before.append(0)
            else:
                before.append(sizes[0])
        last_is_answer = row.sample.messages[-1].role is Role.ASSISTANT
        return before, sizes[2] if last_is_answer else 0

    def video_knobs(self, model: Any, at: Any) -> list[Any] | None:
        """qwen-vl-utils' FPS, FPS_MAX_FRAMES and VIDEO_MAX_PIXELS (left out when VIDEO_MAX_TOKEN_NUM is
        set: compat_qwen_vl_utils then ignores it), where the template's video path is reproduced."""
        from vlmlint.models.knobs import (
            FPS_GRID,
            FPS_WORDS,
            FRAMES_GRID,
            FRAMES_WORDS,
            PATCHES_GRID,
            VideoKnob,
            grid_of,
            patches_words,
        )

        if self.video_template is None:
            return None
        mode = f"--pipeline {self.name}"
        constants = self.video_constants
        fps = constants["FPS"]
        max_frames = int(constants["FPS_MAX_FRAMES"])
        knobs = [
            VideoKnob("FPS", mode, fps, grid_of(FPS_GRID, fps), FPS_WORDS, at("FPS")),
            VideoKnob(
                "FPS_MAX_FRAMES", mode, max_frames,
                grid_of(FRAMES_GRID, max_frames, int(constants["FPS_MIN_FRAMES"])),
                f"{FRAMES_WORDS}, from FPS_MIN_FRAMES {int(constants['FPS_MIN_FRAMES'])}", at("FPS_MAX_FRAMES"),
            ),
        ]  # fmt: skip
        if "VIDEO_MAX_TOKEN_NUM" not in self.options:
            factor = self.video_template[1] * int(constants["SPATIAL_MERGE_SIZE"])
            current = self.options.get(
                "VIDEO_MAX_PIXELS", int(constants["VIDEO_MAX_TOKEN_NUM"]) * factor * factor
            )
            low = int(constants["VIDEO_MIN_TOKEN_NUM"]) * factor * factor
            knobs.append(
                VideoKnob(
                    "VIDEO_MAX_PIXELS", mode, current,
                    grid_of((n * factor * factor for n in PATCHES_GRID), current, low),
                    f"pixels per frame (VIDEO_MAX_TOKEN_NUM = VIDEO_MAX_PIXELS // {factor * factor}): "
                    f"{patches_words(factor)}, from VIDEO_MIN_TOKEN_NUM's {low}",
                    at("VIDEO_MAX_PIXELS"),
                )
            )  # fmt: skip
        return knobs

    def image_size_option(self) -> tuple[str, int, int] | None:
        """`--max_pixels` when set (swift's rescale_image); unset, the processor's own knob sizes images."""
        return None if self.max_pixels is None else ("max_pixels", self.max_pixels, 1)

    def resize(self, height: int, width: int) -> tuple[int, int]:
        """swift's `rescale_image(img, max_pixels)`: the same aspect ratio at max_pixels, truncated."""
        if self.max_pixels is None or width * height <= self.max_pixels:
            return height, width
        ratio = width / height
        height_scaled = math.sqrt(self.max_pixels / ratio)
        return int(height_scaled), int(height_scaled * ratio)

    def _limit(self, encoder: TextEncoder) -> int | None:
        return self.max_length if self.max_length is not None else encoder.model.max_position_embeddings

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        limit = self._limit(encoder)
        label = f"{SWIFT_VERSION} (max_length {limit}, truncation_strategy {self.strategy})"
        assert result.seq_len is not None  # the engine asks only for counted rows
        before, after = self._extra(row, encoder)
        full = result.seq_len - sum(encoder.added_special_tokens()) + sum(before) + after
        if limit is None or full <= limit:  # under the limit: kept, no extra work
            return TrainerFate("kept", label, length=full)
        layout = row_layout(encoder, row, result.seq_len, self.rounds)
        if before or after:
            layout = _with_extra(
                layout, encoder, row, result.seq_len, self.rounds, before, after, self.template
            )
        if self.template is not None and self.template.protects_placeholder:
            layout = _placeholder_kept(layout)
        length = layout.length
        if length <= limit:
            return TrainerFate("kept", label, length=length)
        fix = (
            f"raise max_length to {length}, shrink the row's images (--pipeline-option max_pixels=...) "
            "or shorten its text"
        )
        if self.strategy == "raise":
            return TrainerFate(
                "raise",
                label,
                length=length,
                reason=(
                    f"MaxLengthError: Current length of row({length}) is larger than the max_length({limit}); "
                    "the run stops"
                ),
                fix=fix + ", or drop --strict to let ms-swift skip the row",
            )
        if self.strategy == "delete":
            return TrainerFate(
                "dropped",
                label,
                reason=(
                    f"the row's {length} tokens are over max_length {limit}: MaxLengthError is caught and the "
                    "row deleted (never trained)"
                ),
                fix=fix,
            )
        if self.template is not None and self.template.truncate_error and row.counts:
            reason = (
                f"the row's {length} tokens are over max_length {limit} and {self.template.name}'s "
                f"truncation of a row with images fails: {self.template.truncate_error}"
            )
            if self.strict:
                return TrainerFate("raise", label, length=length, reason=reason + "; the run stops", fix=fix)
            return TrainerFate(
                "dropped",
                label,
                reason=reason + "; the error is caught and the row skipped (never trained)",
                fix=fix,
            )
        return self._truncated(layout, limit, label)

    def _truncated(self, layout: Layout, limit: int, label: str) -> TrainerFate:
        """`Template._truncate`: every image token kept, the other tokens cut on one side."""
        side = self.strategy  # "left" or "right"
        protected = layout.image_tokens
        total_answer = layout.answer_tokens()
        if protected >= limit:  # the images alone fill max_length: nothing else is kept
            lost = total_answer
            length = protected
            where = (
                f"its {protected} image tokens alone reach max_length {limit}: only they are kept "
                f"(length {length}), every other token is cut"
            )
        else:
            cut = layout.protected_cut(limit - protected, side)
            if side == "right":
                lost = layout.answer_lost_past(cut)
            else:
                lost = layout.answer_lost_before(cut)
                # _truncate sets labels[0] = -100: the first kept token, when no image token comes before
                # the cut, is the one at the cut, and it is no label any more if it was an answer token.
                if not any(start < cut for start, _, _ in layout.images) and any(
                    start <= cut < end for start, end in layout.answers
                ):
                    lost += 1
            length = limit
            where = (
                f"{layout.length - limit} tokens are cut from the {side} to fit max_length {limit} "
                "(image tokens are kept)"
            )
        if lost:
            reason = f"{where}: {lost} of its {total_answer} answer tokens are lost"
            if not layout.exact:
                reason += " (answer positions approximated: the chat template renders history differently)"
        else:
            reason = f"{where}; no answer token is lost"
        fix = f"raise max_length to {layout.length}, or shrink the row's images or text"
        return TrainerFate("truncated", label, length=length, answer_tokens_lost=lost, reason=reason, fix=fix)


def _model_type(model: Any) -> str | None:
    """config.json's model_type of a model folder or built-in profile (None if unreadable)."""
    from pathlib import Path

    from vlmlint.models import _read_json
    from vlmlint.models.files import read_json_file
    from vlmlint.models.profiles import _data_dir

    try:
        if model.profile:
            config = read_json_file(str(Path(_data_dir()) / model.profile / "config.json"))
        else:
            config = _read_json(model.name, "config.json")
    except Exception:  # noqa: BLE001 (an unreadable config: no model_type)
        return None
    value = config.get("model_type") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def _token_sizes(encoder: TextEncoder, texts: tuple[str, ...]) -> list[int]:
    """Each text's token count as swift tokenizes a context of its own (no special tokens added)."""
    return [
        len(ids) if text else 0
        for text, ids in zip(texts, encoder.encode([t or "a" for t in texts]), strict=True)
    ]


def _with_extra(
    layout: Layout,
    encoder: TextEncoder,
    row: CountedRow,
    seq_len: int,
    rounds: Rounds,
    before: list[int],
    after: int,
    template: SwiftTemplate | None,
) -> Layout:
    """The chat template's layout with swift's own tokens added: `before[k]` tokens at the start of the k-th
    assistant turn's answer (trained with it), `after` at the end (the suffix, trained), and, for the
    dynamic EOS, the `dynamic_eos` tokens after each earlier trained answer counted as labels."""
    assert template is not None
    starts = [start for start, _ in row_layout(encoder, row, seq_len, "all_assistant").answers]
    if len(starts) != len(before):  # the answers' positions are unknown: only the length changes
        starts = []
    inserts = list(zip(starts, before, strict=False))

    def moved(position: int, token: bool = True) -> int:
        # a token at an insertion point comes after the inserted tokens; an exclusive end there does not
        return position + sum(n for start, n in inserts if start < position or (token and start == position))

    length = layout.length + sum(before) + after
    images = tuple((moved(start), moved(end, False), tokens) for start, end, tokens in layout.images)
    if rounds == "every_token":
        return Layout(length, ((1, length),), images)
    if not layout.exact or not starts:
        first = moved(layout.answers[0][0], False) if layout.answers else 0
        return Layout(length, ((first, length),), images, exact=False)
    answers = []
    for index, (start, end) in enumerate(layout.answers):
        last = index == len(layout.answers) - 1 and row.sample.messages[-1].role is Role.ASSISTANT
        end = moved(end, False) + (after if last else template.dynamic_eos)
        answers.append((moved(start, False), min(end, length)))  # the prefix is trained
    return Layout(length, tuple(answers), images)


def _placeholder_kept(layout: Layout) -> Layout:
    """Each image's placeholder token, just before its last run, kept by _truncate with the run: inside
    the span when the image has other runs before it, else the span's first position moves back by one."""
    images = tuple(
        (start - 1 if tokens == end - start else start, end, tokens + 1)
        for start, end, tokens in layout.images
    )
    return Layout(layout.length, layout.answers, images, layout.exact)
