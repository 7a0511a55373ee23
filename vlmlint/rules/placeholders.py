"""Rules about image placeholders in the text."""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

from vlmlint.records import (
    IMAGE_PLACEHOLDER,
    MEDIA_PLACEHOLDERS,
    Finding,
    Message,
    Role,
    RowResult,
    Sample,
    Severity,
)
from vlmlint.rules.base import MAX_LISTED, Rule, RuleContext, listed


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class PlaceholderCountMismatch(Rule):
    """The row's image placeholders are not as many as its images (or its `<video>` / `<audio>` as its clips).

    **Why** The processor raises "The number of images does not match the number of <image>
    tokens" (or the model raises "Image features and image tokens do not match"); trainers that
    catch it drop the row. LLaMA-Factory and ms-swift do the same for videos and audio: "The
    number of videos does not match the number of <video> tokens". Typed `video` / `audio` parts
    count as placeholders; a LLaVA-Video row (`video`, no `image`) may write `<image>` for its video.

    **Example** `{"image": ["a.jpg", "b.jpg"], "conversations": [{"from": "human", "value":
    "<image>\\nCompare them."}, ...]}`: two images, one `<image>`. Or `{"messages": [{"role":
    "user", "content": "<video><video>Why is it funny?"}, ...], "videos": ["1.mp4"]}`: two
    `<video>` for one video.

    **Fix** Write one `<image>` per image, in order, or remove the extra images (the same with
    `<video>` per video and `<audio>` per audio clip).
    """

    code = "VLM301"
    name = "placeholder-count-mismatch"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        images = len(row.sample.images)
        if row.sample.problems:
            return
        yield from self._media(row)
        if row.placeholders != images:
            if row.placeholders > images:
                fix = f"remove the {_ordinal(images + 1)} <image> placeholder" + (
                    "s onwards" if row.placeholders - images > 1 else ""
                )
                fix += " or add the missing image" + ("s" if row.placeholders - images > 1 else "")
            else:
                fix = f"add {images - row.placeholders} more <image> placeholder(s) where the images belong"
            message = f"{row.placeholders} image placeholder(s) in the text but {images} image(s) in the row"
            if row.placeholders == 0 and row.sample.messages:
                # No placeholder at all: the processor places images only where the text holds one;
                # axolotl's collator appends the first image to the first user turn instead.
                message += (
                    " (the processor puts an image only where the text has a placeholder; axolotl "
                    "appends the row's first image to the first user turn)"
                )
                fix += ", or, if axolotl trains on this data, scan with --pipeline axolotl"
            yield self.finding(row, message, fix)
        elif row.count_error and row.count_error.startswith("placeholder:"):
            yield self.finding(
                row,
                row.count_error.removeprefix("placeholder:").strip(),
                f"remove literal {context.image_placeholder} tokens from the text; write <image> once per image",
            )

    def _media(self, row: RowResult) -> Iterator[Finding]:
        """<video> / <audio> placeholders (and typed parts) against the row's videos and audio clips."""
        sample = row.sample
        written: dict[str, int] = {}
        for message in sample.messages:
            for part in message.parts:
                if part.media:
                    written[part.media] = written.get(part.media, 0) + 1
        if not written and not sample.media:
            return
        for kind, token in MEDIA_PLACEHOLDERS.items():
            clips = sum(ref.kind == kind for ref in sample.media)
            placed = written.get(kind, 0)
            if placed == clips:
                continue
            if placed > clips:
                extra = placed - clips
                fix = f"remove the {_ordinal(clips + 1)} {token} placeholder" + (
                    " onwards" if extra > 1 else ""
                )
                fix += f" or add the missing {kind}" + ("s" if extra > 1 else "")
            else:
                fix = f"add {clips - placed} more {token} placeholder(s) where the {kind}s belong"
            yield self.finding(
                row,
                f"{placed} {kind} placeholder(s) {token} in the text but {clips} {kind}(s) in the row",
                fix,
            )


# -- text scans ---------------------------------------------------------------------------------------
# Each scanning rule builds its token finder once per RuleContext (i.e. per Scanner), never per row.


def _markup(token: str) -> bool:
    """Whether a special token looks like markup (<...> or [...]); others (e.g. a pad token "!") are
    ordinary characters that plain text holds everywhere, so they are not searched for."""
    return len(token) >= 3 and token[0] in "<[" and token[-1] in ">]" and not any(c.isspace() for c in token)


class _TokenFinder:
    """Finds any of a fixed set of tokens in text, longest first.

    One compiled regex per leading character: an alternation whose branches share a literal prefix
    lets `re` jump from one "<" to the next, which a mixed alternation ("<...|[...") cannot.
    """

    def __init__(self, tokens: Iterable[str]):
        groups: dict[str, list[str]] = {}
        for token in tokens:
            if token:
                groups.setdefault(token[0], []).append(token)
        self.patterns = tuple(
            re.compile("|".join(re.escape(t) for t in sorted(group, key=lambda t: (-len(t), t))))
            for _, group in sorted(groups.items())
        )
        self.leads = tuple(sorted(groups))  # a match holds its first character: most texts hold none

    def finditer(self, text: str) -> Iterable[re.Match[str]]:
        # Lazy, in text order: a text of millions of tokens never holds all its matches at once.
        if not any(lead in text for lead in self.leads):
            return ()
        if len(self.patterns) == 1:
            return self.patterns[0].finditer(text)
        return heapq.merge(*(p.finditer(text) for p in self.patterns), key=lambda m: m.start())


class _PerContext:
    """Builds a value once per RuleContext (the scanner's), e.g. a token finder, and keeps it."""

    def __init__(self, build: Callable[[RuleContext], _TokenFinder]):
        self._build = build
        self._context: RuleContext | None = None
        self._value: _TokenFinder | None = None

    def get(self, context: RuleContext) -> _TokenFinder:
        if context is not self._context or self._value is None:
            self._value = self._build(context)
            self._context = context
        return self._value


def _turn_label(position: int, message: Message) -> str:
    return f"turn {position} ({message.role.value})"


def _token_counts(finder: _TokenFinder, sample: Sample) -> dict[str, tuple[int, list[int]]]:
    """token -> (occurrences in the row's text, the turns that hold it), in order of first occurrence."""
    found: dict[str, tuple[int, list[int]]] = {}
    for position, message in enumerate(sample.messages):
        for part in message.parts:
            if part.is_image or not part.text:
                continue
            for match in finder.finditer(part.text):
                count, turns = found.get(match.group(0), (0, []))
                if not turns or turns[-1] != position:
                    turns.append(position)
                found[match.group(0)] = (count + 1, turns)
    return found


def _turns(turns: list[int]) -> str:
    return ("turn " if len(turns) == 1 else "turns ") + listed([str(t) for t in turns])


def _token_runs(finder: _TokenFinder, text: str) -> Iterator[tuple[str, int]]:
    """(token, copies) for each run of adjacent copies of one token, whitespace between allowed."""
    token, length, end = None, 0, 0
    for match in finder.finditer(text):
        if match.group(0) == token and (match.start() == end or text[end : match.start()].isspace()):
            length += 1
        else:
            if token is not None:
                yield token, length
            token, length = match.group(0), 1
        end = match.end()
    if token is not None:
        yield token, length


def _image_tokens(context: RuleContext) -> _TokenFinder:
    """Every token an expansion is made of: image tokens of all families, and this tokenizer's specials."""
    tokens = {IMAGE_PLACEHOLDER, *context.foreign_placeholders}
    tokens |= {t for t in context.special_tokens if _markup(t)}
    if context.image_placeholder:
        tokens.add(context.image_placeholder)
    return _TokenFinder(tokens)


_MAX_RUN_GROUPS = 20  # (turn, token) groups of runs a VLM302 message names


class PreExpandedTokens(Rule):
    """The text already holds expanded image tokens: a long run of one image token from an earlier processor run.

    **Why** The processor expands each placeholder again, so a stale run of hundreds of
    `<|image_pad|>` (or `<image>`, `<image_soft_token>`, `<IMG_CONTEXT>`, ...) no longer matches the
    image's features: "Image features and image tokens do not match" (vLLM #7996), or an off-by-one
    from a different resize (dots.ocr #126: 462 tokens vs 463 features). A run of the dataset's
    `<image>` counts only when the row has more `<image>` than images; N images written as N
    adjacent `<image>` are fine.

    **Example** `{"image": "a.jpg", "conversations": [{"from": "human", "value":
    "<image><image>...<image>\\nDescribe."}, ...]}` with 576 `<image>` (LLaVA-1.5's expansion) for
    one image, or a Qwen row whose text holds `<|vision_start|><|image_pad|>`x64`<|vision_end|>`.
    Runs are counted from `thresholds.pre_expanded_run` (default 8) adjacent copies of one token,
    whitespace between them allowed.

    **Fix** Replace each run with a single `<image>` (the processor expands it), i.e. store the
    dataset text from before the processor ran.
    """

    code = "VLM302"
    name = "pre-expanded-tokens"
    severity = Severity.ERROR

    def __init__(self) -> None:
        self._finder = _PerContext(_image_tokens)

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        sample = row.sample
        if sample.problems:
            return
        finder = self._finder.get(context)
        least = max(int(context.thresholds["pre_expanded_run"]), 1)
        runs: list[tuple[int, Message, str, int]] = []  # turn, message, token, length
        surplus = row.placeholders > len(sample.images)
        for position, message in enumerate(sample.messages):
            if not surplus:  # only token runs to look for (the loop below, without its image-part count)
                for part in message.parts:
                    if not part.is_image and part.text:
                        for token, copies in _token_runs(finder, part.text):
                            if copies >= least:
                                runs.append((position, message, token, copies))
                continue
            length = 0  # adjacent image parts (the dataset's <image>), whitespace between allowed
            for part in (*message.parts, None):
                if part is not None and part.is_image:
                    length += 1
                elif part is None or part.text.strip():
                    if surplus and length >= least:
                        runs.append((position, message, IMAGE_PLACEHOLDER, length))
                    length = 0
                if part is not None and not part.is_image and part.text:
                    for token, copies in _token_runs(finder, part.text):
                        if copies >= least:
                            runs.append((position, message, token, copies))
        if not runs:
            return
        grouped: dict[tuple[int, str], tuple[Message, list[int]]] = {}
        for position, message, token, length in runs:
            grouped.setdefault((position, token), (message, []))[1].append(length)
        where, fixes = [], []
        for (position, token), (message, lengths) in islice(grouped.items(), _MAX_RUN_GROUPS):
            if len(lengths) == 1:
                where.append(f"{_turn_label(position, message)} holds a run of {lengths[0]} {token}")
                fixes.append(f"replace the run of {lengths[0]} {token} in turn {position} with one <image>")
            else:
                where.append(
                    f"{_turn_label(position, message)} holds {len(lengths)} runs of {token} "
                    f"({sum(lengths)} in all, longest {max(lengths)})"
                )
                fixes.append(
                    f"replace the {len(lengths)} runs of {token} in turn {position} with one <image>"
                )
        if len(grouped) > _MAX_RUN_GROUPS:
            where.append(f"and {len(grouped) - _MAX_RUN_GROUPS:,} more turns or tokens")
        yield self.finding(
            row,
            f"text already expanded by an earlier processor run: {'; '.join(where)} "
            f"(the row has {len(sample.images)} image(s))",
            "; ".join(fixes) + " (the processor expands it)",
        )


class PlaceholderInAnswer(Rule):
    """An image placeholder sits inside an assistant turn.

    **Why** The processor pairs placeholders with images in order wherever they are, so the image
    is put into the answer: its hundreds of image tokens land in the loss span as labels the model
    is trained to "produce", and the user turn that should show it has no image (LLaMA-Factory
    #8440: a literal `<image>` in an answer was counted as an image). Templates that render only the
    text of assistant turns drop it instead, and the processor raises on the count mismatch. Either
    way the row crashes or silently trains on the wrong thing, hence an error.

    **Example** `{"image": ["a.jpg", "b.jpg"], "conversations": [{"from": "human", "value":
    "<image>\\nWhat is this?"}, {"from": "gpt", "value": "A cat, like <image>."}]}`

    A pre-training row, which has no user turn (ms-swift's documented pre-training format:
    `{"messages": [{"role": "assistant", "content": "<image>is a puppy, <image>is a kitten"}],
    "images": [...]}`, trained on every token), places its images in its one text on purpose: not
    reported.

    **Fix** Move the `<image>` into the user turn that asks about it; if the answer means the word,
    write it without angle brackets (e.g. "image").
    """

    code = "VLM303"
    name = "placeholder-in-answer"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        if not any(message.role is Role.USER for message in row.sample.messages):
            return  # a pre-training row (no user turn): its images are in its text on purpose
        seen = 0  # image parts before this turn: the k-th part takes the k-th image
        for position, message in enumerate(row.sample.messages):
            held = sum(part.is_image for part in message.parts)
            ordinals = range(seen, seen + held)
            seen += held
            if message.role is not Role.ASSISTANT or not held:
                continue
            if len(ordinals) <= MAX_LISTED:
                which = ", ".join(_ordinal(n + 1) for n in ordinals)
            else:  # consecutive: the range says it in bounded text
                which = f"{_ordinal(ordinals[0] + 1)} to {_ordinal(ordinals[-1] + 1)}"
            yield self.finding(
                row,
                f"assistant turn {position} holds {len(ordinals)} image placeholder(s): "
                f"the row's {which} image would be placed in the answer",
                f"move the <image> from assistant turn {position} into the user turn before it, "
                "or write the word without angle brackets",
            )


def _special_tokens(context: RuleContext) -> _TokenFinder:
    return _TokenFinder({t for t in context.special_tokens if _markup(t)} - {IMAGE_PLACEHOLDER})


class SpecialTokenInText(Rule):
    """A reserved token of the model's tokenizer is written literally in the row's text.

    **Why** The tokenizer reads `<|im_start|>`, `<|vision_start|>`, `<start_of_image>`, `<s>`, ...
    as one control token, not as text: it fakes turn boundaries or image markers, breaks the chat
    template's structure and the placeholder accounting (a literal `<|image_pad|>` is one more image
    token than the images have features for), and under assistant-only loss can shift the masked span.

    **Example** A Qwen2-VL row `{"from": "human", "value": "<|vision_start|><image><|vision_end|>
    What is this?"}` (text copied from an already rendered prompt). The dataset's own `<image>`
    placeholder is not reported, nor the tokens a family documents as data (Qwen-VL's grounding
    format: `<|object_ref_start|>a dog<|object_ref_end|><|box_start|>(10,20),(300,400)<|box_end|>`,
    `<|quad_start|>` ... for OCR); each token is reported once per row with its count.

    **Fix** Remove the token from the text: the chat template writes the turn markers and the
    processor writes the image tokens around each `<image>`.
    """

    code = "VLM304"
    name = "special-token-in-text"
    severity = Severity.ERROR

    def __init__(self) -> None:
        self._finder = _PerContext(_special_tokens)

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for token, (count, turns) in _token_counts(self._finder.get(context), row.sample).items():
            yield self.finding(
                row,
                f"special token {token} written {count} time(s) in the text ({_turns(turns)}); "
                "the tokenizer reads it as a control token",
                f"remove the {count} literal {token} from {_turns(turns)}; the template and processor write "
                "control tokens (write <image> where an image goes)",
            )


def _foreign_tokens(context: RuleContext) -> _TokenFinder:
    return _TokenFinder(set(context.foreign_placeholders) - {IMAGE_PLACEHOLDER})


class ForeignPlaceholder(Rule):
    """Another model family's image token is in the text; this model's tokenizer reads it as plain text.

    **Why** A dataset prepared for one family and trained on another keeps that family's image
    token (`<|image|>` Llama 3.2 Vision, `<start_of_image>` Gemma 3, `[IMG]` Pixtral, `<IMG_CONTEXT>`
    InternVL, `<|image_pad|>` Qwen-VL...). Here it is a few ordinary subword tokens: no image goes
    there, and the model learns to read or write the string itself.

    **Example** `{"images": ["a.jpg"], "messages": [{"role": "user", "content": "<|image|>Describe
    this."}, ...]}` scanned for Qwen2-VL.

    **Fix** Replace the foreign token with `<image>` where an image goes (one per image), or remove it.
    """

    code = "VLM305"
    name = "foreign-placeholder"
    severity = Severity.WARNING

    def __init__(self) -> None:
        self._finder = _PerContext(_foreign_tokens)

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        family = context.family or "this model"
        for token, (count, turns) in _token_counts(self._finder.get(context), row.sample).items():
            yield self.finding(
                row,
                f"{token} written {count} time(s) ({_turns(turns)}): another family's image token, "
                f"plain text for {family}",
                f"replace {token} with <image> where an image goes, or remove it from {_turns(turns)}",
            )
