"""Rules about image placeholders in the text."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.rules.base import Finding, Rule, RuleContext, Severity
from vlmlint.sample import RowResult


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class PlaceholderCountMismatch(Rule):
    """The row's image placeholders are not as many as its images.

    **Why** The processor raises "The number of images does not match the number of <image>
    tokens" (or the model raises "Image features and image tokens do not match"); trainers that
    catch it drop the row.

    **Example** `{"image": ["a.jpg", "b.jpg"], "conversations": [{"from": "human", "value":
    "<image>\\nCompare them."}, ...]}`: two images, one `<image>`.

    **Fix** Write one `<image>` per image, in order, or remove the extra images.
    """

    code = "VLM301"
    name = "placeholder-count-mismatch"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        images = len(row.sample.images)
        if row.sample.problems:
            return
        if row.placeholders != images:
            if row.placeholders > images:
                fix = f"remove the {_ordinal(images + 1)} <image> placeholder" + (
                    "s onwards" if row.placeholders - images > 1 else ""
                )
                fix += " or add the missing image" + ("s" if row.placeholders - images > 1 else "")
            else:
                fix = f"add {images - row.placeholders} more <image> placeholder(s) where the images belong"
            yield self.finding(
                row,
                f"{row.placeholders} image placeholder(s) in the text but {images} image(s) in the row",
                fix,
            )
        elif row.count_error and row.count_error.startswith("placeholder:"):
            yield self.finding(
                row,
                row.count_error.removeprefix("placeholder:").strip(),
                f"remove literal {context.image_placeholder} tokens from the text; write <image> once per image",
            )
