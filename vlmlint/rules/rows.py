"""Rules about rows and the files they point to."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.rules.base import Finding, Rule, RuleContext, Severity
from vlmlint.sample import RowResult


class MalformedRow(Rule):
    """The row is not valid JSON, not an object, or lacks the fields of its layout.

    **Why** A row the loader cannot parse either crashes the data loader mid-run or is dropped
    silently by a lenient one; either way it never trains.

    **Example** `{"id": "7", "image": "a.jpg", "conversations": "<image> hi"}`: conversations is a
    string, not a list of turns.

    **Fix** Repair the row so it matches its file's layout (the message names the field), or remove it.
    """

    code = "VLM101"
    name = "malformed-row"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for problem in row.sample.problems:
            if problem.code == self.code:
                yield self.finding(row, problem.message, "fix the row to match its layout, or remove it")
        if row.count_error and row.count_error.startswith("template:"):
            yield self.finding(
                row,
                row.count_error.removeprefix("template:").strip(),
                "fix the turn order or roles the template expects (e.g. user/assistant alternating)",
            )


class MissingImage(Rule):
    """An image the row refers to does not exist.

    **Why** The data loader raises FileNotFoundError when it reaches the row, hours into a run, or
    a lenient loader skips the row and its text trains without the image it talks about.

    **Example** `{"image": "coco/000123.jpg", ...}` where coco/000123.jpg is not under the dataset
    folder (or under --image-root).

    **Fix** Restore the file, correct the path, pass --image-root if paths are relative to another
    folder, or remove the row.
    """

    code = "VLM103"
    name = "missing-image"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in enumerate(row.images, start=1):
            if info.error_code == "missing":
                yield self.finding(
                    row,
                    f"image {position} not found: {info.reference}",
                    "restore the file, fix the path, or pass --image-root",
                )


class RemoteImage(Rule):
    """An image is a URL: vlmlint does not fetch it, so the row's counts are unknown.

    **Why** Training-time fetches fail, time out or return different bytes than the ones the data
    was checked with; and without the image the row's token count cannot be known.

    **Example** `{"image": "https://example.com/cat.jpg", ...}`

    **Fix** Download the images next to the manifest and point the rows at the local files.
    """

    code = "VLM105"
    name = "remote-image"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in enumerate(row.images, start=1):
            if info.error_code == "remote":
                yield self.finding(
                    row,
                    f"image {position} is a URL and was not fetched: {info.reference}",
                    "download the image and reference the local file",
                )


class ProcessorRejectsRow(Rule):
    """The model's processor refuses the row as a whole (e.g. PaliGemma given a row without an image).

    **Why** The processor raises while the batch is built, which stops the data loader; a lenient
    trainer drops the row silently.

    **Example** A text-only conversation in a PaliGemma dataset: "PaliGemma requires at least one
    image per prompt".

    **Fix** Give the row the image(s) the model expects, or keep such rows out of this model's data.
    """

    code = "VLM108"
    name = "processor-rejects-row"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        if row.count_error and row.count_error.startswith("processor:"):
            yield self.finding(
                row,
                row.count_error.removeprefix("processor:").strip(),
                "give the row what the processor requires (e.g. an image), or remove it",
            )
