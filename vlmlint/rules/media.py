"""Rules about videos and audio clips, which vlmlint reads the references of but does not count yet."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.records import Finding, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def uncounted(row: RowResult) -> str:
    """ "1 video and 2 audio clips": what of the row is not counted ("" when nothing)."""
    videos = sum(info.kind == "video" for info in row.media)
    audios = len(row.media) - videos
    named = [_plural(videos, "video")] if videos else []
    if audios:
        named.append(_plural(audios, "audio clip"))
    return " and ".join(named)


class MediaNotCounted(Rule):
    """The row has a video or an audio clip, which vlmlint does not count yet: its lengths are a lower bound.

    **Why** A video is where sequence lengths explode (a 10 s 720p clip is some 7,200 Qwen2.5-VL
    tokens), and audio adds its own tokens; vlmlint checks such a clip's file (missing, unreadable,
    outside the folder, remote: VLM103, VLM201, VLM104, VLM105) and its placeholders (VLM301), but
    counts only the row's text and images. The row's sequence length is then a lower bound: a
    length rule (VLM401, VLM404) that fires is right, since the real row is longer still, but one
    that stays silent does not mean the row fits. Said on every such row so that no video or audio
    row passes as if it had been counted.

    **Example** LLaMA-Factory's `mllm_video_demo.json`: `{"messages": [{"role": "user", "content":
    "<video>Why is this video funny?"}, ...], "videos": ["mllm_demo_data/1.mp4"]}` counts as 40 text
    tokens, without the video's. Also `audios`, LLaVA's and Qwen-VL-finetune's `video`, a video
    given as a list of frames, and typed `video`, `video_url`, `audio`, `audio_url`, `input_audio` parts.

    **Fix** Nothing is wrong with the row: check its real length with the model's own processor
    (its video processor needs torch and torchvision) and leave headroom under `--max-length`, or
    `--ignore VLM109` once you have. The summary counts the rows concerned.
    """

    code = "VLM109"
    name = "media-not-counted"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        if not row.media:
            return
        what = uncounted(row)
        if row.seq_len is not None:
            bound = (
                f"sequence length {row.seq_len} ({row.text_tokens} text tokens + "
                f"{sum(t or 0 for t in row.image_tokens)} image tokens) is a lower bound"
            )
        else:
            bound = "its length would be a lower bound"
        yield self.finding(
            row,
            f"the row's {what} {'is' if len(row.media) == 1 else 'are'} not counted (vlmlint does not "
            f"count video or audio yet): {bound}",
            "check the row's length with the model's own processor and leave headroom under --max-length, "
            "or --ignore VLM109",
        )
