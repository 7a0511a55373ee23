"""Rules about sequence lengths."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.rules.base import Finding, Rule, RuleContext, Severity
from vlmlint.sample import RowResult


class SequenceTooLong(Rule):
    """The row's full sequence (text plus expanded image tokens) is longer than the maximum length.

    **Why** Above the model's max_position_embeddings the run fails or degrades; above the training
    max length the trainer truncates, which can cut an image span ("Image features and image tokens
    do not match") or drop the answer.

    **Example** A 1080x1920 screenshot (2691 image tokens with Qwen2-VL hub settings) plus a
    2,000-token answer, with `--max-length 4096`.

    **Fix** Lower the image resolution (max_pixels), raise `--max-length` to the reported length,
    or split the conversation.
    """

    code = "VLM401"
    name = "sequence-too-long"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.max_length
        if limit is None or row.seq_len is None or row.seq_len <= limit:
            return
        image_total = sum(t or 0 for t in row.image_tokens)
        yield self.finding(
            row,
            f"sequence length {row.seq_len} > max length {limit} "
            f"({row.text_tokens} text tokens + {image_total} image tokens in {len(row.images)} image(s))",
            f"raise --max-length to {row.seq_len}, lower max_pixels, or split the conversation",
        )
