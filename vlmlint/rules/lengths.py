"""Rules about sequence lengths: the training length, truncation, the model's context, token budgets.

Two limits are involved. The model's context is the text model's `max_position_embeddings`
(config.json); VLM404 reports rows above it, whatever `--max-length` says. The training length is
`--max-length`; VLM401 reports rows above it. Without `--max-length` the training length defaults
to the model's context, and VLM401 then stays silent: that overflow is VLM404's (one finding, not
two, for one cause). The same holds when `--max-length` equals the model's context.

Fix hints name concrete values: the `--max-length` that fits the row and, for Qwen-VL (whose images
become (resized area) / (patch_size * merge_size)^2 tokens), the `max_pixels` that makes it fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from vlmlint.records import Finding, RowResult, Severity
from vlmlint.rules.base import MAX_LISTED, Rule, RuleContext, listed


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _image_total(row: RowResult) -> int:
    return sum(t or 0 for t in row.image_tokens)


def largest_cap(tokens: list[int], budget: int) -> int:
    """The largest per-image cap T with sum(min(t, T)) <= budget; 0 when even T = 1 does not fit.

    Images already below the cap keep their count; only the larger ones shrink to at most T.
    """
    if not tokens or budget < len(tokens):
        return 0
    if sum(tokens) <= budget:
        return max(tokens)
    low, high = 1, max(tokens)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(t, middle) for t in tokens) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def max_pixels_hint(row: RowResult, context: RuleContext, cap: int) -> str | None:
    """For families with a max_pixels setting (Qwen-VL): the setting that keeps each image <= cap tokens.

    An image of area A becomes A / factor^2 tokens (factor = patch_size * merge_size), and smart_resize
    keeps the area at or below max_pixels, so max_pixels = cap * factor^2 (a multiple of factor^2)
    caps every image at `cap` tokens. Two exceptions are named in the hint. An image above the cap
    that smart_resize upscaled to min_pixels is upscaled again whatever max_pixels says: the hint
    then also lowers min_pixels to (cap // 4) * factor^2, since an upscale to q tokens gives
    ceil(a) * ceil(b) < (a + 1)(b + 1) <= 4ab = 4q tokens when both sides a, b (in factor units)
    are at least 1. And an image more elongated than cap:1 keeps at least one factor-sized row,
    which can leave it above the cap: the hint says so. None when the model has no such setting,
    when no cap of at least one token exists, or when the current max_pixels is already no larger.
    """
    settings = context.image_settings
    factor = getattr(settings, "factor", None)
    current = getattr(settings, "max_pixels", None)
    if not factor or current is None or cap < 1:
        return None
    pixels = cap * factor * factor
    if not getattr(settings, "do_resize", True):
        return (
            f"resize the images beforehand to at most {pixels} pixels each, sides multiples of {factor} "
            "(do_resize is false here, so max_pixels has no effect)"
        )
    if pixels >= current:
        return None
    hint = f"set max_pixels <= {pixels} (at most {cap} image tokens per image)"
    # An image smart_resize upscaled to min_pixels stays upscaled under any max_pixels; with
    # min_pixels <= cap/4 tokens, ceil() on each side keeps it under the cap (see the docstring).
    floor_pixels = max(1, cap // 4) * factor * factor
    min_pixels = getattr(settings, "min_pixels", None)
    upscaled = any(
        (info.tokens or 0) > cap
        and info.width
        and info.height
        and info.resized_width
        and info.resized_height
        and info.resized_width * info.resized_height > info.width * info.height
        for info in row.images
    )
    if upscaled and min_pixels is not None and min_pixels > floor_pixels:
        hint += f" and min_pixels <= {floor_pixels}"
    elongated = [
        position
        for position, info in enumerate(row.images, start=1)
        if info.width
        and info.height
        and (info.tokens or 0) > cap
        and max(info.width, info.height) / min(info.width, info.height) > cap
    ]
    if elongated:
        names = listed([str(p) for p in elongated])
        hint += (
            f" (image {names} is more elongated than {cap}:1; smart_resize keeps one {factor}-pixel row "
            "and may leave it above that)"
        )
    return hint


def _lower_bound(row: RowResult) -> str:
    """What a message adds for a row whose videos or audio clips are not counted (VLM109), else ""."""
    if not row.media:
        return ""
    from vlmlint.rules.media import uncounted

    return f"; a lower bound: the row's {uncounted(row)} {'is' if len(row.media) == 1 else 'are'} not counted"


def _at_least(row: RowResult) -> str:
    return "at least " if row.media else ""


def _fit_hint(row: RowResult, context: RuleContext, limit: int) -> tuple[str | None, bool]:
    """(a max_pixels hint that makes the row fit `limit`, whether any image setting can make it fit).

    None and True for a row whose videos or audio are not counted: no image setting can be said to fit it.
    """
    if row.text_tokens is None:
        return None, False
    if row.media:
        return None, True
    tokens = [t or 0 for t in row.image_tokens]
    cap = largest_cap(tokens, limit - row.text_tokens)
    return max_pixels_hint(row, context, cap), cap >= 1


def _encoder_text_finding(rule: Rule, row: RowResult, limit: int) -> Finding:
    """A plain encoder's caption above its text tower's positions (CLIP: 77); the image is apart."""
    return rule.finding(
        row,
        f"text length {row.seq_len} tokens > the text encoder's {limit} positions "
        "(the image is not part of this sequence)",
        f"shorten the text to {limit} tokens or tokenize with truncation=True, max_length={limit}",
    )


class SequenceTooLong(Rule):
    """The row's full sequence (text plus expanded image tokens) is longer than `--max-length`.

    **Why** Above the training max length the trainer truncates, which can cut an image span
    ("Image features and image tokens do not match", VLM402) or drop the answer, or it drops the
    row. This rule reports the training length set with `--max-length`; a row above the model's own
    context is VLM404, and without `--max-length` (or with `--max-length` equal to the model's
    context) only VLM404 reports it.

    **Example** A 1080x1920 screenshot (2691 image tokens with Qwen2-VL hub settings) plus a
    2,000-token answer, with `--max-length 4096`.

    **Fix** Raise `--max-length` to the reported length, lower the image resolution (the hint gives
    the `max_pixels` that fits for Qwen-VL), or split the conversation.
    """

    code = "VLM401"
    name = "sequence-too-long"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.max_length
        if limit is None or row.seq_len is None or row.seq_len <= limit:
            return
        if limit == context.max_position_embeddings:
            return  # the model's context: VLM404 reports it
        model = context.max_position_embeddings
        raise_to = f"raise --max-length to {_at_least(row)}{row.seq_len}"
        if model is not None and row.seq_len > model:
            raise_to += f" (above the model's {model}-token context: see VLM404)"
        if not context.image_placeholder:  # a plain encoder: the text goes to its own text tower
            yield _encoder_text_finding(self, row, limit)
            return
        hint, fits = _fit_hint(row, context, limit)
        options = [raise_to]
        if hint:
            options.append(f"{hint} to fit {limit}")
        elif not fits and row.images:
            options.append(
                f"shorten the text (its {row.text_tokens} tokens leave no room for the image(s) within "
                f"{limit}: no image setting fits it)"
            )
        options.append("split the conversation")
        yield self.finding(
            row,
            f"sequence length {row.seq_len} > max length {limit} "
            f"({row.text_tokens} text tokens + {_image_total(row)} image tokens in {len(row.images)} image(s)"
            f"{_lower_bound(row)})",
            ", ".join(options[:-1]) + f", or {options[-1]}",
        )


class TruncationCutsImage(Rule):
    """Truncating the row to `--max-length` drops some or all of an image's tokens.

    **Why** The model matches image features to image tokens: Qwen-VL, LLaVA, Idefics3 and the
    others raise "Image features and image tokens do not match, tokens: 1023, features: 1024" when a
    trainer's truncation (after the processor ran) cuts through an image's expansion or drops an
    image's tokens entirely while its pixels are still passed. With `truncation=True` in the
    processor call, transformers raises a token-count mismatch instead. The cut is at `--max-length`
    (default: the model's context) on the `--truncation-side` (right: the end is dropped; left: the
    start is).

    **Example** A 1,200-token prompt, then a 1024-token image, then the answer, with
    `--max-length 2048` and right truncation: the cut at token 2048 lands inside the image's tokens
    [1214, 2238).

    **Fix** Raise `--max-length` to the row's length, drop rows longer than the limit instead of
    truncating them, or make the images smaller (the hint gives `max_pixels` for Qwen-VL) so the
    row fits.
    """

    code = "VLM402"
    name = "truncation-cuts-image"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.max_length
        spans = row.image_spans
        if limit is None or row.seq_len is None or row.seq_len <= limit or not spans:
            return
        left = context.truncation_side == "left"
        cut = row.seq_len - limit if left else limit
        cuts, dropped = [], []
        for position, (start, end) in enumerate(spans, start=1):
            if start < cut < end:
                cuts.append(f"image {position}'s tokens [{start}, {end})")
            elif (end <= cut) if left else (start >= cut):
                dropped.append(f"image {position} [{start}, {end})")
        if not cuts and not dropped:
            return
        side = (
            f"left truncation keeps tokens [{cut}, {row.seq_len})" if left else f"right truncation at {limit}"
        )
        parts = []
        if cuts:
            parts.append(f"the cut at token {cut} falls inside {listed(cuts)}")
        if dropped:
            where = "before" if left else "after"
            verb = "lies" if len(dropped) == 1 else "lie"
            parts.append(f"{listed(dropped)} {verb} wholly {where} the cut (all its image tokens dropped)")
        options = [
            f"raise --max-length to {_at_least(row)}{row.seq_len}",
            f"drop rows longer than {limit} instead of truncating",
        ]
        hint, _ = _fit_hint(row, context, limit)
        if hint:
            options.append(f"{hint} so the row fits")
        yield self.finding(
            row,
            f"sequence length {row.seq_len} > max length {limit}: {side}; "
            + "; ".join(parts)
            + ' ("Image features and image tokens do not match")'
            + (f" (positions{_lower_bound(row).removeprefix(';')})" if row.media else ""),
            ", ".join(options[:-1]) + f", or {options[-1]}",
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


class ExceedsModelContext(Rule):
    """The row is longer than the text model's context (`max_position_embeddings` in config.json).

    **Why** The model was trained with positions up to its context: beyond it RoPE models extrapolate
    and degrade, and models with learned position tables (CLIP's and SigLIP's text towers) fail with
    an index error. This holds whatever `--max-length` says; a trainer that does not truncate feeds
    the whole row. For M-RoPE models (Qwen-VL) an image's tokens share positions, so the largest
    position id is smaller than the length: the message gives it, computed as
    `Qwen2VLModel.get_rope_index` does (each image moves the position on by max(h, w) / merge, its
    grid in merged patches), and says whether it stays inside the context too. A video's frame
    groups step the temporal position on by time (Qwen2-VL one per group, Qwen2.5-VL
    tokens_per_second per second) without moving the text on, so a long clip's largest position id can
    pass the context, or even the row's length: the rule fires on it alone.

    **Example** A 6,000-word prompt and a 640x480 photo with a model whose context is 4096 tokens
    (5,400 tokens).

    **Fix** Shorten or split the conversation, or lower the image resolution (the hint gives the
    `max_pixels` that fits for Qwen-VL). Raising `--max-length` does not help: the limit is the
    model's.
    """

    code = "VLM404"
    name = "exceeds-model-context"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.max_position_embeddings
        if limit is None or row.seq_len is None:
            return
        position = row.max_position_id
        if row.seq_len <= limit and (position is None or position < limit):
            return
        if not context.image_placeholder:  # a plain encoder: the text goes to its own text tower
            yield _encoder_text_finding(self, row, limit)
            return
        if row.seq_len <= limit:  # (position >= limit: a video's time steps past its tokens)
            yield self.finding(
                row,
                f"its largest M-RoPE position id {position} >= the model's context {limit} "
                f"(max_position_embeddings), though its {row.seq_len} tokens fit: a video's frame groups "
                "step the temporal position by time, further than its tokens go",
                "sample fewer frames (a lower fps or max_frames), or cut the video into shorter clips",
            )
            return
        message = (
            f"sequence length {row.seq_len} > the model's context {limit} (max_position_embeddings; "
            f"{row.text_tokens} text tokens + {_image_total(row)} image tokens in {len(row.images)} image(s)"
            f"{_lower_bound(row)})"
        )
        if position is not None:
            if position >= limit:
                message += f"; its largest M-RoPE position id {position} is beyond it too"
            else:
                message += (
                    f"; its largest M-RoPE position id {position} stays inside it (image tokens share "
                    "positions), but the model attends over more tokens than its context"
                )
        hint, fits = _fit_hint(row, context, limit)
        if hint:
            fix = f"{hint} to fit {limit}, or shorten or split the conversation"
        elif not fits and row.images:
            fix = (
                f"shorten or split the conversation: its {row.text_tokens} text tokens leave no room for "
                f"the images within {limit} (no image setting fits it)"
            )
        else:
            over = row.seq_len - limit
            fix = f"shorten the row by {_at_least(row)}{over} tokens or split the conversation"
        yield self.finding(row, message, fix)


class NearLimit(Rule):
    """The row fits its length limit, but with little room to spare.

    **Why** The count assumes this exact chat template, image settings and tokenizer; a system
    prompt the trainer adds, an EOS or label token, a longer answer after cleaning, or a larger
    `max_pixels` pushes such a row over the limit (VLM401/VLM404) on the next run. The limit is the
    tighter of `--max-length` and the model's context; the share is the threshold
    `near_limit_share` (default 0.9).

    **Example** A 3,900-token row with `--max-length 4096` (95%).

    **Fix** Leave headroom: raise `--max-length` (the hint gives the value that brings the row under
    the share), or lower `max_pixels` for Qwen-VL.
    """

    code = "VLM405"
    name = "near-limit"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        if row.seq_len is None:
            return
        limits = [
            (value, label)
            for value, label in (
                (context.max_length, "max length"),
                (context.max_position_embeddings, "the model's context"),
            )
            if value is not None
        ]
        if not limits:
            return
        limit, label = min(limits, key=lambda item: item[0])
        if limit == context.max_position_embeddings:
            label = "the model's context"
        share = context.thresholds["near_limit_share"]
        if row.seq_len > limit or row.seq_len <= share * limit:
            return
        target = math.floor(share * limit)
        options = []
        if label == "max length":
            needed = math.ceil(row.seq_len / share)
            model = context.max_position_embeddings
            if model is None or needed <= model:
                options.append(f"raise --max-length to {needed}")
        if context.image_placeholder:
            hint, _ = _fit_hint(row, context, target)
            if hint:
                options.append(f"{hint} to stay under {target}")
        options.append(f"shorten the row by {row.seq_len - target} tokens")
        yield self.finding(
            row,
            f"sequence length {row.seq_len} is {row.seq_len / limit:.0%} of {label} {limit} "
            f"(above the {share:.0%} warning share)"
            + (f"{_lower_bound(row)}, so it may not fit at all" if row.media else ""),
            (", ".join(options[:-1]) + ", or " if len(options) > 1 else "") + options[-1],
        )


class ImageTokenBudget(Rule):
    """One image, or the row's images together, become more tokens than the memory budget allows.

    **Why** Activation memory grows with the image tokens (and attention with their square): one
    huge image, or many images in one row, can run a GPU out of memory in the middle of a run even
    when the row fits the length limit. The budgets are the thresholds
    `max_image_tokens_per_image` (default 16384) and `max_image_tokens_per_row` (default 32768).

    **Example** Qwen3-VL with max_pixels raised to 33554432: a 6000x6000 scan becomes 32768 image
    tokens.

    **Fix** Lower the image resolution (the hint gives `max_pixels` for Qwen-VL), split the row's
    images over several rows, or raise the thresholds if the hardware has room.
    """

    code = "VLM406"
    name = "image-token-budget"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        tokens = [t or 0 for t in row.image_tokens]
        if not tokens:
            return
        per_image = int(context.thresholds["max_image_tokens_per_image"])
        per_row = int(context.thresholds["max_image_tokens_per_row"])
        large = [(position, t) for position, t in enumerate(tokens, start=1) if t > per_image]
        total = sum(tokens)
        if not large and total <= per_row:
            return
        parts = [
            f"image {position}: {t} image tokens > {per_image} per image"
            for position, t in large[:MAX_LISTED]
        ]
        if len(large) > MAX_LISTED:
            parts.append(f"and {len(large) - MAX_LISTED:,} more images")
        if total > per_row:
            parts.append(f"the row's {len(tokens)} image(s): {total} image tokens > {per_row} per row")
        cap = min(per_image, largest_cap(tokens, per_row))
        hint = max_pixels_hint(row, context, cap)
        options = [hint] if hint else []
        if large:
            names = listed([_ordinal(p) for p, _ in large])
            options.append(f"downscale the {names} image")
        if total > per_row and len(tokens) > 1:
            options.append("split the images over several rows")
        options.append("raise the thresholds if the GPU has room")
        yield self.finding(
            row,
            "; ".join(parts) + " (memory risk)",
            ", ".join(options[:-1]) + f", or {options[-1]}",
        )


class OversizedText(Rule):
    """The row's text is so long that vlmlint does not tokenize it (above max_text_chars).

    **Why** A conversation of millions of characters is a broken row (a file pasted whole, a runaway
    generation, text concatenated by mistake): it is far beyond any model's context, and tokenizing it
    costs seconds and gigabytes (tokenizers need about 0.3 GB per MB of text), which a linter run on
    untrusted data in CI must not spend. The row is reported instead of counted.

    **Example** A row whose answer holds a 5 MB log file: 5,000,000 characters, some 1.2 million tokens.

    **Fix** Remove or cut the row; if rows this long are intended, raise the bound with
    `--threshold max_text_chars=N`.
    """

    code = "VLM408"
    name = "oversized-text"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        if row.count_error and row.count_error.startswith("oversized:"):
            limit = int(context.thresholds["max_text_chars"])
            yield self.finding(
                row,
                row.count_error.removeprefix("oversized:").strip(),
                f"remove or cut the row; to count it anyway, --threshold max_text_chars={limit * 10}",
            )
