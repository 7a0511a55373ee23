"""`--pipeline llamafactory`: what LLaMA-Factory 0.9.5's supervised fine-tuning does to each row.

Reproduced from the llamafactory 0.9.5 wheel on PyPI (src/llamafactory/...):

- image pre-resize, data/mm_plugin.py `MMPluginMixin._preprocess_image`: above `image_max_pixels`
  (default 768*768, hparams/model_args.py ProcessorArguments) scale both sides by
  sqrt(max / (w*h)) and truncate with int(); below `image_min_pixels` (32*32) scale up the same way.
  `Qwen2VLPlugin._preprocess_image` (inherited by Qwen3VLPlugin, Qwen2OmniPlugin and GLM4VPlugin) then
  raises a side below 28 to 28, and cuts an aspect ratio above 200 to 180 (width = height * 180, or
  the reverse). Images are opened with a plain
  `PIL.Image.open` (`_regularize_images`): no EXIF orientation, so orientations 5-8 count unrotated;
- the template, data/template.py: `Template._encode` encodes each turn on its own, and each of the
  turn's string slots with its own `tokenizer.encode(..., add_special_tokens=False)`; turn 0 carries
  the prefix and the system slot (the template's default_system when the row has none);
  `Llama2Template` (llava_next_mistral) puts the system text inside the first user slot;
  `ReasoningTemplate.encode_multiturn` (glm4v, glm4_5v, ernie_vl, qwen3_vl, qwen3_omni) removes the answers' thought blocks
  (`remove_thought`: all of them when enable_thinking is off, the earlier answers with mask_history
  unless preserve_thinking) and, to each pair whose answer names neither thought word (the last pair
  only with mask_history), adds the empty thought `add_thought()` encoded on its own: before the
  answer (trained) with enable_thinking (DataArguments' default True), else after the prompt;
  `efficient_eos` templates (the GLM ones) have no EOS in the assistant slot: supervised.py counts
  one EOS id from the start, appends it to the row (trained) and trains an EOS label at the start of
  each later prompt; get_template_and_fix_tokenizer refuses train_on_prompt with them;
- the placeholder expansion, `process_messages` of Qwen2VLPlugin / Qwen2OmniPlugin / GLM4VPlugin /
  ErnieVLPlugin / Llama4Plugin / LlavaPlugin / LlavaNextPlugin (GLM4VPlugin writes <|begin_of_image|>
  ... <|end_of_image|>, ErnieVLPlugin "Picture {n}:<|IMAGE_START|> ... <|IMAGE_END|>", n counting the
  row's images from 1; Llama4Plugin the processor's own `_prompt_split_image`, tiles and separators,
  as vlmlint's llama4 family expands it, each <|patch|> run an image span of its own):
  each "<image>" of the user and assistant turns (not the system prompt: `_validate_messages` counts
  only those turns and raises ValueError on a mismatch) becomes the image's tokens, as many as the
  transformers processor gives the pre-resized image (vlmlint's family count on the resized size);
- videos (templates qwen2_vl, qwen3_vl_nothink, qwen3_vl: `video_sampling` "llamafactory"; the other
  templates' rows with videos are not counted, VLM109; GLM4VPlugin's templates glm4v, glm4_5v and
  glm_ocr raise on every row with a video, as below), data/mm_plugin.py: `_get_video_sample_indices`
  keeps np.linspace(0, frames - 1, min(frames, video_maxlen, max(1, floor(stream duration *
  video_fps)))) of a clip whose header gives a frame count, else (MKV/WebM) the first video_maxlen
  frames; Qwen2VLPlugin._regularize_videos decodes them with PyAV (stored size, no rotation), pads an
  odd count by repeating the last frame and pre-resizes each frame as an image, with video_max_pixels /
  video_min_pixels (ProcessorArguments: 256*256, 16*16); the model's video processor gets them with no
  sampling (LfClip, lf_clip). process_messages writes the tokens from the stream header instead
  (`_get_qwen_video_grid_metadata`, when every video of the row is a file whose header gives a
  duration and a frame rate): the sampled indices, padded, which an MKV with a duration but no frame
  count gives as video_maxlen frames while the decoder yields fewer (a crash). Qwen2VLPlugin writes
  <|vision_start|> N x <|video_pad|> <|vision_end|>; Qwen3VLPlugin, per temporal group, "<t seconds>"
  (Qwen3VLProcessor._calculate_timestamps of the plugin's frames_indices) and <|vision_start|> ...
  <|vision_end|>, video 1's group count for every video and the timestamps of video_metadata[i], i the
  message's index (an IndexError for a video in a later message; a crash for videos of different
  lengths). The features always come from the decoded frames;
- GLM4VPlugin's videos (glm4v, glm4_5v, glm_ocr): `_get_mm_inputs` decodes and pre-resizes the frames as
  Qwen2VLPlugin does, then calls `video_processor(images=None, videos=..., video_metadata=[{"fps": 2,
  "duration": ..., "total_frames": ...}])`. On transformers 5.24 (and 5.6.0, the newest 0.9.5 allows:
  the same typed kwargs check) Glm4vVideoProcessor / Glm46VVideoProcessor raise TypeError on the
  `images` keyword, so every row with a video stops the run ("raise", GLM_VIDEO_RAISES); VideoMetadata
  has no `total_frames` either, and the processor returns no `timestamps`, so a patched call would
  still write timestamp 0 after every frame group;
- Qwen2OmniPlugin's videos (qwen2_omni, qwen3_omni_nothink, qwen3_omni) are not counted (VLM109): the
  plugin always decodes (no header path) and hands Qwen2VLVideoProcessor the frames, which the
  qwen_omni family has no video hooks to count (its raw processor adds its own videos_kwargs); with
  `use_audio_in_video` the plugin interleaves audio chunks measured by the feature extractor on
  torchaudio-decoded samples, which no header gives;
- truncation, data/processor/supervised.py `SupervisedDatasetProcessor._encode_data_example` with
  `infer_seqlen` (data/processor/processor_utils.py): turn pairs (prompt, answer) are cut one after
  the other against what is left of `cutoff_len` (default 2048, hparams/data_args.py); the remaining
  pairs are dropped once nothing is left; `mask_history` walks the pairs from the last;
- packing (`PackedSupervisedDatasetProcessor`): DataArguments.__post_init__ lowers cutoff_len by one,
  and rows are truncated as above before the packer's "Dropped lengthy example" test, which therefore
  never fires for these templates (no plugin here adds ids in process_token_ids);
- dropped rows: the converters (data/converter.py) skip a conversation whose turns do not alternate
  user/assistant from a user turn, or whose count is odd ("Invalid role tag", "Invalid message
  count"), and `preprocess_dataset` drops an example without an answer ("Dropped invalid example").

A cut inside an image's (or video's) tokens, or past a whole one, is a crash: the collator still hands the row's
every image to the model (collator.py), whose check "Image features and image tokens do not match"
stops the run. tests/test_pipeline_llamafactory.py compares these predictions with LLaMA-Factory's own
code run on the fixture rows (docs/pipelines.md).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.models.base import CountError
from vlmlint.models.registry import families_for_template, trainer_template
from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.records import Message, Role, TrainerFate, VideoMeta

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models import Model
    from vlmlint.models.base import Family, VideoCount
    from vlmlint.records import RowResult

VERSION = "0.9.5"


class _Mark(str):
    """A {"bos_token"} / {"eos_token"} slot: one special id, never text (told apart by type, not value)."""


BOS, EOS = _Mark("bos_token"), _Mark("eos_token")


@dataclass(frozen=True)
class LfTemplate:
    """One data/template.py register_template call, reduced to what token counts need."""

    name: str
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    system: tuple[str, ...] = ("{{content}}",)
    prefix: tuple[str, ...] = ()
    default_system: str = ""
    plugin: str = "base"  # the mm_plugin: qwen2_vl, qwen3_vl, qwen2_omni, glm4v, ernie_vl, llama4, llava...
    image_token: str = "<image>"
    vision_bos: str = ""  # Qwen2VLPlugin wraps each image in <|vision_start|> ... <|vision_end|>
    vision_eos: str = ""
    image_label: str = ""  # ErnieVLPlugin writes "Picture {number}:" before each image (1-based, in the row)
    # The plugin writes the processor's own expansion (Llama4Plugin: processor._prompt_split_image), which
    # the family's expand() reproduces: its image_token is then the model's (the token its runs repeat).
    processor_expansion: bool = False
    fuse_system: bool = False  # Llama2Template: the system slot goes inside the first user slot
    # ReasoningTemplate: encode_multiturn removes thought blocks (remove_thought) and adds the empty one
    # (add_thought) to the answers that have none, as enable_thinking and preserve_thinking say.
    reasoning: bool = False
    thought_words: tuple[str, str] = ("<think>\n", "\n</think>\n\n")  # register_template's default
    # efficient_eos: the assistant slot has no EOS; _encode_data_example appends one EOS id to the row
    # (counted from the start against cutoff_len, and trained) and trains an EOS label at the start of
    # each later prompt; train_on_prompt is refused.
    efficient_eos: bool = False
    # The plugin whose video path vlmlint reproduces ("qwen2_vl": Qwen2VLPlugin, "qwen3_vl": Qwen3VLPlugin;
    # "": none, the row's videos are not counted) and the video token it repeats.
    video_plugin: str = ""
    video_token: str = ""
    # The plugin raises on every row with a video (GLM4VPlugin on transformers 5.x: GLM_VIDEO_RAISES).
    video_raises: bool = False

    def image_text(self, image: int) -> str:
        """What process_messages writes for the row's image `image`, its image token once."""
        label = self.image_label.replace("{number}", str(image + 1))
        return f"{label}{self.vision_bos}{self.image_token}{self.vision_eos}"

    @property
    def empty_thought(self) -> str:
        """Template.add_thought(): the text get_thought_word_ids encodes (one slot of its own)."""
        return self.thought_words[0] + self.thought_words[1]

    def has_thought(self, content: str) -> bool:
        """encode_multiturn's test: either stripped thought word in the answer's content."""
        return self.thought_words[0].strip() in content or self.thought_words[1].strip() in content

    def remove_thought(self, content: str) -> str:
        """Template.remove_thought: every thought block cut out, then leading newlines."""
        begin, end = (re.escape(word) for word in self.thought_words)
        return re.sub(f"{begin}(.*?){end}", "", content, flags=re.DOTALL).lstrip("\n")


# GLM4VPlugin._get_mm_inputs (0.9.5) calls `video_processor(images=None, videos=frames,
# video_metadata=[{"fps": 2, "duration": ..., "total_frames": ...}])`: the video processor's typed
# kwargs check (transformers 5.24; 5.6.0, the newest LLaMA-Factory 0.9.5 allows, has it too) refuses
# `images` before any frame is processed, and VideoMetadata has no `total_frames` field either.
GLM_VIDEO_RAISES = "TypeError: {processor}InitKwargs.__init__() got an unexpected keyword argument 'images'"

_CHATML_USER = ("<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n",)
_CHATML_ASSISTANT = ("{{content}}<|im_end|>\n",)
_CHATML_SYSTEM = ("<|im_start|>system\n{{content}}<|im_end|>\n",)
_GLM_USER = ("<|user|>\n{{content}}<|assistant|>",)
_GLM_ASSISTANT = ("\n{{content}}",)
_GLM_SYSTEM = ("<|system|>\n{{content}}",)
_VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)

TEMPLATES: dict[str, LfTemplate] = {
    t.name: t
    for t in (
        LfTemplate(
            "qwen2_vl",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            default_system="You are a helpful assistant.",
            plugin="qwen2_vl",
            image_token="<|image_pad|>",
            vision_bos="<|vision_start|>",
            vision_eos="<|vision_end|>",
            video_plugin="qwen2_vl",
            video_token="<|video_pad|>",
        ),
        LfTemplate(
            "qwen3_vl_nothink",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            plugin="qwen3_vl",
            image_token="<|image_pad|>",
            vision_bos="<|vision_start|>",
            vision_eos="<|vision_end|>",
            video_plugin="qwen3_vl",
            video_token="<|video_pad|>",
        ),
        LfTemplate(
            "qwen3_vl",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            plugin="qwen3_vl",
            image_token="<|image_pad|>",
            vision_bos="<|vision_start|>",
            vision_eos="<|vision_end|>",
            reasoning=True,
            video_plugin="qwen3_vl",
            video_token="<|video_pad|>",
        ),
        LfTemplate(
            "qwen2_omni",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            default_system="You are a helpful assistant.",
            plugin="qwen2_omni",
            image_token="<|IMAGE|>",
            vision_bos="<|vision_bos|>",
            vision_eos="<|vision_eos|>",
        ),
        LfTemplate(
            "qwen3_omni_nothink",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            plugin="qwen2_omni",  # get_mm_plugin names no vision tokens: Qwen2VLPlugin's defaults
            image_token="<|image_pad|>",
            vision_bos="<|vision_start|>",
            vision_eos="<|vision_end|>",
        ),
        *(
            LfTemplate(
                name,
                _GLM_USER,
                _GLM_ASSISTANT,
                _GLM_SYSTEM,
                prefix=("[gMASK]<sop>",),
                plugin="glm4v",
                image_token="<|image|>",
                vision_bos="<|begin_of_image|>",  # GLM4VPlugin.process_messages writes them itself
                vision_eos="<|end_of_image|>",
                reasoning=name != "glm_ocr",  # glm_ocr is a plain Template
                efficient_eos=True,
                video_raises=True,
            )
            # glm4v and glm4_5v differ in their tool formats only (tool turns are not counted)
            for name in ("glm4v", "glm4_5v", "glm_ocr")
        ),
        LfTemplate(
            "ernie_vl",
            ("User: {{content}}",),
            ("\nAssistant: {{content}}<|end_of_sentence|>",),
            ("{{content}}\n",),
            plugin="ernie_vl",
            image_token="<|IMAGE_PLACEHOLDER|>",
            vision_bos="<|IMAGE_START|>",
            vision_eos="<|IMAGE_END|>",
            image_label="Picture {number}:",
            reasoning=True,
        ),
        LfTemplate(
            "llama4",
            (
                "<|header_start|>user<|header_end|>\n\n{{content}}<|eot|><|header_start|>assistant<|header_end|>\n\n",
            ),
            ("{{content}}<|eot|>",),
            ("<|header_start|>system<|header_end|>\n\n{{content}}<|eot|>",),
            prefix=(BOS,),
            plugin="llama4",
            image_token="<|patch|>",  # the model's image_token_index; the plugin's "<|image|>" is one marker
            processor_expansion=True,
        ),
        LfTemplate(
            "qwen3_omni",
            _CHATML_USER,
            _CHATML_ASSISTANT,
            _CHATML_SYSTEM,
            plugin="qwen2_omni",
            image_token="<|image_pad|>",
            vision_bos="<|vision_start|>",
            vision_eos="<|vision_end|>",
            reasoning=True,
        ),
        LfTemplate(
            "llava",
            ("USER: {{content}} ASSISTANT:",),
            ("{{content}}", EOS),
            default_system=_VICUNA_SYSTEM,
            plugin="llava",
        ),
        LfTemplate(
            "llava_next",
            ("USER: {{content}} ASSISTANT:",),
            ("{{content}}", EOS),
            default_system=_VICUNA_SYSTEM,
            plugin="llava_next",
        ),
        LfTemplate(
            "llava_next_mistral",
            ("[INST] {{content}}[/INST]",),
            (" {{content}}", EOS),
            ("{{content}}\n\n",),
            prefix=(BOS,),
            plugin="llava_next",
            fuse_system=True,
        ),
    )
}


# The plugins whose _preprocess_image is Qwen2VLPlugin's (the subclasses that do not override it).
_QWEN2VL_PREPROCESS = frozenset({"qwen2_vl", "qwen3_vl", "qwen2_omni", "glm4v"})

# LLaMA-Factory 0.9.5's other multimodal templates (data/template.py, their checkpoints in
# extras/constants.py register_model_group): template -> (its mm_plugin class, what vlmlint would have to
# reproduce and does not yet). A row scanned with one of them is refused by name, never counted with
# another template's text.
NOT_REPRODUCED: dict[str, tuple[str, str]] = {
    "gemma3": ("Gemma3Plugin", "the Gemma 3 turns and the plugin's boi/eoi full_image_sequence"),
    "gemma3n": ("Gemma3nPlugin", "the Gemma 3n turns and the plugin's full_image_sequence"),
    "gemma4": (
        "Gemma4Plugin",
        "a ReasoningTemplate: the <|think|> system slot, the empty thought block "
        "after each prompt, replace_eos; and the plugin's <|image> ... <image|> expansion",
    ),
    "gemma4n": ("Gemma4Plugin", "as gemma4 (a ReasoningTemplate), with audio"),
    "minicpm_v": ("MiniCPMVPlugin", "the plugin's slice expansion and image ids"),
    "minicpm_v_4_6": ("MiniCPMV4_6Plugin", "the plugin's slice expansion and image ids"),
    "kimi_vl": ("KimiVLPlugin", "the Kimi-VL turns and the plugin's <|media_pad|> expansion"),
    "lfm2_vl": ("LFMVLPlugin", "the LFM2 turns and the plugin's tile and thumbnail expansion"),
    "intern_vl": ("InternVLPlugin", "the InternVL turns and the plugin's <img> ... </img> tile expansion"),
    "paligemma": ("PaliGemmaPlugin", "the plugin's image tokens before BOS and its token_type_ids"),
    "pixtral": ("PixtralPlugin", "the plugin's [IMG_BREAK] rows"),
    "mistral_small": ("PixtralPlugin", "the Mistral turns and the plugin's [IMG_BREAK] rows"),
    "mllama": ("MllamaPlugin", "the Llama 3 header turns and the plugin's cross-attention image token"),
    "granite3_vision": ("LlavaNextPlugin", "the Granite 3 turns"),
}
# The templates LLaMA-Factory 0.9.5 registers for a processor class's checkpoints (register_model_group),
# the first the default: named in the refusal when vlmlint reproduces none for the model's family.
REGISTERED: dict[str, tuple[str, ...]] = {
    "Gemma3Processor": ("gemma3",),
    "Gemma3nProcessor": ("gemma3n",),
    "Gemma4Processor": ("gemma4", "gemma4n"),
    "Glm4vProcessor": ("glm4v", "glm4_5v", "glm_ocr"),
    "Glm46VProcessor": ("glm4_5v",),
    "MiniCPMV4_6Processor": ("minicpm_v_4_6",),
    "KimiVLProcessor": ("kimi_vl",),
    "Llama4Processor": ("llama4",),
    "Lfm2VlProcessor": ("lfm2_vl",),
    "Ernie4_5_VLMoeProcessor": ("ernie_vl",),
    "Qwen2_5OmniProcessor": ("qwen2_omni",),
    "Qwen3OmniMoeProcessor": ("qwen3_omni_nothink", "qwen3_omni"),
    "InternVLProcessor": ("intern_vl",),
    "PaliGemmaProcessor": ("paligemma",),
    "PixtralProcessor": ("pixtral", "mistral_small"),
    "MllamaProcessor": ("mllama",),
}


def _not_reproduced(template: str) -> str:
    plugin, what = NOT_REPRODUCED[template]
    return (
        f"LLaMA-Factory {VERSION}'s template {template} ({plugin}) is not reproduced by vlmlint yet ({what}); "
        "scan without --pipeline for the processor's own counts"
    )


def _known_templates() -> str:
    return ", ".join(
        f"{name} ({', '.join(families_for_template(LlamaFactoryPipeline.name, name)) or 'no family'})"
        for name in TEMPLATES
    )


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """data/processor/processor_utils.py infer_seqlen (0.9.5), line for line."""
    if target_len * 2 < cutoff_len:  # truncate source
        max_target_len = cutoff_len
    elif source_len * 2 < cutoff_len:  # truncate target
        max_target_len = cutoff_len - source_len
    else:  # truncate both
        max_target_len = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target_len = min(max_target_len, target_len)
    max_source_len = max(cutoff_len - new_target_len, 0)
    new_source_len = min(max_source_len, source_len)
    return new_source_len, new_target_len


def preprocess_size(width: int, height: int, max_pixels: int, min_pixels: int, qwen: bool) -> tuple[int, int]:
    """The (width, height) _preprocess_image gives an image (MMPluginMixin, then Qwen2VLPlugin's)."""
    if width * height > max_pixels:
        factor = math.sqrt(max_pixels / (width * height))
        width, height = int(width * factor), int(height * factor)
    if 0 < width * height < min_pixels:  # 0: PIL refuses the resize above; the processor rejects it
        factor = math.sqrt(min_pixels / (width * height))
        width, height = int(width * factor), int(height * factor)
    if qwen and width and height:
        if min(width, height) < 28:
            width, height = max(width, 28), max(height, 28)
        if width / height > 200:
            width, height = height * 180, height
        if height / width > 200:
            width, height = width, width * 180
    return width, height


def _unsampled(settings: Any) -> Any:
    """The video processor's settings as LLaMA-Factory's call runs it: do_sample_frames off (the frames
    are sampled already)."""
    if dataclasses.is_dataclass(settings) and hasattr(settings, "do_sample_frames"):
        return dataclasses.replace(settings, do_sample_frames=False)
    return settings


def calculate_timestamps(
    indices: list[float] | tuple[float, ...], fps: float, merge_size: int
) -> list[float]:
    """Qwen3VLProcessor._calculate_timestamps (transformers 5.24), which Qwen3VLPlugin calls with the
    plugin's frames_indices, video_fps and the video processor's merge_size."""
    indices = list(indices)
    if len(indices) % merge_size != 0:
        indices.extend(indices[-1] for _ in range(merge_size - len(indices) % merge_size))
    times = [index / fps for index in indices]
    return [(times[i] + times[i + merge_size - 1]) / 2 for i in range(0, len(times), merge_size)]


def lf_sample_indices(meta: VideoMeta, video_fps: float, video_maxlen: int) -> list[int]:
    """MMPluginMixin._get_video_sample_indices: the frame indices kept from a clip's stream header."""
    total = meta.header_frames
    if total == 0:  # "infinite video" (MKV/WebM write no frame count): the first video_maxlen frames
        return list(range(video_maxlen))
    if meta.stream_duration is None:
        raise CountError(
            "LLaMA-Factory's _get_video_sample_indices multiplies the stream's duration, which this "
            "clip's header does not give: TypeError"
        )
    import numpy as np  # the plugin's own np.linspace(...).astype(np.int32): the same indices

    wanted = max(1, math.floor(meta.stream_duration * video_fps))
    count = min(total, video_maxlen, wanted)
    return [int(index) for index in np.linspace(0, total - 1, count).astype(np.int32)]


@dataclass(frozen=True)
class LfClip:
    """One video as Qwen2VLPlugin (and Qwen3VLPlugin) take it.

    `decoded`: the frames _regularize_videos hands to the video processor (the decoded frames whose
    index was sampled, padded to even by repeating the last), the features' frames; `header`: the
    frames `_get_qwen_video_grid_metadata` counts from the stream header instead of decoding (the
    sampled indices, padded), None where the header gives no duration or frame rate, or for a frame
    list; (`width`, `height`): after the video pre-resize (the stream's stored size: PyAV's to_image
    applies no rotation); `frame_times`: the plugin's frames_indices (Qwen3-VL's timestamps, in
    video_fps units).
    """

    decoded: int
    header: int | None
    width: int
    height: int
    frame_times: tuple[float, ...]
    mode: str
    capped: str | None = None

    def as_decoded(self, meta: VideoMeta) -> VideoMeta:
        return self._as(meta, self.decoded)

    def as_header(self, meta: VideoMeta) -> VideoMeta:
        return self._as(meta, self.header or self.decoded)

    def _as(self, meta: VideoMeta, frames: int) -> VideoMeta:
        """The frames as the video processor gets them: a list of pre-resized images, sampled already."""
        return dataclasses.replace(
            meta, frames=frames, width=self.width, height=self.height, rotation=0, content_fps=None
        )


def lf_clip(meta: VideoMeta, video_fps: float, video_maxlen: int, max_pixels: int, min_pixels: int) -> LfClip:
    """Qwen2VLPlugin._regularize_videos and _get_qwen_video_stream_metadata (0.9.5) on header facts."""
    width, height = preprocess_size(meta.width, meta.height, max_pixels, min_pixels, True)
    settings = f"video_fps {video_fps:g}, video_maxlen {video_maxlen}"
    capped = None
    if meta.frames_from == "frame list":  # "we assume already sample frames from videos"
        kept, header = meta.frames, None
        frame_times: tuple[float, ...] = tuple(range(kept))
        mode = f"LLaMA-Factory {VERSION}: every frame of the list"
    else:
        indices = lf_sample_indices(meta, video_fps, video_maxlen)
        if meta.fps is None:
            raise CountError("LLaMA-Factory reads the stream's average_rate, which this clip does not give")
        kept = len(set(indices) & set(range(meta.frames)))  # `if frame_idx in sample_indices`
        header = len(indices) if meta.stream_duration is not None else None
        frame_times = tuple(index / meta.fps * video_fps for index in indices)
        if meta.header_frames == 0:
            mode = f"LLaMA-Factory {VERSION} ({settings}): no frame count in the header, the first {kept}"
            if meta.frames > video_maxlen:
                capped = f"no frame count in the header: video_maxlen {video_maxlen} keeps the first {kept} of {meta.frames} frames"
        else:
            mode = f"LLaMA-Factory {VERSION} ({settings}): {kept} of {meta.frames} frames"
            assert meta.stream_duration is not None
            wanted = math.floor(meta.stream_duration * video_fps)
            if wanted > video_maxlen and meta.frames > video_maxlen:
                capped = (
                    f"video_fps {video_fps:g} over {meta.stream_duration:.1f} s asks for {wanted} frames; "
                    f"video_maxlen {video_maxlen} keeps {kept}"
                )
    if kept == 0:
        raise CountError("LLaMA-Factory decodes no frame of this clip")
    pad = kept % 2  # `if len(frames) % 2 != 0: frames.append(frames[-1])`
    if pad:
        mode += ", padded to even"
    if (width, height) != (meta.width, meta.height):
        mode += f", pre-resized to {width}x{height}"
    header = None if header is None else header + header % 2
    return LfClip(kept + pad, header, width, height, frame_times, mode, capped)


@dataclass(frozen=True)
class _Turn:
    """One encoded message: its length with images expanded, and each image's [start, end) in it."""

    length: int
    images: tuple[tuple[int, int, int], ...]  # (image index, start, end) of each run of its image token


def _option(options: Mapping[str, Any], key: str, default: Any, kind: type) -> Any:
    value = options.get(key, default)
    if kind is bool and value in (0, 1) and not isinstance(value, bool):
        value = bool(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise PipelineError(f"--pipeline llamafactory: {key} must be {kind.__name__}, got {value!r}")
    return value


class LlamaFactoryPipeline(Pipeline):
    """LLaMA-Factory 0.9.5, stage sft: its image pre-resize, template, truncation and row drops."""

    name: ClassVar[str] = "llamafactory"
    trainer: ClassVar[str] = f"LLaMA-Factory {VERSION}"
    option_names: ClassVar[tuple[str, ...]] = (
        "cutoff_len",
        "image_max_pixels",
        "image_min_pixels",
        "packing",
        "neat_packing",
        "template",
        "train_on_prompt",
        "mask_history",
        "enable_thinking",
        "preserve_thinking",
        "video_max_pixels",
        "video_min_pixels",
        "video_fps",
        "video_maxlen",
    )
    exif_transpose: ClassVar[bool] = False  # _regularize_images: Image.open, no exif_transpose

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = self.options
        self.cutoff_len = _option(o, "cutoff_len", 2048, int)
        self.max_pixels = _option(o, "image_max_pixels", 768 * 768, int)
        self.min_pixels = _option(o, "image_min_pixels", 32 * 32, int)
        self.neat_packing = _option(o, "neat_packing", False, bool)
        self.packing = _option(o, "packing", False, bool) or self.neat_packing
        self.train_on_prompt = _option(o, "train_on_prompt", False, bool)
        self.mask_history = _option(o, "mask_history", False, bool)
        # DataArguments' defaults; get_template_and_fix_tokenizer sets them on a ReasoningTemplate only
        self.enable_thinking = _option(o, "enable_thinking", True, bool)
        self.preserve_thinking = _option(o, "preserve_thinking", False, bool)
        # ProcessorArguments (hparams/model_args.py): the video pre-resize and sampling
        self.video_max_pixels = _option(o, "video_max_pixels", 256 * 256, int)
        self.video_min_pixels = _option(o, "video_min_pixels", 16 * 16, int)
        self.video_fps = _option(o, "video_fps", 2.0, float)
        self.video_maxlen = _option(o, "video_maxlen", 128, int)
        if self.video_max_pixels < 1 or self.video_min_pixels < 0 or self.video_maxlen < 1:
            raise PipelineError(
                "--pipeline llamafactory: video_max_pixels and video_maxlen must be >= 1, video_min_pixels >= 0"
            )
        if not self.video_fps > 0:
            raise PipelineError("--pipeline llamafactory: video_fps must be above 0")
        if self.video_max_pixels < self.video_min_pixels:  # model_args.py raises the same
            raise PipelineError(
                "--pipeline llamafactory: video_max_pixels cannot be smaller than video_min_pixels"
            )
        template = o.get("template")
        if template in NOT_REPRODUCED:
            raise PipelineError(f"--pipeline llamafactory: {_not_reproduced(template)}")
        if template is not None and template not in TEMPLATES:
            raise PipelineError(
                f"--pipeline llamafactory: template {template!r} is not reproduced; known: {', '.join(TEMPLATES)}"
            )
        self.template_name: str | None = template
        if self.cutoff_len < 2:
            raise PipelineError("--pipeline llamafactory: cutoff_len must be at least 2")
        if self.max_pixels < 1 or self.min_pixels < 0:
            raise PipelineError(
                "--pipeline llamafactory: image_max_pixels must be >= 1, image_min_pixels >= 0"
            )
        if self.max_pixels < self.min_pixels:  # model_args.py raises the same
            raise PipelineError(
                "--pipeline llamafactory: image_max_pixels cannot be smaller than image_min_pixels"
            )
        if self.mask_history and self.train_on_prompt:  # data_args.py raises the same
            raise PipelineError("--pipeline llamafactory: mask_history is incompatible with train_on_prompt")
        # DataArguments.__post_init__: `if self.packing: self.cutoff_len -= 1`.
        self.limit = self.cutoff_len - 1 if self.packing else self.cutoff_len
        self.template: LfTemplate | None = TEMPLATES.get(template) if template else None
        if self.template is not None:
            self._check_template(self.template)
        self._tokenizer: Any = None
        self._image_id: int | None = None
        self._video_id: int | None = None
        self._model: Model | None = None
        self._special_ids: dict[str, int | None] = {}

    # -- the model --------------------------------------------------------------------------------

    def bind(self, model: Model) -> None:
        family = model.family.name
        if self.template is None:
            self.template = TEMPLATES.get(self._default_template(model) or "")
        registered = REGISTERED.get(model.processor_class or "", ())
        if self.template is None and registered:
            others = f" (also registered: {', '.join(registered[1:])})" if registered[1:] else ""
            raise PipelineError(
                f"--pipeline llamafactory: {model.family.title} checkpoints train with "
                f"{_not_reproduced(registered[0])}{others}"
            )
        if self.template is None:
            raise PipelineError(
                f"--pipeline llamafactory: no LLaMA-Factory template is reproduced for {family} models "
                f"(the LLaMA-Factory {VERSION} templates vlmlint knows name none for {model.processor_class}); "
                f"vlmlint knows {_known_templates()}"
            )
        self._check_template(self.template)
        if self.template.name not in model.family.trainer_templates.get(self.name, ()):
            raise PipelineError(
                f"--pipeline llamafactory: template {self.template.name} is for "
                f"{', '.join(families_for_template(self.name, self.template.name))} models, not {family}"
            )
        tokenizer = model.tokenizer
        if tokenizer is None:
            raise PipelineError(f"--pipeline llamafactory: {model.name} has no tokenizer")
        self._tokenizer = tokenizer
        self._model = model
        self._image_id = _token_id(tokenizer, self.template.image_token)
        if self._image_id is None:
            raise PipelineError(
                f"--pipeline llamafactory: the tokenizer of {model.name} has no {self.template.image_token} "
                f"token (template {self.template.name})"
            )
        self._special_ids = {BOS: tokenizer.bos_token_id, EOS: tokenizer.eos_token_id}
        if self.template.video_plugin:
            self._video_id = _token_id(tokenizer, self.template.video_token)

    def _check_template(self, template: LfTemplate) -> None:
        if self.train_on_prompt and template.efficient_eos:  # get_template_and_fix_tokenizer raises the same
            raise PipelineError(
                f"--pipeline llamafactory: template {template.name} does not support train_on_prompt "
                "(efficient_eos): LLaMA-Factory raises ValueError"
            )

    @staticmethod
    def _default_template(model: Model) -> str | None:
        """The template LLaMA-Factory registers for the model (extras/constants.py register_model_group)."""
        return trainer_template(model.family, LlamaFactoryPipeline.name, model)

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["trainer"] = self._label()
        return described

    def _limit_text(self) -> str:
        return f"cutoff_len {self.cutoff_len}" + (", less 1 for packing" if self.packing else "")

    def _label(self) -> str:
        template = self.template.name if self.template else "by model"
        packing = ", packing" if self.packing else ""
        return f"LLaMA-Factory {VERSION} (template {template}, cutoff_len {self.cutoff_len}{packing})"

    # -- images -----------------------------------------------------------------------------------

    def image_size_option(self) -> tuple[str, int, int] | None:
        return "image_max_pixels", self.max_pixels, max(self.min_pixels, 1)

    def video_knobs(self, model: Any, at: Any) -> list[Any] | None:
        """video_fps, video_maxlen and video_max_pixels (the frames' pre-resize), where the template's
        Qwen video path is reproduced (video_sampling)."""
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

        if self.video_sampling is None:
            return None
        mode = f"--pipeline {self.name}"
        factor = model.video_settings.factor
        low = max(self.video_min_pixels, 1)
        return [
            VideoKnob("video_fps", mode, self.video_fps, grid_of(FPS_GRID, self.video_fps), FPS_WORDS,
                      at("video_fps")),
            VideoKnob("video_maxlen", mode, self.video_maxlen, grid_of(FRAMES_GRID, self.video_maxlen, 1),
                      FRAMES_WORDS, at("video_maxlen")),
            VideoKnob(
                "video_max_pixels", mode, self.video_max_pixels,
                grid_of((n * factor * factor for n in PATCHES_GRID), self.video_max_pixels, low),
                f"pixels per frame, the pre-resize: {patches_words(factor)}, from video_min_pixels {low}",
                at("video_max_pixels"),
            ),
        ]  # fmt: skip

    def resize(self, height: int, width: int) -> tuple[int, int]:
        qwen = self.template is not None and self.template.plugin in _QWEN2VL_PREPROCESS
        width, height = preprocess_size(width, height, self.max_pixels, self.min_pixels, qwen)
        return height, width

    # -- videos -----------------------------------------------------------------------------------

    @property
    def video_sampling(self) -> str | None:
        """ "llamafactory" where the template's plugin video path is reproduced (Qwen2VLPlugin,
        Qwen3VLPlugin), else None (the row's videos are not counted; VLM109 says why)."""
        template = self.template
        if template is None or not template.video_plugin:
            return None
        if self._tokenizer is not None and self._video_id is None:
            return None  # a tokenizer without the video token: the plugin's ids cannot be counted
        return self.name

    def clip(self, meta: VideoMeta) -> LfClip:
        """What Qwen2VLPlugin does to one clip (see lf_clip), with this run's video options."""
        return lf_clip(meta, self.video_fps, self.video_maxlen, self.video_max_pixels, self.video_min_pixels)

    def count_video(self, family: Family, meta: VideoMeta, settings: Any) -> VideoCount:
        """The clip as LLaMA-Factory's collator hands it to the model's video processor: the frames
        _regularize_videos decodes (sampled, padded to even) at their pre-resized size, the processor
        run without sampling (Qwen3VLPlugin passes do_sample_frames=False; Qwen2VLPlugin relies on
        Qwen2VLVideoProcessor's default, off). The family's formula counts them."""
        assert family.count_video is not None
        clip = self.clip(meta)
        count = family.count_video(clip.as_decoded(meta), _unsampled(settings))
        timestamps = count.timestamps
        if self.template is not None and self.template.video_plugin == "qwen3_vl":
            timestamps = tuple(calculate_timestamps(clip.frame_times, self.video_fps, settings.merge_size))
        # sampled_fps: Qwen2VLPlugin hands Qwen2.5-VL second_per_grid_ts from its own fps_per_video, not
        # reproduced: the row's largest M-RoPE position id is then not known (Qwen2-VL, Qwen3-VL: known)
        return dataclasses.replace(
            count, mode=clip.mode, timestamps=timestamps, capped=clip.capped, sampled_fps=None
        )

    def _video_expansions(
        self, row: CountedRow, result: RowResult, messages: tuple[Message, ...]
    ) -> tuple[list[tuple[str, tuple[int, ...]]], tuple[str, str] | None] | TrainerFate:
        """Each video's text as process_messages writes it (each run of its video token once) and the
        runs' lengths; and why the written tokens do not match the collator's features, with the fix
        (None: they match).

        The tokens come from the header path (`_get_qwen_video_grid_metadata`) when every video of
        the row is a file whose stream header gives a duration and a frame rate, else from the decoded
        frames (`_get_mm_inputs`), which is what the features always come from. Qwen3VLPlugin writes
        `num_frames` temporal groups for every video, the first video's (video_grid_thw[0][0], "hard
        code for now"), and the timestamps of video_metadata[i], i the index of the message that holds
        the placeholder: an IndexError where there are fewer videos, or fewer groups.
        """
        template, model = self.template, self._model
        assert template is not None and model is not None
        metas = [info.video for info in result.media if info.kind == "video"]
        if len(metas) != len(row.videos) or any(meta is None for meta in metas):
            return self._fate("raise", reason="the row's videos cannot be read")  # (the engine counts none)
        clips = [self.clip(meta) for meta in metas if meta is not None]
        count_video = model.family.count_video
        assert count_video is not None
        features = list(row.videos)
        written = features
        if all(clip.header is not None for clip in clips):
            try:
                written = [
                    count_video(clip.as_header(meta), _unsampled(model.video_settings))
                    for clip, meta in zip(clips, metas, strict=True)
                    if meta is not None
                ]
            except CountError as exc:
                return self._fate("raise", reason=f"LLaMA-Factory's header path for the video raises: {exc}")
        bos, eos, token = template.vision_bos, template.vision_eos, template.video_token
        expansions: list[tuple[str, tuple[int, ...]]] = []
        if template.video_plugin == "qwen2_vl":
            expansions = [(f"{bos}{token}{eos}", (count.tokens,)) for count in written]
        else:
            merge = model.video_settings.merge_size
            groups = written[0].grid[0]
            holders = [
                index
                for index, message in enumerate(messages)
                for part in message.parts
                if part.media == "video"
            ]
            for position, (count, holder) in enumerate(zip(written, holders, strict=True)):
                if holder >= len(clips):
                    return self._fate(
                        "raise",
                        reason=f"video {position + 1} sits in message {holder + 1}, and Qwen3VLPlugin reads the "
                        f"timestamps of video_metadata[{holder}] (the message's index) of {len(clips)} video(s): "
                        "IndexError: list index out of range",
                        fix="put the <video> placeholders in the first message, or train with qwen2_vl's plugin",
                    )
                times = calculate_timestamps(clips[holder].frame_times, self.video_fps, merge)
                if len(times) < groups:
                    return self._fate(
                        "raise",
                        reason=f"Qwen3VLPlugin writes {groups} temporal groups (video 1's) for video {position + 1}, "
                        f"whose timestamps (video_metadata[{holder}]) have {len(times)}: IndexError",
                        fix="give the row's videos the same sampled length",
                    )
                per_group = count.grid[1] * count.grid[2] // merge**2
                text = "".join(f"<{times[group]:.1f} seconds>{bos}{token}{eos}" for group in range(groups))
                expansions.append((text, (per_group,) * groups))
        tokens = sum(sum(runs) for _, runs in expansions)
        wanted = sum(count.tokens for count in features)
        if tokens == wanted:
            return expansions, None
        why, fix = self._written_why(clips, written is not features)
        reason = (
            f"LLaMA-Factory writes {tokens} video tokens for the row's {len(features)} video(s) ({why}), "
            f'the decoded frames give {wanted} features: "Video features and video tokens do not match"'
        )
        return expansions, (reason, fix)

    @staticmethod
    def _written_why(clips: list[LfClip], header_path: bool) -> tuple[str, str]:
        """Why LLaMA-Factory's written video tokens differ from the features, and the fix, in words."""
        for position, clip in enumerate(clips, start=1):
            if header_path and clip.header != clip.decoded:
                return (
                    f"video {position}: the stream header path counts {clip.header} frames, the decoder "
                    f"gives {clip.decoded}",
                    "remux the clip to MP4 (a header with its frame count): ffmpeg -i IN -c copy OUT.mp4",
                )
        return (
            "Qwen3VLPlugin writes video 1's temporal groups for every video",
            "give the row's videos the same sampled length, or one video per row",
        )

    # -- rows -------------------------------------------------------------------------------------

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        if self.template is None:
            self.bind(encoder.model)
        messages = row.sample.messages
        system = ""
        if messages and messages[0].role is Role.SYSTEM:
            system, messages = _text(messages[0]), messages[1:]
            if any(part.is_image or part.media for part in row.sample.messages[0].parts):
                kind = "image" if any(part.is_image for part in row.sample.messages[0].parts) else "video"
                return self._fate(
                    "raise",
                    reason=f"an <{kind}> placeholder in the system prompt: LLaMA-Factory expands and counts "
                    "placeholders in the user and assistant turns only, and raises ValueError (The number "
                    f"of {kind}s does not match the number of <{kind}> tokens)",
                    fix=f"move the <{kind}> placeholder into the first user turn",
                )
        problem = _invalid_turns(messages)
        if problem:
            return self._fate(
                "dropped",
                reason=f"LLaMA-Factory skips the row ({problem}); it never trains",
                fix="make the turns alternate user/assistant, from a user turn to an assistant answer",
            )
        if self.template.video_raises and (
            any(info.kind == "video" for info in result.media)
            or any(part.media == "video" for message in messages for part in message.parts)
        ):
            return self._glm_video_raises()
        expansions = [self._expansion(index, count) for index, count in enumerate(row.counts)]
        mismatch = None
        if any(part.media == "video" for message in messages for part in message.parts):
            if not row.videos or self.video_sampling is None:
                return None  # the videos are not counted (VLM109): nothing to predict
            videos = self._video_expansions(row, result, messages)
            if isinstance(videos, TrainerFate):
                return videos
            expansions += videos[0]
            mismatch = videos[1]
        labels = [f"image {i + 1}" for i in range(len(row.counts))]
        labels += [f"video {i + 1}" for i in range(len(expansions) - len(row.counts))]
        counts = [sum(runs) for _, runs in expansions]
        slots = self._slots(messages, system, [text for text, _ in expansions], len(row.counts))
        present = {image for elements in slots for _, images in elements for image in images}
        removed = [image for image in range(len(counts)) if image not in present]
        if removed:
            label = labels[removed[0]]
            return self._fate(
                "crash",
                image_tokens_lost=sum(counts[image] for image in removed),
                reason=f"{label} sits inside a thought block of an answer, which "
                f"{self.template.name}'s encode_multiturn removes (remove_thought), but every image and video "
                'still goes to the model: "Image features and image tokens do not match"',
                fix=f"move the <{label.split()[0]}> placeholder out of the <think> block",
            )
        if mismatch is None and self._surely_fits(slots, counts):
            return self._fate("kept", reason=f"at most {self.limit} tokens")
        turns = self._encode(slots, [runs for _, runs in expansions], len(row.counts))
        fate = self._truncate(turns, counts, labels)
        if mismatch is not None and fate.status != "crash":
            fate = dataclasses.replace(fate, status="crash", reason=mismatch[0], fix=mismatch[1])
        return fate

    def _glm_video_raises(self) -> TrainerFate:
        """GLM4VPlugin's video call, which transformers 5.x's GLM video processors refuse (GLM_VIDEO_RAISES)."""
        settings = self._model.video_settings if self._model is not None else None
        processor = getattr(settings, "processor", None) or "Glm4vVideoProcessor"
        error = GLM_VIDEO_RAISES.format(processor=processor)
        return self._fate(
            "raise",
            reason=f"LLaMA-Factory {VERSION}'s GLM4VPlugin hands the row's videos to {processor} with "
            f"images=None, which transformers refuses: {error} (every row with a video stops the run; "
            "its video_metadata's total_frames is no VideoMetadata field either)",
            fix="train GLM on images only with LLaMA-Factory 0.9.5, or patch GLM4VPlugin._get_mm_inputs "
            "(no images=None; total_num_frames for total_frames)",
        )

    def _expansion(self, index: int, count: Any) -> tuple[str, tuple[int, ...]]:
        """The text process_messages writes for image `index`, each run of its image token written once,
        and those runs' lengths (one run, the image's tokens, unless the processor's expansion has several)."""
        template = self.template
        assert template is not None
        if not template.processor_expansion:
            return template.image_text(index), (count.tokens,)
        assert self._model is not None
        text, runs = [], []
        for segment in self._model.family.expand(count, self._model.settings):
            if isinstance(segment, str):
                text.append(segment)
            else:
                text.append(segment.token)
                runs.append(segment.count)
        return "".join(text), tuple(runs)

    def _fate(self, status: str, **fields: Any) -> TrainerFate:
        return TrainerFate(status=status, trainer=self._label(), **fields)  # type: ignore[arg-type]

    def _slots(
        self, messages: tuple[Message, ...], system: str, image_texts: list[str], first_video: int = 0
    ) -> list[list[tuple[str, tuple[int, ...]]]]:
        """Each turn's elements as Template._encode forms them: (text, images in it) or a BOS/EOS mark.

        An image is written as `image_texts` says (each run of its image token once, e.g. bos + one
        image token + eos); the runs' other tokens are added when counted.
        """
        template = self.template
        assert template is not None
        system = system or template.default_system
        contents = self._contents(messages, first_video)
        thought_after, thought_before = self._thoughts(contents)
        turns = []
        for index, (message, pieces) in enumerate(zip(messages, contents, strict=True)):
            text = "".join(piece if isinstance(piece, str) else image_texts[piece] for piece in pieces)
            images = [piece for piece in pieces if not isinstance(piece, str)]
            elements: list[tuple[str, tuple[int, ...]]] = []
            system_text = ""
            if index == 0:
                elements += [(slot, ()) for slot in template.prefix]
                if system:
                    applied = _apply(template.system, content=system)
                    if template.fuse_system:
                        system_text = applied[0]  # Llama2Template: format_system.apply(...)[0]
                    else:
                        elements += [(slot, ()) for slot in applied]
            if message.role is Role.USER:
                slots = _apply(template.user, content=system_text + text, idx=str(index // 2))
            else:
                slots = _apply(template.assistant, content=text)
            owner = tuple(images)
            if index in thought_before:  # enable_thinking: the empty thought opens the (trained) answer
                elements.append((template.empty_thought, ()))
            elements += [
                (slot, owner if "{{content}}" in raw else ())
                for slot, raw in zip(slots, _raw(template, message.role), strict=True)
            ]
            if index in thought_after:  # else it closes the prompt (not trained)
                elements.append((template.empty_thought, ()))
            turns.append(elements)
        return turns

    def _contents(self, messages: tuple[Message, ...], first_video: int = 0) -> list[list[str | int]]:
        """Each message's content as encode_multiturn encodes it: text pieces and media indices (the
        images from 0, then the videos from `first_video`, the row's image count).

        ReasoningTemplate.encode_multiturn removes the thought blocks of every answer when
        enable_thinking is off, and of the earlier answers with mask_history (unless preserve_thinking).
        """
        template = self.template
        assert template is not None
        contents: list[list[str | int]] = []
        image, video = 0, first_video
        for message in messages:
            pieces: list[str | int] = []
            for part in message.parts:
                if part.is_image:
                    pieces.append(image)
                    image += 1
                elif part.media == "video":
                    pieces.append(video)
                    video += 1
                else:
                    pieces.append(part.text)
            contents.append(pieces)
        if not template.reasoning:
            return contents
        discarding = self.mask_history and not self.preserve_thinking
        for index in range(1, len(contents), 2):
            if not self.enable_thinking or (discarding and index < len(contents) - 2):
                contents[index] = _without_thought(template, contents[index])
        return contents

    def _thoughts(self, contents: list[list[str | int]]) -> tuple[set[int], set[int]]:
        """Where encode_multiturn adds the empty thought: (prompts it closes, answers it opens).

        To each pair whose answer names neither thought word (with mask_history and not
        preserve_thinking, the last pair only): the answer with enable_thinking, else the prompt.
        """
        template = self.template
        assert template is not None
        if not template.reasoning or not contents:
            return set(), set()
        if self.mask_history and not self.preserve_thinking:
            pairs: range | list[int] = [len(contents) - 2]
        else:
            pairs = range(0, len(contents), 2)
        bare = [
            i
            for i in pairs
            if not template.has_thought("".join(p for p in contents[i + 1] if isinstance(p, str)))
        ]
        if self.enable_thinking:
            return set(), {i + 1 for i in bare}
        return set(bare), set()

    def _surely_fits(self, turns: list[list[tuple[str, tuple[int, ...]]]], counts: list[int]) -> bool:
        """True when the row cannot reach the limit, without tokenizing.

        Bound, for ASCII text: each slot is encoded alone (add_special_tokens=False); the tokenizer
        splits it at its k added tokens (1 id each, at least 1 character each) into k + 1 pieces, and
        a piece of n ASCII characters gives at most n + 1 ids (byte-level BPE: one byte or more per id;
        SentencePiece: one character or more per id, plus the "▁" prefix). So a slot of length L gives
        at most L + k + 1 <= 2L + 1 ids. BOS/EOS marks are one id; each image adds its tokens beyond
        the one written. If that total is within the limit, infer_seqlen keeps every pair whole (it
        cuts only when source + target exceed what is left), so the row is kept.
        """
        bound = sum(counts) - len(counts) + self.template.efficient_eos
        for elements in turns:
            for text, _ in elements:
                if isinstance(text, _Mark):
                    bound += 1
                elif not text.isascii():
                    return False
                else:
                    bound += 2 * len(text) + 1
        return bound <= self.limit

    def _encode(
        self,
        turns: list[list[tuple[str, tuple[int, ...]]]],
        runs: list[tuple[int, ...]],
        first_video: int | None = None,
    ) -> list[_Turn]:
        """Each turn's length and image spans (one per run of the image token): every string slot
        tokenized alone, in one batch."""
        texts = [text for elements in turns for text, _ in elements if not isinstance(text, _Mark) and text]
        encoded = (
            iter(self._tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"])
            if texts
            else iter(())
        )
        result = []
        for elements in turns:
            length = 0
            spans: list[tuple[int, int, int]] = []
            for text, items in elements:
                if isinstance(text, _Mark):
                    length += self._special_ids.get(text) is not None
                    continue
                if not text:
                    continue
                ids = next(encoded)
                written = [(image, run) for image in items for run in runs[image]]
                # each run at its token's next position (images: the image token; videos: the video token)
                token_of = [
                    self._image_id if first_video is None or image < first_video else self._video_id
                    for image, _ in written
                ]
                positions = {token: [i for i, t in enumerate(ids) if t == token] for token in set(token_of)}
                if all(len(positions[token]) == token_of.count(token) for token in positions):
                    ordered = {token: iter(found) for token, found in positions.items()}
                    at = [next(ordered[token]) for token in token_of]
                    extra = 0
                    for (image, run), position in sorted(zip(written, at, strict=True), key=lambda w: w[1]):
                        start = length + position + extra
                        spans.append((image, start, start + run))
                        extra += run - 1
                else:  # literal image or video tokens in the text: no spans
                    extra = sum(run - 1 for _, run in written)
                length += len(ids) + extra
            result.append(_Turn(length, tuple(spans)))
        return result

    def _truncate(
        self, turns: list[_Turn], counts: list[int], labels: list[str] | None = None
    ) -> TrainerFate:
        """SupervisedDatasetProcessor._encode_data_example's loop, on lengths instead of ids."""
        pairs = [(turns[i], turns[i + 1]) for i in range(0, len(turns), 2)]
        if self.mask_history:
            pairs = pairs[::-1]  # high priority for last turns
        eos = int(self.template.efficient_eos)  # the EOS id appended to the row, counted from the start
        total = eos
        full = sum(turn.length for turn in turns) + eos
        answer_lost = 0
        cut: dict[int, int] = {}  # image -> tokens cut
        for turn_idx, (source, target) in enumerate(pairs):
            if total >= self.limit:
                kept_source = kept_target = 0
                # efficient_eos: a later prompt's label starts with the EOS id, lost with the pair
                if eos and turn_idx != 0:
                    answer_lost += 1
            else:
                kept_source, kept_target = infer_seqlen(source.length, target.length, self.limit - total)
                total += kept_source + kept_target
            for turn, kept in ((source, kept_source), (target, kept_target)):
                for image, start, end in turn.images:
                    lost = end - max(start, kept) if kept < end else 0
                    if lost:
                        cut[image] = cut.get(image, 0) + lost
            trained_target = not (self.mask_history and turn_idx != 0)
            if trained_target:
                answer_lost += target.length - kept_target
            if self.train_on_prompt:
                answer_lost += source.length - kept_source
        image_lost = sum(cut.values())
        if image_lost:
            first = min(cut)
            labels = labels or [f"image {i + 1}" for i in range(len(counts))]
            which = f"{cut[first]} of {labels[first]}'s {counts[first]} tokens"
            if len(cut) > 1:
                which += f" and tokens of {len(cut) - 1} more image(s) or video(s)"
            return self._fate(
                "crash",
                length=total,
                answer_tokens_lost=answer_lost,
                image_tokens_lost=image_lost,
                reason=f"the {full}-token row is cut to {total} ({self._limit_text()}): {which} are "
                'cut, but every image still goes to the model: "Image features and image tokens do not match"',
                fix=f"raise cutoff_len to {full + (1 if self.packing else 0)}, lower image_max_pixels, or drop the row",
            )
        if total < full:
            return self._fate(
                "truncated",
                length=total,
                answer_tokens_lost=answer_lost,
                reason=f"the {full}-token row is cut to {total} ({self._limit_text()}, per turn): "
                f"{answer_lost} trained answer token(s) lost",
                fix=f"raise cutoff_len to {full + (1 if self.packing else 0)}, or shorten or split the conversation",
            )
        return self._fate("kept", length=total, reason=f"{total} tokens <= {self.limit}")


def _text(message: Message) -> str:
    return "".join(part.text for part in message.parts if not part.is_image)


def _apply(slots: tuple[str, ...], **values: str) -> list[str]:
    """StringFormatter.apply: in each string slot, each {{name}} replaced once, in keyword order."""
    applied = []
    for slot in slots:
        if not isinstance(slot, _Mark):
            for name, value in values.items():
                slot = slot.replace("{{" + name + "}}", value, 1)
        applied.append(slot)
    return applied


def _without_thought(template: LfTemplate, pieces: list[str | int]) -> list[str | int]:
    """remove_thought on a content whose images are marked (NUL, index, NUL): an image inside a removed
    block disappears from the text, as it does from LLaMA-Factory's expanded content."""
    text = "".join(piece if isinstance(piece, str) else f"\0{piece}\0" for piece in pieces)
    split = re.split("\0([0-9]+)\0", template.remove_thought(text))
    return [chunk if position % 2 == 0 else int(chunk) for position, chunk in enumerate(split) if chunk]


def _raw(template: LfTemplate, role: Role) -> tuple[str, ...]:
    return template.user if role is Role.USER else template.assistant


def _invalid_turns(messages: tuple[Message, ...]) -> str | None:
    """Why LLaMA-Factory's converter or processor skips these turns (after a leading system), or None."""
    for position, message in enumerate(messages):
        expected = Role.USER if position % 2 == 0 else Role.ASSISTANT
        if message.role is not expected:
            return f"turn {position + 1} is a {message.role.value} turn where a {expected.value} turn is due: Invalid role tag"
    if len(messages) % 2:
        return (
            f"{len(messages)} turns after the system prompt, an odd count: the last user turn has no answer"
        )
    if not messages:
        return "no turns: Dropped invalid example"
    return None


def _token_id(tokenizer: Any, token: str) -> int | None:
    found = tokenizer.convert_tokens_to_ids(token)
    if found is None or (found == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return int(found)
