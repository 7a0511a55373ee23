"""The built-in Qwen-VL profiles loaded without transformers: a small scan starts in a fraction of a second.

transformers' own loading costs seconds before the first row (issue 23): importing it, the lazy-import
scan of its models folder on the first Auto* access, AutoTokenizer building the tokenizer from its
JSON in Python, the processor-class check. For a built-in profile whose counts come from the family's
formula none of that is needed, and this module reads what the scan needs from the profile's own
files instead, reproducing transformers 5.24.0 (the release `LIGHT_TRANSFORMERS` names; on any other
the ordinary path runs):

- the tokenizer's answers (`LightTokenizer`): tokenization_utils_base.py's special_tokens_map,
  all_special_tokens and added_tokens_decoder from tokenizer_config.json (bos/eos/unk/sep/pad/cls/mask,
  extra_special_tokens, the added tokens by id); token counts from models/qwen_lengths.py's tiktoken
  counter on the same Qwen ranks; anything else (offsets, ids for a trainer's pipeline) from the real
  tokenizer, loaded on first use;
- the image settings: image_processing_pil_qwen2_vl.py's Qwen2VLImageProcessorPil.__init__ (class size
  {shortest_edge: 56*56, longest_edge: 28*28*1280}, min_pixels / max_pixels written over it, patch 14,
  temporal patch 2, merge 2, do_resize), read by the family's own settings_from; the image processor
  object itself (for --exact and the self-check) is loaded on first use;
- the chat template: utils/chat_template_utils.py's _cached_compile_jinja_template environment
  (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols and the generation tracker,
  tojson, raise_exception, strftime_now, dict, namespace) and the messages as render_jinja_template
  prepares them (_plain_template_data, _alias_reasoning_fields), for vlmlint/templates.py.

tests/test_fast_start.py proves the light model equal to the transformers one (settings, names, special
tokens, token counts and whole scans over the fixture datasets and hypothesis-made conversations) and
that a scan with a built-in profile imports no transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

# The transformers release whose loading and template semantics this module reproduces.
LIGHT_TRANSFORMERS = frozenset({"5.24.0"})
# The named special tokens of tokenization_utils_base.py (SPECIAL_TOKENS_ATTRIBUTES), in its order.
_SPECIAL_ATTRIBUTES = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip
# Qwen2VLImageProcessorPil's class attributes (image_processing_pil_qwen2_vl.py, transformers 5.24.0).
_QWEN_DEFAULTS: dict[str, Any] = {
    "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "do_resize": True,
}
_LIGHT_FAMILIES = frozenset({"qwen-vl"})


@cache
def installed_transformers() -> str | None:
    """The installed transformers' version, from its metadata (never imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


@cache
def templates_light() -> bool:
    """Whether vlmlint/templates.py may render with this module's copy of transformers' environment."""
    return installed_transformers() in LIGHT_TRANSFORMERS


@cache
def _torchvision_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchvision") is not None


# --- the chat template environment (utils/chat_template_utils.py, transformers 5.24.0) -----------------


@cache
def _environment_factory() -> Any:
    """_cached_compile_jinja_template's body: a function of a template to its compiled form."""
    from contextlib import contextmanager
    from contextvars import ContextVar
    from datetime import datetime

    import jinja2
    import jinja2.exceptions
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja's own class attribute)

        def __init__(self, environment: Any) -> None:
            super().__init__(environment)
            environment.extend(activate_tracker=self.activate_tracker)
            self._tracking: ContextVar = ContextVar("assistant_tracker", default=None)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(
                lineno
            )

        @jinja2.pass_eval_context
        def _generation_support(self, context: Any, caller: Any) -> str:
            rv = caller()
            if (tracking := self._tracking.get()) is not None:
                rendered_blocks, generation_indices = tracking
                start_index = len("".join(rendered_blocks))
                generation_indices.append((start_index, start_index + len(rv)))
            return rv

        def is_active(self) -> bool:
            return self._tracking.get() is not None

        @contextmanager
        def activate_tracker(self, rendered_blocks: list, generation_indices: list) -> Any:
            if self.is_active():
                raise ValueError("AssistantTracker should not be reused before closed")
            token = self._tracking.set((rendered_blocks, generation_indices))
            try:
                yield
            finally:
                self._tracking.reset(token)

    from packaging import version

    if version.parse(jinja2.__version__) < version.parse("3.1.6"):
        raise ImportError(
            f"apply_chat_template requires jinja2>=3.1.6 to be installed. Your version is {jinja2.__version__}. "
            "You can upgrade it with `pip install -U jinja2`."
        )

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:  # noqa: A002 (transformers' name)
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (jinja's Namespace signature trick)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute."
                )

    def compile_jinja_template(chat_template: str) -> Any:
        jinja_env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
        )
        jinja_env.filters["tojson"] = tojson
        jinja_env.globals["raise_exception"] = raise_exception
        jinja_env.globals["strftime_now"] = strftime_now
        jinja_env.globals["dict"] = TemplateDict()
        jinja_env.globals["namespace"] = TemplateNamespace
        return jinja_env.from_string(chat_template)

    return compile_jinja_template


def compile_jinja_template(chat_template: str) -> Any:
    """transformers' _cached_compile_jinja_template (5.24.0), without importing transformers."""
    return _environment_factory()(chat_template)


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def alias_reasoning_fields(chat: list[Any]) -> list[Any]:
    """transformers' _alias_reasoning_fields (5.24.0)."""
    aliased = []
    for message in chat:
        if isinstance(message, dict):
            reasoning = next(
                (message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None
            )
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        aliased.append(message)
    return aliased


def plain_template_data(value: Any) -> Any:
    """transformers' _plain_template_data (5.24.0); numpy scalars only where numpy is already loaded
    (a row's JSON data holds none)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_template_data(key): plain_template_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_template_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_template_data(item) for item in value)
    np = __import__("sys").modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        return plain_template_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_template_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_template_data(value.model_dump())
    return f"<{type(value).__name__}>"


# --- the tokenizer --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LightAddedToken:
    """An entry of added_tokens_decoder as the engine reads it (tokenizers.AddedToken's fields)."""

    content: str
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False

    def __str__(self) -> str:
        return self.content


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # an AddedToken serialised by save_pretrained
        value = value.get("content")
    return value if isinstance(value, str) else None


class LightTokenizer:
    """A profile's tokenizer as vlmlint's formula path asks it, from tokenizer_config.json and the
    tiktoken counter; any other attribute or call goes to the real transformers tokenizer, loaded then."""

    def __init__(self, profile: str, class_name: str, config: dict[str, Any], bpe_file: str) -> None:
        self._folder = profile  # the profile whose cached folder the real tokenizer loads from
        self._bpe_file = bpe_file
        self._real: Any = None
        self._counter: Any = None
        self.class_name = class_name
        self.added_tokens_decoder = {
            int(token_id): LightAddedToken(
                spec["content"],
                special=bool(spec.get("special", True)),
                normalized=bool(spec.get("normalized", False)),
                lstrip=bool(spec.get("lstrip", False)),
                rstrip=bool(spec.get("rstrip", False)),
                single_word=bool(spec.get("single_word", False)),
            )
            for token_id, spec in (config.get("added_tokens_decoder") or {}).items()
        }
        self._ids = {token.content: token_id for token_id, token in self.added_tokens_decoder.items()}
        named = {attr: _token_text(config.get(attr)) for attr in _SPECIAL_ATTRIBUTES}
        self.special_tokens_map = {attr: token for attr, token in named.items() if token is not None}
        for attr in _SPECIAL_ATTRIBUTES:
            setattr(self, attr, named[attr])
        # V5: additional_special_tokens is read as extra_special_tokens (tokenization_utils_base.py)
        extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
        model_specific = extra if isinstance(extra, dict) else {}
        extra_list = list(extra) if isinstance(extra, (list, tuple)) else list(model_specific.values())
        self.image_token = _token_text(model_specific.get("image_token"))
        seen: list[str] = []
        for token in [*self.special_tokens_map.values(), *(_token_text(t) for t in extra_list)]:
            if token is not None and token not in seen:
                seen.append(token)
        self.all_special_tokens = seen
        self.model_max_length = config.get("model_max_length")
        self.unk_token_id = self._ids.get(self.unk_token) if self.unk_token else None

    def length_counter(self) -> Any:
        """Token counts of texts (add_special_tokens adds none for Qwen): the tiktoken counter."""
        if self._counter is None:
            self._counter = _ranked_lengths([t.content for t in self.added_tokens_decoder.values()])
        return self._counter

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str) and tokens in self._ids:
            return self._ids[tokens]
        return self.real.convert_tokens_to_ids(tokens)

    @property
    def real(self) -> Any:
        """The transformers tokenizer itself (loaded on first use: offsets, ids, trainers' pipelines)."""
        if self._real is None:
            from vlmlint.models import _load_real_tokenizer

            self._real = _load_real_tokenizer(self._folder)
        return self._real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.real(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_real", "_folder", "_counter", "_bpe_file"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_real", "_counter")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._real = None
        self._counter = None


def _ranks_file() -> Path:
    """Where Qwen's ranks are kept as a marshal file: keyed as profiles.qwen_bpe_json is (package version,
    file hash), and by Python's version (marshal's format)."""
    import sys

    from vlmlint.models.profiles import _qwen_identity, cache_root

    _, package_version, file_hash = _qwen_identity()
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_root() / "tokenizers" / f"qwen-ranks-{package_version}-{file_hash}-{python}.marshal"


def qwen_ranks() -> dict[bytes, int]:
    """tiktoken's load_tiktoken_bpe of qwen.tiktoken (151,643 base64 lines, ~0.3 s), kept after the first
    call as a marshal of the same dict (~0.1 s to read back); a cache file that does not read is rebuilt."""
    import marshal

    target = _ranks_file()
    try:
        ranks = marshal.loads(target.read_bytes())
        if isinstance(ranks, dict) and ranks:
            return ranks
    except (OSError, ValueError, EOFError, TypeError):
        pass
    from tiktoken.load import load_tiktoken_bpe

    from vlmlint.models.profiles import _atomic_write, qwen_bpe_file

    ranks = load_tiktoken_bpe(str(qwen_bpe_file()[0]))
    try:
        _atomic_write(target, marshal.dumps(ranks))
    except OSError:  # a read-only cache: the next run reads the file again
        pass
    return ranks


def _ranked_lengths(added_tokens: list[str]) -> Any:
    """models/qwen_lengths.py's QwenLengths on the cached ranks (its __init__ reads the ranks file itself)."""
    import re

    import tiktoken

    from vlmlint.models.profiles import QWEN_PATTERN
    from vlmlint.models.qwen_lengths import QwenLengths

    counter = QwenLengths.__new__(QwenLengths)
    counter._encoding = tiktoken.Encoding(
        "vlmlint-qwen", pat_str=QWEN_PATTERN, mergeable_ranks=qwen_ranks(), special_tokens={}
    )
    ordered = sorted(set(added_tokens), key=len, reverse=True)  # as QwenLengths.__init__ orders them
    counter._split = re.compile("|".join(map(re.escape, ordered))) if ordered else None
    return counter


# --- the image processor's settings -----------------------------------------------------------------------


def qwen_image_attributes(image_config: Mapping[str, Any]) -> Any:
    """What Qwen2VLImageProcessorPil(**file) holds that settings_from reads: its size with the file's
    min_pixels / max_pixels written over it (its __init__'s backward compatibility), the rest the
    file's value or the class's."""
    from types import SimpleNamespace

    size = image_config.get("size")
    size = dict(_QWEN_DEFAULTS["size"]) if size is None else dict(size)
    if image_config.get("min_pixels") is not None:
        size["shortest_edge"] = image_config["min_pixels"]
        size.pop("min_pixels", None)
    if image_config.get("max_pixels") is not None:
        size["longest_edge"] = image_config["max_pixels"]
        size.pop("max_pixels", None)
    values = {key: image_config.get(key, default) for key, default in _QWEN_DEFAULTS.items() if key != "size"}
    return SimpleNamespace(size=size, **values)


def light_profile(profile: Any, folder: Path) -> dict[str, Any] | None:
    """The profile's files when it can load light here, else None (the ordinary path runs)."""
    if profile.tokenizer != "qwen" or installed_transformers() not in LIGHT_TRANSFORMERS:
        return None
    if _torchvision_installed():  # AutoImageProcessor would give the torchvision class: another name
        return None
    from vlmlint.models.registry import find_family

    def read(name: str) -> dict[str, Any]:
        path = folder / name
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    image_config = read("preprocessor_config.json")
    processor_config = read("processor_config.json")
    tokenizer_config = read("tokenizer_config.json")
    if not image_config or "image_processor" in processor_config:
        return None
    if any("auto_map" in c for c in (image_config, processor_config, tokenizer_config)):
        return None
    processor_class = (
        processor_config.get("processor_class")
        or image_config.get("processor_class")
        or tokenizer_config.get("processor_class")
    )
    family = find_family(processor_class, image_config.get("image_processor_type"))
    if (
        family is None
        or family.name not in _LIGHT_FAMILIES
        or tokenizer_config.get("tokenizer_class") != "Qwen2Tokenizer"
    ):
        return None
    if image_config.get("image_processor_type") not in ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"):
        return None
    return {
        "family": family,
        "image_config": image_config,
        "processor_config": processor_config,
        "tokenizer_config": tokenizer_config,
        "model_config": read("config.json"),
        "processor_class": processor_class,
    }


def image_processor_name(image_config: Mapping[str, Any]) -> str:
    """The class AutoImageProcessor gives without torchvision: the type's PIL backend (`X`/`XFast` -> `XPil`)."""
    name = str(image_config.get("image_processor_type"))
    return (name[:-4] if name.endswith("Fast") else name) + "Pil"


def chat_template_of(folder: Path, tokenizer_config: Mapping[str, Any]) -> str | None:
    """models._read_chat_template's order: chat_template.jinja, chat_template.json, processor_config.json's,
    then the tokenizer's (tokenizer_config.json's chat_template)."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json"):
        file = folder / name
        if file.is_file():
            template = json.loads(file.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(template, str):
                return template
    template = tokenizer_config.get("chat_template")
    return template if isinstance(template, str) else None


def bpe_file() -> str:
    from vlmlint.models.profiles import qwen_bpe_file

    return str(qwen_bpe_file()[0])


def env_disabled() -> bool:
    """VLMLINT_LIGHT=0: load every model through transformers (the tests' other side)."""
    return os.environ.get("VLMLINT_LIGHT", "1") == "0"
