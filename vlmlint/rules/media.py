"""Rules about videos and audio clips: their files, and the ones vlmlint does not count."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.records import Finding, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def uncounted(row: RowResult) -> str:
    """ "1 video and 2 audio clips": what of the row is not counted ("" when nothing)."""
    videos = sum(info.kind == "video" and info.tokens is None for info in row.media)
    audios = sum(info.kind != "video" and info.tokens is None for info in row.media)
    named = [_plural(videos, "video")] if videos else []
    if audios:
        named.append(_plural(audios, "audio clip"))
    return " and ".join(named)


class MediaNotCounted(Rule):
    """The row has a video or an audio clip vlmlint does not count: its lengths are a lower bound.

    **Why** A video is where sequence lengths explode (a 10 s 720p clip is thousands of Qwen2.5-VL
    tokens), and audio adds its own tokens. vlmlint counts a video where the model's family has a
    video formula (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: docs/video.md) and the pipeline samples frames as
    the model's own video processor does (`--pipeline hf`, the default); it checks every clip's file
    (missing, unreadable, outside the folder, remote: VLM103, VLM201, VLM104, VLM105) and its
    placeholders (VLM301). Any other clip (audio, a video of another family or under a trainer
    pipeline, a clip whose header cannot be read) is not counted, and the row's sequence length is
    then a lower bound: a length rule (VLM401, VLM404) that fires is right, since the real row is
    longer still, but one that stays silent does not mean the row fits. Said on every such row so
    that no video or audio row passes as if it had been counted; the message says why.

    **Example** LLaMA-Factory's `mllm_audio_demo.json`: `{"messages": [{"role": "user", "content":
    "<audio>What's that sound?"}, ...], "audios": ["mllm_demo_data/1.mp3"]}` counts as its text
    tokens, without the clip's. Also `videos` with a model whose videos are not counted, LLaVA's and
    Qwen-VL-finetune's `video`, a video given as a list of frames, and typed `video`, `video_url`,
    `audio`, `audio_url`, `input_audio` parts.

    **Fix** Nothing is wrong with the row: check its real length with the model's own processor
    (its video processor needs torch and torchvision) and leave headroom under `--max-length`, or
    `--ignore VLM109` once you have. The summary counts the rows concerned.
    """

    code = "VLM109"
    name = "media-not-counted"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        what = uncounted(row)
        if not what:
            return
        if row.seq_len is not None:
            counted_videos = sum(info.tokens or 0 for info in row.media)
            videos = f" + {counted_videos} video tokens" if counted_videos else ""
            bound = (
                f"sequence length {row.seq_len} ({row.text_tokens} text tokens + "
                f"{sum(t or 0 for t in row.image_tokens)} image tokens{videos}) is a lower bound"
            )
        else:
            bound = "its length would be a lower bound"
        uncounted_media = [info for info in row.media if info.tokens is None]
        videos_only = all(info.kind == "video" for info in uncounted_media)
        why = (
            context.video_refusal if videos_only and context.video_refusal else "vlmlint does not count them"
        )
        if videos_only and context.video_refusal is None:
            why = "its videos cannot all be read"
        elif not videos_only:
            why = "vlmlint does not count audio yet" + (
                f"; {context.video_refusal}" if context.video_refusal else ""
            )
        yield self.finding(
            row,
            f"the row's {what} {'is' if len(uncounted_media) == 1 else 'are'} not counted ({why}): {bound}",
            "check the row's length with the model's own processor and leave headroom under --max-length, "
            "or --ignore VLM109",
        )
