"""Models: load a processor's settings, tokenizer and chat template, and count image tokens per family.

Nothing here imports torch or torchvision. transformers 5.x refuses `AutoProcessor` for Qwen-VL and
about 40 other processors when torchvision is missing, so vlmlint loads the parts it needs itself:
`AutoImageProcessor` (which falls back to the PIL backend), `AutoTokenizer`, the chat template file
and config.json.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    Segment,
    check_image_config,
    check_settings,
    processor_defaults,
)
from vlmlint.models.files import ModelFileRefused, check_folder, model_file, read_json_file
from vlmlint.models.registry import FAMILIES, find_family
from vlmlint.templates import TemplateLimit

__all__ = [
    "FAMILIES",
    "CountError",
    "Expansion",
    "Family",
    "ImageCount",
    "Model",
    "ModelError",
    "Run",
    "Segment",
    "load_model",
]


class ModelError(Exception):
    """The model cannot be loaded or is not supported; the message says what to do."""


@dataclass
class Model:
    name: str
    family: Family
    settings: Any
    image_processor: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    chat_template: str | None = field(default=None, repr=False)
    max_position_embeddings: int | None = None
    processor_class: str | None = None
    image_processor_type: str | None = None
    notice: str | None = None  # one line the CLI shows on stderr (e.g. the generic fallback)
    profile: str | None = None  # the built-in profile this model came from (vlmlint models)
    checkpoint: str | None = None  # a profile's source hub checkpoint
    text_tokens_estimated: str | None = None  # how text tokens are estimated; None when exact
    # Videos: the family's video settings (None: videos are not counted, and `video_refusal` says why).
    video_settings: Any = field(default=None, repr=False)
    video_refusal: str | None = None

    @property
    def exact_unavailable(self) -> str | None:
        """Why the exact path (--exact, --verify) cannot run here, or None: a torchvision-only family's
        image processor is only its config dict where torchvision is missing."""
        if self.family.needs_torchvision and isinstance(self.image_processor, dict):
            return (
                f"the real image processor of {self.family.name} needs torch and torchvision (pip install "
                "torch torchvision); the formula is proven against the real processor's recorded outputs"
            )
        return None

    def counted_by(self, timing: bool = False) -> str:
        """How this model's counts are made: its family's formula, or the real processor per row.

        `timing`: with the fallback's measured cost per row so far (after a scan).
        """
        if self.family.count_row is None:
            return f"formula (family {self.family.name})"
        ms = getattr(self.settings, "ms_per_row", None) if timing else None
        return "real processor (fallback" + (f": {ms:.1f} ms/row)" if ms is not None else ")")

    def _image_processor_name(self) -> str:
        return type(self.image_processor).__name__

    def _tokenizer_name(self) -> str | None:
        return type(self.tokenizer).__name__ if self.tokenizer is not None else None

    def describe(self, timing: bool = False) -> dict[str, Any]:
        settings = (
            dataclasses.asdict(self.settings)
            if dataclasses.is_dataclass(self.settings) and self.family.count_row is None
            else {}
        )
        return {
            "name": self.name,
            "family": self.family.name,
            "counted_by": self.counted_by(timing),
            "processor_class": self.processor_class,
            "image_processor": self._image_processor_name(),
            "tokenizer": self._tokenizer_name(),
            "chat_template": self.chat_template is not None,
            "max_position_embeddings": self.max_position_embeddings,
            "image_settings": dict(settings),
            "profile": self.profile,
            "checkpoint": self.checkpoint,
            "text_tokens_estimated": self.text_tokens_estimated,
        }


def _read_json(model: str, filename: str) -> dict[str, Any]:
    path = model_file(model, filename)
    if path is None:
        return {}
    try:
        data = read_json_file(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{model}: cannot read {filename}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _read_chat_template(model: str, tokenizer: Any) -> str | None:
    """The processor's chat template (what processor.apply_chat_template uses), else the tokenizer's."""
    path = model_file(model, "chat_template.jinja")
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    for filename in ("chat_template.json", "processor_config.json"):
        template = _read_json(model, filename).get("chat_template")
        if isinstance(template, str):
            return template
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) else None


def _max_position_embeddings(config: dict[str, Any]) -> int | None:
    """The language model's context: text_config's, the config's own, or (Qwen2.5-Omni, Qwen3-Omni)
    thinker_config.text_config's, where the Omni models keep the text model that reads the images."""
    thinker = config.get("thinker_config") if isinstance(config.get("thinker_config"), dict) else {}
    for section in (config.get("text_config") or {}, config, thinker.get("text_config") or {}, thinker):
        value = section.get("max_position_embeddings") if isinstance(section, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def _processor_settings(processor_class: str | None, processor_config: dict[str, Any]) -> dict[str, Any]:
    """processor_config.json over the processor class's own defaults (when transformers has the class)."""
    import transformers

    cls = getattr(transformers, processor_class, None) if processor_class else None
    if cls is None:
        return {k: v for k, v in processor_config.items() if k != "image_processor"}
    return processor_defaults(cls, processor_config)


def _load_tokenizer(name: str, family: Family, trust_remote_code: bool) -> Any:
    """The model's tokenizer; None for a plain vision encoder that has none (ViT: counts, no lengths)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, ImportError):
        if family.placeholder:  # a family whose text holds image tokens cannot do without one
            raise
        return None


def _template_placeholder(template: str | None, tokenizer: Any, image_token: str | None) -> str | None:
    """What the chat template writes for one image: the text one image part adds to a turn.

    "" when it writes nothing (Florence-2, BLIP-2: the processor puts the image tokens in itself);
    None when there is no template or it refuses the probe.
    """
    if not template:
        return None
    from vlmlint.templates import TemplateLimit
    from vlmlint.templates import render as render_template

    def render(content: list[dict[str, Any]]) -> str:
        special = getattr(tokenizer, "special_tokens_map", None) or {}
        return render_template(template, [{"role": "user", "content": content}], False, **special)

    text = {"type": "text", "text": "vlmlint"}
    try:
        with_image, without = render([{"type": "image"}, text]), render([text])
    except TemplateLimit:
        raise
    except Exception:  # a template that refuses the probe: keep the processor's own token
        return None
    prefix = len(os.path.commonprefix([with_image, without]))
    suffix = len(os.path.commonprefix([with_image[prefix:][::-1], without[prefix:][::-1]]))
    written = with_image[prefix : len(with_image) - suffix]
    if written and image_token and image_token in written:
        return image_token  # the processor's token, perhaps inside markers the template adds around it
    return written.strip()


def _template_refusal(name: str, exc: Exception) -> str:
    return (
        f"{name}: its chat template is refused: on a one-turn probe conversation {exc}; "
        "fix the template or scan with --no-chat-template"
    )


def _probe_template(name: str, template: str | None, tokenizer: Any) -> None:
    """Refuse, at load, a chat template that runs past its bounds on the smallest conversation."""
    if not template:
        return
    from vlmlint.templates import TemplateLimit, render

    special = getattr(tokenizer, "special_tokens_map", None) or {}
    probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "vlmlint"}]}]
    try:
        render(template, probe, False, **special)
    except TemplateLimit as exc:
        raise ModelError(_template_refusal(name, exc)) from None
    except Exception:  # noqa: BLE001 (a template may refuse the probe's shape; rows then say why)
        return


def _load_fallback(name: str, processor_name: str, trust_remote_code: bool) -> Model:
    """A processor no family claims: count every row with the real processor on decoded images."""
    from vlmlint.models.fallback import (
        FallbackRefused,
        FallbackSettings,
        build_processor,
        choose_sentinel,
        image_token_ids,
        video_token_ids,
    )
    from vlmlint.models.fallback import make_family as make_fallback

    model_config = _read_json(name, "config.json")
    model_type = model_config.get("model_type") if isinstance(model_config.get("model_type"), str) else None
    _quiet_transformers()
    try:
        processor = build_processor(name, processor_name, trust_remote_code, model_type)
    except FallbackRefused as exc:
        raise ModelError(
            f"{name}: {processor_name} is not a family vlmlint has a formula for, and its real processor "
            f"cannot run here for the fallback: {exc}"
        ) from None
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        raise ModelError(f"{name}: {processor_name} has no tokenizer, so vlmlint cannot count its text")
    if not hasattr(processor, "image_processor") or processor.image_processor is None:
        raise ModelError(f"{name}: {processor_name} has no image processor: it takes no images")
    template = getattr(processor, "chat_template", None)
    if not isinstance(template, str):
        template = _read_chat_template(name, tokenizer)
    image_token = getattr(processor, "image_token", None)
    image_token = image_token if isinstance(image_token, str) and image_token else None
    try:
        placeholder = _template_placeholder(template, tokenizer, image_token)
    except TemplateLimit as exc:
        raise ModelError(_template_refusal(name, exc)) from None
    if placeholder is None:
        placeholder = image_token or ""
    image_ids = image_token_ids(processor, model_config)
    settings = FallbackSettings(processor, image_ids, choose_sentinel(processor, template, image_ids))
    absent = getattr(processor, "_vlmlint_absent", {})
    missing = f"; left out: {'; '.join(absent.values())}" if absent else ""
    video_refusal = _fallback_video_refusal(name, processor_name, model_type, processor)
    if video_refusal is None:  # its real video processor counts the row's videos (fallback.decode_video)
        settings.video_token_ids = video_token_ids(processor, model_config)
        settings.video_placeholder = processor.video_token
    return Model(
        name=name,
        family=make_fallback(processor, placeholder, placeholder, settings.video_placeholder),
        settings=settings,
        image_processor=processor.image_processor,
        tokenizer=tokenizer,
        chat_template=template,
        max_position_embeddings=_max_position_embeddings(model_config),
        processor_class=processor_name,
        image_processor_type=type(processor.image_processor).__name__,
        notice=(
            f"{processor_name}: no formula in vlmlint; every row is counted with the real processor on "
            f"decoded images (slow){missing}"
        ),
        video_refusal=video_refusal,
    )


def _fallback_video_refusal(
    name: str, processor_name: str, model_type: str | None, processor: Any = None
) -> str | None:
    """Why the fallback's videos are not counted, or None: its real video processor (built here, so
    torch and torchvision are installed) counts them on the decoded frames. A video processor that
    drops patches by their pixel content (Video-LLaMA3's use_token_compression) cannot be counted from
    headers by any formula: without torch only a refusal saying so."""
    from vlmlint.models.fallback import has_video_processor, video_token_ids
    from vlmlint.models.video_config import video_processor_config

    if processor is not None and has_video_processor(processor):
        token = getattr(processor, "video_token", None)
        model_config = _read_json(name, "config.json")
        if isinstance(token, str) and token and video_token_ids(processor, model_config):
            return None
        return f"{processor_name}'s videos are not counted: its processor names no video token"
    _, config, _ = video_processor_config(name, _read_json(name, "processor_config.json"), model_type)
    absent = (
        getattr(processor, "_vlmlint_absent", {}).get("video_processor") if processor is not None else None
    )
    video_type = config.get("video_processor_type")
    if video_type is None and absent is None:
        return f"{processor_name}'s videos are not counted: the real-processor fallback counts images only"
    install = f"install torch and torchvision to count {processor_name} videos through its real processor" + (
        f" ({absent})" if absent else ""
    )
    if config.get("use_token_compression") and video_type:
        return (
            f"{processor_name}'s video tokens cannot be predicted from headers: its video processor "
            f"({video_type}, use_token_compression) drops patches by their pixel content; {install}"
        )
    return f"{processor_name}'s videos are not counted: {install}"


def _video_settings(
    name: str,
    family: Family,
    processor_config: dict[str, Any],
    model_config: dict[str, Any],
    settings: Any,
    processor_class: str | None,
) -> tuple[Any, str | None]:
    """The family's video settings from the video processor's files, or None and why videos are not counted."""
    if family.count_video is None or family.video_settings_from is None:
        return None, f"vlmlint does not count {family.title} videos yet"
    from vlmlint.models.video_config import video_processor_config

    model_type = model_config.get("model_type") if isinstance(model_config.get("model_type"), str) else None
    _, config, _ = video_processor_config(name, processor_config, model_type)
    try:
        return family.video_settings_from(config, settings, processor_class), None
    except CountError as exc:
        return None, f"{family.title} videos are not counted: {exc}"
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError) as exc:
        return None, f"{family.title} videos are not counted: its video settings are unusable: {_line(exc)}"


def _line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one bounded line."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep transformers' backend notices off the report
    logging.getLogger("transformers").setLevel(logging.ERROR)


def load_model(
    name: str | None = None,
    *,
    trust_remote_code: bool = False,
    force_fallback: bool = False,
    processor_options: Mapping[str, Any] | None = None,
    light: bool = False,
) -> Model:
    """Load what vlmlint needs of a processor folder, built-in profile or hub id, without torch.

    Resolution order: an existing folder, then a built-in profile name (`vlmlint models`), then a hub id.
    No name means the default profile (qwen2-vl). `force_fallback`: count with the real processor even
    where a family has a formula (tests prove the two agree). `processor_options` (--processor-option):
    image processor keys set as if the processor's file held them (apply_processor_options).
    `light`: a built-in profile the formula counts (vlmlint/models/light.py) loads without transformers; the
    image processor and the transformers tokenizer then load on first use (--exact, the self-check).
    """
    from vlmlint.models import profiles

    if name is None:
        name = profiles.DEFAULT_PROFILE
    profile = None if os.path.isdir(name) else profiles.find_profile(name)
    if light and profile is not None and not (trust_remote_code or force_fallback or processor_options):
        model = _load_light(profile)
        if model is not None:
            return model
    from vlmlint.models import compat

    refusal = compat.unsupported()
    if refusal is not None:
        raise ModelError(refusal)
    if profile is None:
        if not os.path.isdir(name):
            refusal = _not_a_model(name, profiles.PROFILES) or _hub_unreachable(name)
            if refusal is not None:
                raise ModelError(refusal)
        return _load_processor(name, trust_remote_code, force_fallback, processor_options)
    try:
        folder = profiles.profile_folder(profile)
    except (profiles.ProfileError, OSError) as exc:
        raise ModelError(f"{name}: cannot prepare the built-in profile: {exc}") from None
    try:
        model = _load_processor(str(folder), trust_remote_code, force_fallback, processor_options)
    except ModelError as exc:
        if not processor_options:
            raise
        raise ModelError(str(exc).replace(str(folder), profile.name)) from None  # name what the user gave
    model.name = profile.name
    model.profile = profile.name
    model.checkpoint = profile.checkpoint
    model.text_tokens_estimated = profile.text_tokens_estimated
    return model


def _not_a_model(name: str, known: Any) -> str | None:
    """Why `name` (no folder, no profile) cannot be a model, said at once: a path that does not exist,
    or a bare name (hub ids have the form org/name; the hub is never asked for one without a slash)."""
    import difflib

    if os.path.exists(name):
        return f"{name}: a file, not a processor folder (pass the folder that holds preprocessor_config.json)"
    looks_local = (
        name.startswith((".", "/", "~", "\\")) or name.endswith(("/", ".json")) or name.count("/") > 1
    )
    if looks_local or (os.sep != "/" and os.sep in name):
        return f"{name}: no such folder"
    if "/" not in name:
        close = difflib.get_close_matches(name.strip().lower(), list(known), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        return (
            f"{name}: unknown profile{hint} ('vlmlint models' lists the built-in profiles; a local folder must "
            "exist, and a Hugging Face hub id has the form org/name)"
        )
    return None


# Keys of an image processor's file that name it, not set it: --processor-option cannot change them.
# (nor the call's output format: return_tensors, device, data_format ...).
_NOT_KNOBS = frozenset(
    {
        "image_processor_type", "feature_extractor_type", "processor_class", "auto_map",
        "return_tensors", "device", "data_format", "input_data_format", "disable_grouping",
    }
)  # fmt: skip


def processor_option_keys(image_processor: Any, image_config: Mapping[str, Any]) -> list[str]:
    """The keys --processor-option takes: those of the image processor's file, and the kwargs its class
    declares (valid_kwargs, which from_pretrained/from_dict take from the file)."""
    known = set(image_config)
    cls = image_processor if isinstance(image_processor, type) else type(image_processor)
    if isinstance(image_processor, dict):  # torchvision-only family without torchvision: the class by name
        import transformers

        cls = getattr(transformers, str(image_config.get("image_processor_type")), None)
    valid = getattr(cls, "valid_kwargs", None)
    known |= set(getattr(valid, "__annotations__", None) or ())
    return sorted(known - _NOT_KNOBS)


def merged_image_config(
    name: str, image_config: Mapping[str, Any], known: list[str], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The image processor's file as if it held `options`: KEY replaces the key, KEY.SUB one entry of a
    table (size.longest_edge=1456). ModelError naming the known keys for any other."""
    merged = dict(image_config)
    for key, value in options.items():
        top, _, sub = str(key).partition(".")
        if top not in known or (sub and "." in sub):
            raise ModelError(
                f"{name}: --processor-option {key}: not a key of its image processor "
                f"({type_name(image_config)}); known: {', '.join(known)}"
            )
        if not sub:
            merged[top] = dict(value) if isinstance(value, Mapping) else value
            continue
        table = merged.get(top)
        if table is not None and not isinstance(table, dict):
            raise ModelError(f"{name}: --processor-option {key}: {top} is {table!r}, not a table")
        if table and sub not in table:  # a new entry the class would ignore (InternVL's size: height, width)
            raise ModelError(
                f"{name}: --processor-option {key}: not an entry of its {top}; known: {', '.join(table)}"
            )
        merged[top] = {**(table or {}), sub: value}
    try:
        check_image_config(merged)
    except CountError as exc:
        raise ModelError(f"{name}: --processor-option: {exc}") from None
    return merged


def type_name(image_config: Mapping[str, Any]) -> str:
    return str(image_config.get("image_processor_type") or image_config.get("feature_extractor_type"))


def apply_processor_options(
    name: str, image_processor: Any, image_config: Mapping[str, Any], options: Mapping[str, Any]
) -> Any:
    """The image processor rebuilt from its file's dict with `options` written into it, by the same
    from_dict that from_pretrained ends in (so a key acts exactly as the file's key would: Qwen2-VL's
    max_pixels becomes size.longest_edge in __init__, as it does when the file holds it)."""
    if not isinstance(image_processor, dict):
        from transformers.image_processing_base import ImageProcessingMixin

        try:  # the dict from_pretrained itself built the processor from (processor_config's nested one wins)
            image_config, _ = ImageProcessingMixin.get_image_processor_dict(name)
        except Exception:  # noqa: BLE001 (kept: the file vlmlint read)
            pass
    known = processor_option_keys(image_processor, image_config)
    merged = merged_image_config(name, image_config, known, options)
    if isinstance(image_processor, dict):
        return merged
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return type(image_processor).from_dict(merged)
    except Exception as exc:  # noqa: BLE001 (the class refuses the value: say which)
        raise ModelError(
            f"{name}: --processor-option: {type(image_processor).__name__} refuses {dict(options)}: "
            f"{type(exc).__name__}: {_line(exc)}"
        ) from None


def _hub_unreachable(name: str) -> str | None:
    """For a hub id: a network failure said as one, at once (the hub client retries for 35-50 s before
    an unclear error), unless HF_HUB_OFFLINE is set or the repo's files are in the local cache."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        return None  # the cache only: transformers says what is missing
    for filename in ("preprocessor_config.json", "processor_config.json"):
        try:
            if isinstance(try_to_load_from_cache(name, filename), str):
                return None  # cached: usable whatever the network
        except Exception:  # noqa: BLE001 (a malformed id: the hub's own error says why)
            return None
    problem = hub_network_problem(constants.ENDPOINT)
    if problem is None:
        return None
    return (
        f"{name}: cannot reach the Hugging Face Hub ({problem}): a network failure, not a missing model; "
        "check the connection, or set HF_HUB_OFFLINE=1 to use only the local cache"
    )


def hub_network_problem(endpoint: str, timeout: float = 5.0) -> str | None:
    """Why `endpoint` cannot be reached (DNS, refused, timeout), or None when it answers at all."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (TimeoutError, urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{type(reason).__name__}: {reason}"
    return None


def _load_image_processor(
    name: str, family: Family, image_config: dict[str, Any], trust_remote_code: bool
) -> Any:
    """The image processor object; for a torchvision-only family where torchvision is missing, its raw
    config dict (transformers cannot build the class here: the family reads the same keys from the dict)."""
    if family.needs_torchvision:
        from transformers.utils import is_torchvision_available

        if not is_torchvision_available():
            return dict(image_config)
    from vlmlint.models.compat import load_image_processor

    return load_image_processor(name, trust_remote_code, image_config)  # AutoImageProcessor, on every 5.x


def _refuse_missing_processor(name: str, processor_class: str) -> None:
    """ModelError where the family's processor came in a later transformers than the installed one (a
    trainer on this one cannot load it either): the message names the release to install."""
    from vlmlint.models.compat import missing_processor

    refusal = missing_processor(processor_class)
    if refusal is not None:
        raise ModelError(f"{name}: {refusal}")


_PROCESSOR_AUTO_CLASSES = ("AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoTokenizer")


def _load_processor(
    name: str,
    trust_remote_code: bool,
    force_fallback: bool = False,
    processor_options: Mapping[str, Any] | None = None,
) -> Model:
    if os.path.isdir(name):
        try:
            check_folder(name)
        except (ModelFileRefused, OSError) as exc:
            raise ModelError(f"{name}: {exc}") from None
    preprocessor = _read_json(name, "preprocessor_config.json")
    processor_config = _read_json(name, "processor_config.json")
    nested = (
        processor_config.get("image_processor")
        if isinstance(processor_config.get("image_processor"), dict)
        else {}
    )
    if not preprocessor and not nested:
        from huggingface_hub import constants

        offline = not os.path.isdir(name) and constants.HF_HUB_OFFLINE
        raise ModelError(
            f"{name}: no preprocessor_config.json or processor_config.json found"
            + (" in the local cache (HF_HUB_OFFLINE is set)" if offline else "")
            + "; pass a processor folder or a hub id of a vision-language model"
        )
    image_config = preprocessor or nested
    try:
        check_image_config(image_config)
    except CountError as exc:
        where = "preprocessor_config.json" if preprocessor else "processor_config.json's image_processor"
        raise ModelError(f"{name}: {where}: {exc}") from None
    tokenizer_config = _read_json(name, "tokenizer_config.json")
    processor_class = (
        processor_config.get("processor_class")
        or image_config.get("processor_class")
        or tokenizer_config.get("processor_class")
    )
    # Legacy hub files (google/vit-*, openai/clip-*) name only their feature extractor class.
    image_processor_type = image_config.get("image_processor_type") or image_config.get(
        "feature_extractor_type"
    )
    # config.json's auto_map often names only custom model code, which vlmlint never loads; its
    # processor entries are what transformers falls back to when the processor files name no class.
    model_map = _read_json(name, "config.json").get("auto_map")
    processor_map = isinstance(model_map, dict) and any(key in model_map for key in _PROCESSOR_AUTO_CLASSES)
    if not trust_remote_code and (
        processor_map or any("auto_map" in c for c in (image_config, processor_config, tokenizer_config))
    ):
        raise ModelError(
            f"{name}: its processor needs remote code; rerun with --trust-remote-code if you trust it"
        )
    family = None if force_fallback else find_family(processor_class, image_processor_type)
    if family is not None and processor_class and not (processor_map and trust_remote_code):
        _refuse_missing_processor(name, processor_class)
    if processor_options and family is None:
        raise ModelError(
            f"{name}: --processor-option is applied to the image processor of a family vlmlint has a formula "
            f"for; {processor_class or image_processor_type} is counted by its real processor (the fallback) "
            "or not at all: copy the processor folder and edit its file instead"
        )
    if family is None and processor_class:
        return _load_fallback(name, processor_class, trust_remote_code)
    if family is None:
        raise ModelError(
            f"{name}: its files name no processor class, and its image processor {image_processor_type!r} is "
            f"none of vlmlint's families ({', '.join(f.title for f in FAMILIES)}); set processor_class in "
            "processor_config.json or pass the hub id of the full processor"
        )

    model_config = _read_json(name, "config.json")
    _quiet_transformers()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image_processor = _load_image_processor(name, family, image_config, trust_remote_code)
            tokenizer = _load_tokenizer(name, family, trust_remote_code)
    except Exception as exc:  # noqa: BLE001 (a hostile folder makes transformers raise anything)
        raise ModelError(
            f"{name}: cannot load its image processor or tokenizer: {type(exc).__name__}: {_line(exc)}"
        ) from None
    if processor_options:  # before the family reads its settings from the image processor
        image_processor = apply_processor_options(name, image_processor, image_config, processor_options)
    try:
        processor_settings = _processor_settings(processor_class, processor_config)
        # ProcessorMixin._merge_kwargs lets the tokenizer's init kwargs (tokenizer_config.json) override
        # the processor's call-time defaults (e.g. Gemma 3's do_pan_and_scan): families read them here.
        processor_settings["tokenizer_init_kwargs"] = dict(getattr(tokenizer, "init_kwargs", None) or {})
        # Processors that take their image token from the tokenizer (Qwen2VLProcessor) read it here.
        processor_settings["tokenizer_image_token"] = getattr(tokenizer, "image_token", None)
        # ... and their BOS (MllamaProcessor, PaliGemmaProcessor): the tokenizer's, whatever it is.
        processor_settings["tokenizer_bos_token"] = getattr(tokenizer, "bos_token", None)
        settings = family.settings_from(image_processor, processor_settings, model_config)
        check_settings(settings)
        family = family.bound(settings)
    except CountError as exc:
        raise ModelError(f"{name}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError, IndexError) as exc:
        raise ModelError(
            f"{name}: its processor settings are not usable by {family.title}: {type(exc).__name__}: {_line(exc)}"
        ) from None
    chat_template = _read_chat_template(name, tokenizer)
    _probe_template(name, chat_template, tokenizer)
    video_settings, video_refusal = _video_settings(
        name, family, processor_config, model_config, settings, processor_class
    )
    return Model(
        video_settings=video_settings,
        video_refusal=video_refusal,
        name=name,
        family=family,
        settings=settings,
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=chat_template,
        max_position_embeddings=_max_position_embeddings(model_config),
        processor_class=processor_class,
        image_processor_type=image_processor_type,
    )


# --- built-in profiles without transformers (vlmlint/models/light.py) -----------------------------------------


class LightModel(Model):
    """A Model whose image processor is loaded on first use (--exact, the self-check), as load_model's
    ordinary path would load it; its names for describe() are the ones that path gives."""

    def __init__(self, *args: Any, image_processor_name: str, **kwargs: Any) -> None:
        self._image_processor_loaded: Any = None
        self._image_processor_class = image_processor_name
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def image_processor(self) -> Any:
        if self._image_processor_loaded is None:
            _quiet_transformers()
            family = self.family
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                folder = _profile_folder(str(self.profile))
                image_config = _read_json(folder, "preprocessor_config.json")
                self._image_processor_loaded = _load_image_processor(folder, family, image_config, False)
        return self._image_processor_loaded

    @image_processor.setter
    def image_processor(self, value: Any) -> None:
        if value is not None:
            self._image_processor_loaded = value

    def _image_processor_name(self) -> str:
        if self._image_processor_loaded is not None:
            return type(self._image_processor_loaded).__name__
        return self._image_processor_class

    def _tokenizer_name(self) -> str | None:
        return getattr(self.tokenizer, "class_name", None) or super()._tokenizer_name()


def _profile_folder(profile_name: str) -> str:
    """The profile's processor folder in the cache, as load_model's ordinary path reads it (prepared on
    first use: its tokenizer.json is built with transformers' converter)."""
    from vlmlint.models import profiles

    profile = profiles.find_profile(profile_name)
    assert profile is not None
    return str(profiles.profile_folder(profile))


def _load_real_tokenizer(profile_name: str) -> Any:
    """The transformers tokenizer of a profile (a LightTokenizer's, on first use)."""
    folder = _profile_folder(profile_name)
    _quiet_transformers()
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(folder)


def _load_light(profile: Any) -> Model | None:
    """The profile's model as the ordinary path would give it, without transformers; None where
    vlmlint/models/light.py does not cover the profile (or this transformers), and the ordinary path runs."""
    from vlmlint.models import light, profiles

    if light.env_disabled():
        return None
    try:
        # The shipped settings files themselves (profile_folder copies them with the tokenizer.json that
        # only the real tokenizer reads: it is prepared on first use)
        folder = profiles._data_dir() / profile.name
        files = light.light_profile(profile, folder)
        if files is None:
            return None
        bpe_file = light.bpe_file()
    except (profiles.ProfileError, OSError, ValueError):
        return None  # the ordinary path says what is wrong
    family: Family = files["family"]
    name = str(folder)
    tokenizer = light.LightTokenizer(profile.name, "Qwen2Tokenizer", files["tokenizer_config"], bpe_file)
    processor_settings = {
        "tokenizer_init_kwargs": None,  # not read by the light families
        "tokenizer_image_token": tokenizer.image_token,
        "tokenizer_bos_token": tokenizer.bos_token,
    }
    try:
        image_config = files["image_config"]
        check_image_config(image_config)
        settings = family.settings_from(
            family.light_image_attributes(image_config), processor_settings, files["model_config"]
        )
        check_settings(settings)
        family = family.bound(settings)
    except Exception:  # noqa: BLE001 (the ordinary path gives the refusal)
        return None
    chat_template = light.chat_template_of(folder, files["tokenizer_config"])
    _probe_template(name, chat_template, tokenizer)
    processor_class = files["processor_class"]
    video_settings, video_refusal = _video_settings(
        name, family, files["processor_config"], files["model_config"], settings, processor_class
    )
    return LightModel(
        image_processor_name=light.image_processor_name(image_config),
        video_settings=video_settings,
        video_refusal=video_refusal,
        name=profile.name,
        family=family,
        settings=settings,
        image_processor=None,
        tokenizer=tokenizer,
        chat_template=chat_template,
        max_position_embeddings=_max_position_embeddings(files["model_config"]),
        processor_class=processor_class,
        image_processor_type=image_config.get("image_processor_type"),
        profile=profile.name,
        checkpoint=profile.checkpoint,
        text_tokens_estimated=profile.text_tokens_estimated,
    )
