"""Where a row's answer tokens and image tokens lie in the trainer's input_ids, and what a cut loses.

Trainers cut a long row by token position, so their fate for it depends on where the answer (the
trained-on assistant turns) and the image tokens sit. vlmlint knows the row's length and each image's
token span (`TextEncoder.image_spans`); the answer's positions are found the way trainers find them: the
conversation up to an assistant turn, rendered with the generation prompt, is the prompt, and its token
count is where that turn's labels start; the conversation up to the end of the turn gives where they
end. This costs a few renders and one batched tokenizer call per row, so presets call it only for rows
over the trainer's limit.

Positions are those of the trainer's own tokenization: TRL (`add_special_tokens=False` in its
collator) and ms-swift (its templates write BOS themselves) add no special tokens to the rendered text,
so tokens the tokenizer would add around it (a BOS the processor call adds) are left out here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from vlmlint.records import Role

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder

Rounds = Literal["all_assistant", "last_assistant", "every_token"]


@dataclass(frozen=True)
class Layout:
    """One row as the trainer tokenizes it."""

    length: int  # tokens before any cut
    # [start, end) of each trained answer region: an assistant turn's text through its end-of-turn tokens
    answers: tuple[tuple[int, int], ...]
    # (start, end, image tokens) of each image: its span (tile markers between runs included) and how many
    # of the span's positions are the image token itself
    images: tuple[tuple[int, int, int], ...]
    exact: bool = True  # False: the answer's positions could not be found; everything past the first
    #                      assistant turn's start counts as answer

    @property
    def image_tokens(self) -> int:
        return sum(tokens for _, _, tokens in self.images)

    def answer_tokens(self) -> int:
        return sum(end - start for start, end in self.answers) - self._images_in(self.answers)

    def _images_in(self, regions: tuple[tuple[int, int], ...]) -> int:
        """Image tokens inside the regions (an image in an assistant turn is not a label)."""
        return sum(
            tokens
            for start, end, tokens in self.images
            for low, high in regions
            if low <= start and end <= high
        )

    def answer_lost_past(self, cut: int) -> int:
        """Answer tokens at positions >= cut (a right cut keeping [0, cut))."""
        regions = tuple((max(start, cut), end) for start, end in self.answers if end > cut)
        return sum(end - start for start, end in regions) - self._images_in(regions)

    def answer_lost_before(self, cut: int) -> int:
        """Answer tokens at positions < cut (a left cut keeping [cut, length))."""
        regions = tuple((start, min(end, cut)) for start, end in self.answers if start < cut)
        return sum(end - start for start, end in regions) - self._images_in(regions)

    def image_tokens_past(self, cut: int) -> int:
        """Image tokens at positions >= cut (tile markers of a span cut through are counted as images)."""
        return sum(
            tokens if start >= cut else min(tokens, end - cut)
            for start, end, tokens in self.images
            if end > cut
        )

    def protected_cut(self, keep: int, side: Literal["left", "right"]) -> int:
        """Where a cut that keeps every image token and `keep` other tokens falls (ms-swift's `_truncate`).

        right: the first `keep` non-image positions stay; the result is the position from which every
        non-image token is lost. left: the last `keep` stay; the result is the position before which
        every non-image token is lost. A cut inside an image's span is moved to the span's edge: only
        tile markers lie there, never answer text.
        """
        spans = sorted(self.images)
        if side == "left":  # mirror: positions counted from the end
            spans = sorted((self.length - end, self.length - start, tokens) for start, end, tokens in spans)
        cursor, remaining = 0, keep
        for start, end, tokens in spans:
            gap = start - cursor
            if remaining <= gap:
                cut = cursor + remaining
                break
            remaining -= gap
            markers = (end - start) - tokens
            cursor = end
            if remaining <= markers:
                cut = end
                break
            remaining -= markers
        else:
            cut = cursor + remaining
        return cut if side == "right" else self.length - cut


def _answer_bounds(
    encoder: TextEncoder, row: CountedRow, rounds: Rounds
) -> tuple[tuple[tuple[int, int], ...], bool] | None:
    """Each trained assistant turn's [start, end) in the trainer's positions, and whether exact.

    None when the row has no assistant turn.
    """
    messages = row.sample.messages
    turns = [k for k, message in enumerate(messages) if message.role is Role.ASSISTANT]
    if not turns:
        return None
    if rounds == "last_assistant":
        turns = turns[-1:]
    full = encoder.render(messages)
    placeholder = encoder.family.placeholder
    texts: list[str] = []
    saved: list[int] = []
    try:
        for k in turns:
            for prefix in (
                encoder.render_prefix(messages[:k], True),
                encoder.render_prefix(messages[: k + 1], False),
            ):
                if not full.startswith(prefix):  # the template renders history differently: no prefix
                    raise ValueError("not a prefix")
                images = prefix.count(placeholder) if placeholder else 0
                text, extra = encoder.compose(prefix, row.counts[:images])
                texts.append(text)
                saved.append(extra)
    except Exception:  # noqa: BLE001 (templates raise anything): fall back to the approximation below
        texts = []
    if not texts:
        return (), False
    ids = encoder.encode(texts)
    positions = [len(tokens) + extra for tokens, extra in zip(ids, saved, strict=True)]
    return tuple(zip(positions[::2], positions[1::2], strict=True)), True


def row_layout(
    encoder: TextEncoder, row: CountedRow, seq_len: int, rounds: Rounds = "all_assistant"
) -> Layout:
    """The row's length, answer regions and image spans as the trainer tokenizes it."""
    lead, trail = encoder.added_special_tokens()
    length = seq_len - lead - trail
    images: tuple[tuple[int, int, int], ...] = ()
    if row.counts and encoder.family.placeholder:
        spans = encoder.image_spans(row) or ()
        images = tuple(
            (start - lead, end - lead, count.tokens)
            for (start, end), count in zip(spans, row.counts, strict=False)
        )
    if rounds == "every_token":  # the first token is never a label (nothing predicts it)
        return Layout(length, ((1, length),), images)
    bounds = _answer_bounds(encoder, row, rounds)
    if bounds is None:
        return Layout(length, (), images)
    answers, exact = bounds
    if not exact:
        return Layout(length, ((_first_answer_start(encoder, row), length),), images, exact=False)
    return Layout(length, answers, images)


def _first_answer_start(encoder: TextEncoder, row: CountedRow) -> int:
    """The approximation's start: where the first assistant turn's labels begin, or 0 if unknown."""
    messages = row.sample.messages
    first = next(k for k, message in enumerate(messages) if message.role is Role.ASSISTANT)
    try:
        prefix = encoder.render_prefix(messages[:first], True)
        images = prefix.count(encoder.family.placeholder) if encoder.family.placeholder else 0
        text, extra = encoder.compose(prefix, row.counts[:images])
        return len(encoder.encode([text])[0]) + extra
    except Exception:  # noqa: BLE001 (templates raise anything)
        return 0
