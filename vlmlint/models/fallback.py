"""The real-processor fallback: count a row by calling the model's own processor on it.

For a processor class no family module claims, vlmlint builds the real transformers processor and,
per row, calls its `__call__` on the rendered text and the decoded images, with its own default
kwargs and `return_tensors="np"` (the defaults of some processors say "pt", which needs torch).
seq_len is len(input_ids); an image's tokens are the positions of input_ids that receive image
features: the model's image token ids from config.json (image_token_id / image_token_index, the ids
the model's forward looks up), else the processor's. So the count is the processor's own, whatever
`__call__` adds (prefixes, separators, BOS) and whichever token carries the features.

Processors that declare a video or audio sub-processor are built with that part absent where it
cannot load (torchvision or torchaudio missing): the image path never touches it. A processor that
reads a setting of its video processor in `__init__` (MiniCPM-V 4.6) gets a stand-in holding the
video processor's settings from its own files and class defaults, read without importing it.

Videos (issue 20, part 3): a processor whose video processor could be built (torch and torchvision
installed) has its row's videos counted the same way, by its own `__call__` with `videos=`: each clip
as transformers 5.24's default reader gives it (`BaseVideoProcessor.fetch_videos`,
transformers/video_utils.py: torchcodec, every frame, the fps over the frames' timestamps). Where
torchcodec cannot load, the frames are decoded with PyAV as `read_video_pyav` decodes them
(`to_ndarray(format="rgb24")`), turned upright, and handed over with the metadata torchcodec would give
(VideoMeta.as_torchcodec: the frames counted, the content fps); the video processor then samples them
itself (`do_sample_frames`, `fps`, `num_frames` on that metadata), as `_decode_and_sample_videos`
samples an array. A video's tokens are the positions of input_ids holding the model's video token.
Video-LLaMA3's use_token_compression drops patches by their pixel content: only this path counts it.
"""

from __future__ import annotations

import ast
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from vlmlint.models.base import CountError, Family, ImageCount, RowCount, no_knob
from vlmlint.models.video_config import read_optional_json as _read_json
from vlmlint.models.video_config import video_processor_config
from vlmlint.records import VideoMeta

# Sub-processors the image path never calls: built when they load, absent (a stand-in) when not.
OPTIONAL_PARTS = ("video_processor", "feature_extractor", "audio_processor", "audio_tokenizer")
# Keys of config.json (and its text_config) that name the token the model puts image features on.
IMAGE_TOKEN_ID_KEYS = ("image_token_id", "image_token_index", "image_patch_id", "img_context_token_id")
# ... and the video token.
VIDEO_TOKEN_ID_KEYS = ("video_token_id", "video_token_index")


class FallbackRefused(Exception):
    """The processor cannot run here; the message says which component needs what."""


class AbsentPart:
    """Stands for a sub-processor that could not be built here (e.g. a video processor without torchvision).

    Its settings (from its own config file and class defaults) can be read, as some processors read
    them in `__init__`; any use beyond that raises, naming what is missing.
    """

    def __init__(self, attribute: str, reason: str, settings: dict[str, Any]):
        self.__dict__["_attribute"] = attribute
        self.__dict__["_reason"] = reason
        self.__dict__.update(settings)

    def __getattr__(self, name: str) -> Any:
        # AttributeError, so that getattr(part, name, default) still answers the default
        raise AttributeError(f"{self._attribute}.{name} is needed here, but {self._reason}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise CountError(f"the processor's {self._attribute} is needed here, but {self._reason}")

    def to_dict(self) -> dict[str, Any]:
        return {}


@cache
def _transformers_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent


def _class_defaults(class_name: str | None, prefix: str) -> dict[str, Any]:
    """Literal class attributes of a transformers class, read from its source (never imported).

    `class_name` None: the first class of the module whose name ends in VideoProcessor.
    """
    for path in sorted((_transformers_dir() / "models").glob(f"*/{prefix}*.py")):
        source = path.read_text(encoding="utf-8")
        if class_name is not None and f"class {class_name}(" not in source:
            continue
        for node in ast.parse(source).body:
            if not isinstance(node, ast.ClassDef):
                continue
            if node.name == class_name or (class_name is None and node.name.endswith("VideoProcessor")):
                values: dict[str, Any] = {}
                for statement in node.body:
                    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                        target, value = statement.targets[0], statement.value
                    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                        target, value = statement.target, statement.value
                    else:
                        continue
                    if isinstance(target, ast.Name):
                        try:
                            values[target.id] = ast.literal_eval(value)
                        except ValueError:
                            pass
                return values
    return {}


def _absent_settings(folder: str, attribute: str, processor_dict: dict[str, Any], model_type: str | None):
    """An absent video processor's settings: class defaults, then its config file, as from_pretrained."""
    if attribute != "video_processor":
        return {}
    class_name, settings, _ = video_processor_config(folder, processor_dict, model_type)
    if class_name is None and model_type:  # no mapping: the model's own video processing module
        settings = {**_class_defaults(None, f"video_processing_{model_type}"), **settings}
    return settings


def _missing_backends() -> list[str]:
    from transformers.utils import is_torch_available, is_torchaudio_available, is_torchvision_available

    backends = (
        ("torch", is_torch_available()),
        ("torchvision", is_torchvision_available()),
        ("torchaudio", is_torchaudio_available()),
    )
    return [name for name, available in backends if not available]


def processor_class(name: str, class_name: str, trust_remote_code: bool) -> type:
    """The processor class a folder names: transformers' own, or its remote code when trusted."""
    import transformers

    if trust_remote_code:
        auto_map = _read_json(name, "processor_config.json").get("auto_map") or {}
        auto_map = auto_map or (_read_json(name, "preprocessor_config.json").get("auto_map") or {})
        reference = auto_map.get("AutoProcessor") if isinstance(auto_map, dict) else None
        if reference:
            from transformers.dynamic_module_utils import get_class_from_dynamic_module

            return get_class_from_dynamic_module(reference, name)
    try:
        cls = getattr(transformers, class_name)
    except (AttributeError, ImportError) as exc:
        raise FallbackRefused(
            f"transformers {transformers.__version__} has no processor class {class_name!r} ({exc})"
        ) from None
    if not isinstance(cls, type):
        raise FallbackRefused(
            f"processor class {class_name!r} cannot be imported here: {_missing_backends() or 'unknown reason'}"
        )
    return cls


def build_processor(name: str, class_name: str, trust_remote_code: bool, model_type: str | None) -> Any:
    """The real processor, with the sub-processors the image path never uses absent where they cannot load."""
    from transformers.processing_utils import _get_modality_for_attribute

    cls = processor_class(name, class_name, trust_remote_code)
    absent: dict[str, str] = {}

    class Lenient(cls):  # type: ignore[misc, valid-type]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if isinstance(argument, AbsentPart):
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

        def to_dict(self) -> dict[str, Any]:  # serialised without its stand-ins (repr and logging use it)
            stand_ins = {k: v for k, v in self.__dict__.items() if isinstance(v, AbsentPart)}
            for key in stand_ins:
                del self.__dict__[key]
            try:
                return super().to_dict()
            finally:
                self.__dict__.update(stand_ins)

        @classmethod
        def _get_arguments_from_pretrained(klass, path, processor_dict=None, **kwargs):
            arguments = []
            loader = cls._get_arguments_from_pretrained.__func__
            for attribute in cls.get_attributes():
                one = type(cls.__name__, (cls,), {"get_attributes": classmethod(lambda c, a=attribute: [a])})
                try:
                    arguments.extend(loader(one, path, processor_dict, **kwargs))
                except Exception as exc:
                    modality = _get_modality_for_attribute(attribute)
                    if modality not in OPTIONAL_PARTS:
                        raise FallbackRefused(_component_reason(attribute, exc)) from None
                    reason = _component_reason(attribute, exc)
                    absent[attribute] = reason
                    settings = _absent_settings(path, attribute, processor_dict or {}, model_type)
                    arguments.append(AbsentPart(attribute, reason, settings))
            return arguments

        @classmethod
        def _resolve_subprocessors(klass, path, processor_dict, **kwargs):
            # transformers 5.25 (processing_utils.py ProcessorMixin.from_pretrained) loads the parts here,
            # into processor_dict, instead of _get_arguments_from_pretrained: the same leniency, per part.
            resolver = cls._resolve_subprocessors.__func__
            settings_dict = dict(processor_dict)
            for attribute in [key for key, value in kwargs.items() if isinstance(value, AbsentPart)]:
                processor_dict[attribute] = kwargs.pop(attribute)  # passed in by build_processor's retry
            rest = dict(kwargs)
            for attribute in cls.get_attributes():
                if isinstance(processor_dict.get(attribute), AbsentPart):
                    continue
                one = type(cls.__name__, (cls,), {"get_attributes": classmethod(lambda c, a=attribute: [a])})
                try:
                    processor_dict, left = resolver(one, path, processor_dict, **kwargs)
                except Exception as exc:
                    if _get_modality_for_attribute(attribute) not in OPTIONAL_PARTS:
                        raise FallbackRefused(_component_reason(attribute, exc)) from None
                    reason = _component_reason(attribute, exc)
                    absent[attribute] = reason
                    settings = _absent_settings(path, attribute, settings_dict, model_type)
                    processor_dict[attribute] = AbsentPart(attribute, reason, settings)
                    continue
                rest = {key: value for key, value in rest.items() if key in left}  # what a part used is gone
            return processor_dict, rest

    Lenient.__name__ = cls.__name__
    Lenient.__qualname__ = cls.__qualname__
    supplied: dict[str, AbsentPart] = {}
    for retry in (False, True):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                processor = Lenient.from_pretrained(name, trust_remote_code=trust_remote_code, **supplied)
            break
        except FallbackRefused:
            raise
        except Exception as exc:
            if retry or not _loads_its_own_video_processor(cls):
                raise FallbackRefused(
                    f"{class_name} could not be built: {type(exc).__name__}: {exc}"
                ) from None
            # transformers 5.25's Ernie4_5_VLMoeProcessor.from_pretrained builds its video processor itself,
            # before _resolve_subprocessors, unless one is passed in: pass the stand-in and build again.
            reason = _component_reason("video_processor", exc)
            absent["video_processor"] = reason
            config = _read_json(name, "processor_config.json")
            settings = _absent_settings(name, "video_processor", config, model_type)
            supplied = {"video_processor": AbsentPart("video_processor", reason, settings)}
    processor._vlmlint_absent = absent  # which parts are stand-ins, and why (for the notice)
    return processor


def _loads_its_own_video_processor(cls: type) -> bool:
    """A processor class (5.25+: _resolve_subprocessors) whose own from_pretrained builds the video processor."""
    from transformers.processing_utils import ProcessorMixin

    own = getattr(cls.from_pretrained, "__func__", None) is not ProcessorMixin.from_pretrained.__func__
    return own and hasattr(cls, "_resolve_subprocessors") and "video_processor" in cls.get_attributes()


def _component_reason(attribute: str, exc: BaseException) -> str:
    """Why one sub-processor could not be built, in words a user can act on."""
    text = f"{type(exc).__name__}: {exc}"
    for backend in ("torchvision", "torchaudio", "torch"):
        if backend in text.lower():
            install = "torch" if backend == "torch" else f"torch {backend}"
            return f"its {attribute} needs {backend} (pip install {install})"
    missing = _missing_backends()
    if missing and isinstance(exc, (ImportError, AttributeError, TypeError)):
        return f"its {attribute} could not be built without {', '.join(missing)} ({text})"
    return f"its {attribute} could not be built ({text})"


def image_token_ids(processor: Any, model_config: dict[str, Any]) -> frozenset[int]:
    """The ids input_ids carries where the model puts image features: config.json first, then the processor."""
    found: set[int] = set()
    for section in (
        model_config,
        model_config.get("text_config") or {},
        model_config.get("vision_config") or {},
    ):
        if not isinstance(section, dict):
            continue
        for key in IMAGE_TOKEN_ID_KEYS:
            value = section.get(key)
            if isinstance(value, int) and value >= 0:
                found.add(value)
        if found:
            break
    if found:
        return frozenset(found)
    return _processor_token_id(processor, "image")


def _processor_token_id(processor: Any, kind: str) -> frozenset[int]:
    """The processor's `{kind}_token_id`, else its `{kind}_token` through the tokenizer (not unk); empty
    when it names neither."""
    value = getattr(processor, f"{kind}_token_id", None)
    if isinstance(value, int) and value >= 0:
        return frozenset({value})
    token = getattr(processor, f"{kind}_token", None)
    tokenizer = getattr(processor, "tokenizer", None)
    if isinstance(token, str) and token and tokenizer is not None:
        value = tokenizer.convert_tokens_to_ids(token)
        if isinstance(value, int) and value != getattr(tokenizer, "unk_token_id", None):
            return frozenset({value})
    return frozenset()


@dataclass
class FallbackSettings:
    """Model.settings for the fallback: the processor, its image token ids and the time it took."""

    processor: Any
    image_token_ids: frozenset[int]
    # A special token the processor gives no meaning, written between images to find where each starts.
    sentinel: tuple[str, int] | None = None
    rows: int = 0  # rows counted (a row may take two calls: see count_row)
    seconds: float = 0.0
    # The ids input_ids carries where the model puts video features (empty: videos are not counted).
    video_token_ids: frozenset[int] = frozenset()
    video_placeholder: str = ""  # the token the template writes for one video

    @property
    def ms_per_row(self) -> float | None:
        return 1000 * self.seconds / self.rows if self.rows else None


@dataclass(frozen=True)
class DecodedVideo:
    """One clip as the video processor gets it: a path (its own reader loads it) or decoded frames with
    their VideoMetadata; `reader` says which, for the report."""

    video: Any
    metadata: Any
    reader: str


def video_token_ids(processor: Any, model_config: dict[str, Any]) -> frozenset[int]:
    """The ids input_ids carries where the model puts video features: config.json, then the processor."""
    for section in (model_config, model_config.get("text_config") or {}):
        if isinstance(section, dict):
            found = {
                section[k] for k in VIDEO_TOKEN_ID_KEYS if isinstance(section.get(k), int) and section[k] >= 0
            }
            if found:
                return frozenset(found)
    return _processor_token_id(processor, "video")


def has_video_processor(processor: Any) -> bool:
    """Whether the processor's video processor was built here (not a stand-in for a missing backend)."""
    part = processor.__dict__.get("video_processor")
    return part is not None and not isinstance(part, AbsentPart)


def decode_video(path: str, meta: VideoMeta) -> DecodedVideo:
    """One clip as transformers 5.24's default reader hands it to a video processor (module docstring).

    torchcodec usable: the path itself (fetch_videos loads it with torchcodec and the processor's own
    sampling). Else PyAV decodes every frame as read_video_pyav does, turned upright, with the
    metadata torchcodec gives (frames counted, fps over the timestamps); the processor samples them.
    """
    from transformers.utils import is_torchcodec_usable

    if is_torchcodec_usable(decode="video"):
        return DecodedVideo(path, None, "torchcodec")
    import av
    import numpy as np
    from transformers.video_utils import VideoMetadata

    try:
        with av.open(path) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise CountError(f"PyAV cannot decode the clip: {exc}") from None
    if not frames:
        raise CountError("PyAV decodes no frame of the clip")
    video = np.stack(frames)
    if meta.rotation:  # torchcodec applies the display matrix (counter-clockwise degrees)
        video = np.ascontiguousarray(np.rot90(video, k=meta.rotation // 90, axes=(1, 2)))
    upright = meta.as_torchcodec()
    fps = upright.fps
    metadata = VideoMetadata(
        total_num_frames=len(video),
        fps=fps,
        width=int(video.shape[2]),
        height=int(video.shape[1]),
        duration=len(video) / fps if fps else None,
        video_backend="pyav",
        frames_indices=np.arange(len(video)),
    )
    return DecodedVideo(video, metadata, "PyAV, torchcodec's metadata")


def _input_ids(output: Any) -> list[int]:
    ids = output["input_ids"]
    first = ids[0] if len(ids) and not isinstance(ids[0], int) else ids
    if hasattr(first, "tolist"):
        first = first.tolist()
    return [int(i) for i in first]


def _call(
    settings: FallbackSettings, text: str, images: Sequence[Any], videos: Sequence[DecodedVideo] = ()
) -> list[int]:
    """One call of the processor's own __call__, as a trainer's collator makes it, with numpy tensors
    (with videos: the processor's own tensors, as Video-LLaMA3 splits torch tensors in its expansion)."""
    started = time.perf_counter()
    kwargs: dict[str, Any] = {"return_tensors": "np"}
    if videos:
        kwargs = {"videos": [video.video for video in videos]}
        if any(video.metadata is not None for video in videos):
            kwargs["video_metadata"] = [video.metadata for video in videos]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # One sample's images as one nested list, as a trainer's collator passes a batch of rows.
            try:
                output = settings.processor(text=[text], images=[list(images)] if images else None, **kwargs)
            except ValueError as exc:
                if "nested" not in str(exc).lower():
                    raise
                # GOT-OCR 2 takes one sample's images flat ("Nested images are only supported with
                # `multi_page`"); there a nested list is refused, not read as several samples.
                output = settings.processor(text=[text], images=list(images), **kwargs)
    except CountError:
        raise
    except Exception as exc:  # the processor's own refusal of this row: a finding, never a crash
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CountError(f"{type(exc).__name__}: {message}" if message else type(exc).__name__) from None
    finally:
        settings.seconds += time.perf_counter() - started
    return _input_ids(output)


def _runs(ids: list[int], wanted: frozenset[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = None
    for position, token in enumerate(ids):
        if token in wanted:
            if start is None:
                start = position
        elif start is not None:
            runs.append((start, position))
            start = None
    if start is not None:
        runs.append((start, len(ids)))
    return runs


def count_row(
    rendered: str,
    images: Sequence[Any],
    placeholder: str,
    settings: FallbackSettings,
    videos: Sequence[DecodedVideo] = (),
) -> RowCount:
    """seq_len and each image's tokens for one row, from the processor's own input_ids.

    With one image, or one run of image tokens per image, the runs are the images. Otherwise (tiles
    with separators between them) the row is processed once more with a sentinel token written before
    each image's placeholder but the first; where the sentinels, taken out again, leave exactly the
    first call's input_ids, they mark where each image's tokens start. Where they do not, per-image
    counts are left unknown rather than guessed (the row's length stays exact). `videos` (decode_video)
    go into the same call; their tokens are count_videos'.
    """
    settings.rows += 1
    ids = _call(settings, rendered, images, videos)
    if videos:
        return replace(
            _image_tokens(ids, rendered, images, placeholder, settings, videos),
            video_tokens=_video_tokens(ids, settings, videos),
        )
    return _image_tokens(ids, rendered, images, placeholder, settings, videos)


def _video_tokens(
    ids: list[int], settings: FallbackSettings, videos: Sequence[DecodedVideo]
) -> tuple[int | None, ...]:
    """Each video's tokens: the row's video-token positions; with several videos, each video processed
    alone (its placeholder only) where those counts add up to the row's, else unknown."""
    total = sum(token in settings.video_token_ids for token in ids)
    if len(videos) == 1:
        return (total,)
    alone = []
    for video in videos:
        try:
            one = _call(settings, settings.video_placeholder, (), (video,))
        except CountError:
            return tuple(None for _ in videos)
        alone.append(sum(token in settings.video_token_ids for token in one))
    return tuple(alone) if sum(alone) == total else tuple(None for _ in videos)


def _image_tokens(
    ids: list[int],
    rendered: str,
    images: Sequence[Any],
    placeholder: str,
    settings: FallbackSettings,
    videos: Sequence[DecodedVideo],
) -> RowCount:
    wanted = settings.image_token_ids
    runs = _runs(ids, wanted) if wanted else []
    total = sum(end - start for start, end in runs)
    if not images:
        return RowCount(len(ids), (), ())
    if len(images) == 1:
        spans = ((runs[0][0], runs[-1][1]),) if runs else ()
        return RowCount(len(ids), (total,), spans)
    if len(runs) == len(images):
        return RowCount(len(ids), tuple(end - start for start, end in runs), tuple(runs))
    unknown = RowCount(len(ids), tuple(None for _ in images), None)
    sentinel = settings.sentinel
    if sentinel is None or not placeholder or sentinel[0] in rendered:
        return unknown
    text, sentinel_id = sentinel
    pieces = rendered.split(placeholder)
    if len(pieces) != len(images) + 1:
        return unknown
    marked = pieces[0] + placeholder + (text + placeholder).join(pieces[1:])
    try:
        marked_ids = _call(settings, marked, images, videos)
    except CountError:
        return unknown
    if [token for token in marked_ids if token != sentinel_id] != ids:
        return unknown  # the sentinel changed what the processor does: no boundaries from it
    buckets: list[list[int]] = [[] for _ in images]
    image = position = 0
    for token in marked_ids:
        if token == sentinel_id:
            image += 1
            continue
        if token in wanted and image < len(buckets):
            buckets[image].append(position)
        position += 1
    if image != len(images) - 1:
        return unknown
    tokens = tuple(len(bucket) for bucket in buckets)
    spans = tuple((bucket[0], bucket[-1] + 1) if bucket else (0, 0) for bucket in buckets)
    return RowCount(len(ids), tokens, spans)


def choose_sentinel(
    processor: Any, template: str | None, image_ids: frozenset[int]
) -> tuple[str, int] | None:
    """A special token of the tokenizer that neither the processor nor its template gives a meaning."""
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        return None
    own = {value for value in vars(processor).values() if isinstance(value, str)}
    named = [getattr(tokenizer, name, None) for name in ("unk_token", "pad_token")]
    added = [str(t) for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()]
    for token in [t for t in named if isinstance(t, str)] + sorted(added, key=len):
        if not token or token in own or (template and token in template):
            continue
        if any(
            word in token.lower() for word in ("image", "img", "vision", "video", "audio", "patch", "tile")
        ):
            continue
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int) or token_id in image_ids:
            continue
        if tokenizer(token, add_special_tokens=False)["input_ids"] == [token_id]:
            return token, token_id
    return None


def make_family(
    processor: Any, placeholder: str, raw_image_prompt: str, video_placeholder: str = ""
) -> Family:
    """A Family bound to one loaded processor; its settings are FallbackSettings. `video_placeholder`:
    the processor's video token where its videos are counted ("" : they are not)."""

    def no_formula(*args: Any, **kwargs: Any) -> ImageCount:
        raise CountError("no header formula for this processor; counts come from the real processor")

    def no_expansion(*args: Any, **kwargs: Any) -> Any:
        raise CountError("the real-processor fallback counts whole rows, not expansions")

    return Family(
        name="fallback",
        title=f"{type(processor).__name__} (real processor)",
        processor_classes=(type(processor).__name__,),
        image_processor_types=(),
        placeholder=placeholder,
        raw_image_prompt=raw_image_prompt,
        settings_from=lambda image_processor, processor_config, model_config: None,
        count=no_formula,
        count_exact=no_expansion,
        expand=no_expansion,
        header_formula=False,
        count_row=count_row,
        video_placeholder=video_placeholder,
        size_knob=no_knob(
            "no header formula for this processor: no image-size knob is searched; only the max length "
            "is recommended"
        ),
    )
