"""What the video family tests share: a recorded case's clip as header facts, and a prompt's length with
its videos composed (each run written once) and tokenized, as the engine counts a row."""

from __future__ import annotations

from vlmlint.engine import Scanner
from vlmlint.models.base import VideoCount
from vlmlint.records import VideoMeta


def clip_meta(case: dict) -> VideoMeta:
    """The header facts of a recorded case's clip: `frames` frames of `size` [height, width] at `fps`."""
    height, width = case["size"]
    fps = case["fps"]
    return VideoMeta(
        frames=case["frames"], fps=fps, duration=case["frames"] / fps, width=width, height=height
    )


def prompt_length(scanner: Scanner, prompt: str, videos: tuple[VideoCount, ...]) -> int:
    """input_ids' length for `prompt` (the recorder's text, its video slots written) with `videos` expanded."""
    composed, saved = scanner.encoder.compose(prompt, [], videos=videos)
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved
