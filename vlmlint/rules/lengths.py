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
        if not context.image_placeholder:  # a plain encoder: the text goes to its own text tower
            yield self.finding(
                row,
                f"text length {row.seq_len} tokens > the text encoder's {limit} positions "
                "(the image is not part of this sequence)",
                f"shorten the text to {limit} tokens or tokenize with truncation=True, max_length={limit}",
            )
            return
        image_total = sum(t or 0 for t in row.image_tokens)
        yield self.finding(
            row,
            f"sequence length {row.seq_len} > max length {limit} "
            f"({row.text_tokens} text tokens + {image_total} image tokens in {len(row.images)} image(s))",
            f"raise --max-length to {row.seq_len}, lower max_pixels, or split the conversation",
        )


class VisionPositionOverflow(Rule):
    """An image gives a plain vision encoder (ViT, CLIP, SigLIP) more patches than its position table holds.

    **Why** The encoder has one learned position per patch of its training size, (image_size /
    patch_size)^2 plus one CLS token for ViT and CLIP: 197 for ViT-B/16 at 224, 577 for CLIP-L/14
    at 336, 729 for SigLIP-so400m/14 at 384 (no CLS). When the image processor does not resize to
    that size (`do_resize` false, or a `size` other than the model's image_size), ViT and CLIP raise
    "Input image size (H*W) doesn't match model (S*S)" and SigLIP fails adding its position
    embeddings, unless the model is called with `interpolate_pos_encoding=True`.

    **Example** A 640x480 photo with google/vit-base-patch16-224 and `do_resize` false: 30x40
    patches + CLS = 1201 vision tokens > 197 positions.

    **Fix** Let the image processor resize to the model's size (`do_resize` true, `size` 224x224 for
    ViT-B/16 at 224), resize the images beforehand, or call the model with
    `interpolate_pos_encoding=True` if it was trained for that.
    """

    code = "VLM403"
    name = "vision-position-overflow"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.vision_max_positions
        if limit is None:
            return
        side = context.vision_image_size
        for position, info in enumerate(row.images, start=1):
            if info.tokens is None or info.tokens <= limit or info.grid is None:
                continue
            rows, cols = info.grid[0], info.grid[1]
            cls = info.tokens - rows * cols
            yield self.finding(
                row,
                f"image {position} ({info.width}x{info.height}, processed at "
                f"{info.resized_width}x{info.resized_height}): {info.tokens} vision tokens "
                f"({rows}x{cols} patches" + (f" + {cls} CLS" if cls else "") + ") > the vision "
                f"encoder's {limit} positions",
                f"set do_resize true and size to {side}x{side} in the image processor, resize the image to "
                f"{side}x{side} beforehand, or call the model with interpolate_pos_encoding=True",
            )
