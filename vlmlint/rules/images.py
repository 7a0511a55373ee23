"""Rules about the image files themselves."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.rules.base import Finding, Rule, RuleContext, Severity
from vlmlint.sample import RowResult


class UnreadableImage(Rule):
    """An image cannot be decoded: not an image, corrupt, or truncated.

    **Why** PIL raises (UnidentifiedImageError, "image file is truncated") inside the data loader
    worker, which kills the run, or the loader substitutes a blank image.

    **Example** `photo.jpg` holding an HTML error page from a failed download, or a JPEG cut off
    half way (no end-of-image marker).

    **Fix** Re-download or re-encode the file, or remove the row.
    """

    code = "VLM201"
    name = "unreadable-image"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in enumerate(row.images, start=1):
            if info.error_code == "unreadable":
                yield self.finding(
                    row,
                    f"image {position}: {info.error}",
                    "re-encode or re-download the image, or drop the row",
                )


class ExtremeAspectRatio(Rule):
    """The model's image processor refuses the image's shape (e.g. an aspect ratio above 200 for Qwen-VL).

    **Why** Qwen-VL's smart_resize raises "absolute aspect ratio must be smaller than 200" for
    such images, which stops the data loader, or a lenient pipeline squashes the image to nothing.

    **Example** A 27x5600 px strip (ratio 207) in a Qwen2-VL dataset.

    **Fix** Crop or pad the image to a ratio below the limit (e.g. split a long strip into tiles),
    or remove the row.
    """

    code = "VLM203"
    name = "extreme-aspect-ratio"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in enumerate(row.images, start=1):
            if info.error_code == "rejected":
                yield self.finding(
                    row,
                    f"image {position} ({info.width}x{info.height}) is refused by the processor: {info.error}",
                    "crop or pad the image below the processor's aspect-ratio limit, or split it into tiles",
                )
