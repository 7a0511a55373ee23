"""The built-in Qwen-VL profiles loaded without transformers: a small scan starts in a fraction of a second.

transformers' own loading costs seconds before the first row (issue 23): importing it, the lazy-import
scan of its models folder on the first Auto* access, AutoTokenizer building the tokenizer from its
JSON in Python, the processor-class check. For a built-in profile whose counts come from the family's
formula none of that is needed, and this module reads what the scan needs from the profile's own
files instead, reproducing transformers 5.24.0 and 5.25.0 (the releases `LIGHT_TRANSFORMERS` names; on any other
the ordinary path runs):

- the tokenizer's answers (`LightTokenizer`): tokenization_utils_base.py's special_tokens_map,
  all_special_tokens and added_tokens_decoder from tokenizer_config.json (bos/eos/unk/sep/pad/cls/mask,
  extra_special_tokens, the added tokens by id); token counts from models/qwen_lengths.py's tiktoken
  counter on the same Qwen ranks; anything else (offsets, ids for a trainer's pipeline) from the real
  tokenizer, loaded on first use;
- the image settings: what the family's PIL image processor holds for the profile's file
  (Family.light_image_attributes: Qwen-VL's is Qwen2VLImageProcessorPil.__init__'s, in qwen_vl.py), read
  by the family's own settings_from; the image processor object itself (for --exact and the self-check)
  is loaded on first use;
- the chat template: vlmlint/template_env.py (transformers' jinja environment and message preparation),
  which vlmlint/templates.py renders with.

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

from vlmlint.template_env import LIGHT_TRANSFORMERS, installed_transformers

# The named special tokens of tokenization_utils_base.py (SPECIAL_TOKENS_ATTRIBUTES), in its order.
_SPECIAL_ATTRIBUTES = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip


@cache
def _torchvision_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchvision") is not None


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
        or family.light_image_attributes is None  # the family's image settings need transformers' class
        or tokenizer_config.get("tokenizer_class") != "Qwen2Tokenizer"
    ):
        return None
    named = image_config.get("image_processor_type")
    if named not in family.image_processor_types or str(named).endswith("Pil"):
        return None  # image_processor_name maps a file's X / XFast to the XPil class AutoImageProcessor gives
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
