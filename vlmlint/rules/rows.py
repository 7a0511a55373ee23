"""Rules about rows and the files they point to."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from hashlib import blake2b

from vlmlint.records import Finding, ImageError, ImageInfo, MediaInfo, RowResult, Severity
from vlmlint.rules.base import MAX_SHOWN_CHARS, Rule, RuleContext, shown


def numbered_images(row: RowResult, error_code: ImageError) -> Iterator[tuple[int, ImageInfo]]:
    """(position from 1, info) for each of the row's images whose error is `error_code`."""
    for position, info in enumerate(row.images, start=1):
        if info.error_code == error_code:
            yield position, info


def numbered_media(row: RowResult, error_code: ImageError | None = None) -> Iterator[tuple[str, MediaInfo]]:
    """("video 2", info) for each of the row's videos and audio clips (numbered per kind), optionally
    only those with `error_code`."""
    seen: dict[str, int] = {}
    for info in row.media:
        seen[info.kind] = seen.get(info.kind, 0) + 1
        if error_code is None or info.error_code == error_code:
            yield f"{info.kind} {seen[info.kind]}", info


class MalformedRow(Rule):
    """The row is not valid JSON, not an object, lacks its layout's fields, or its chat template refuses it.

    **Why** A row the loader cannot parse either crashes the data loader mid-run or is dropped
    silently by a lenient one; either way it never trains. The same holds for a row whose turns the
    model's chat template rejects (e.g. "Conversation roles must alternate user/assistant").

    **Example** `{"id": "7", "image": "a.jpg", "conversations": "<image> hi"}`: conversations is a
    string, not a list of turns. Also: a line that is not JSON (`{"id": "8", "image": `), a line
    that is a JSON array, a turn whose `value` is a number, a row that does not fit a layout forced
    with `--layout`, two user turns in a row for a template that requires alternation.

    **Fix** Repair the row so it matches its file's layout (the message names the field and its
    position), or remove it. A row whose fields fit no layout at all is VLM102.
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


class UnknownLayout(Rule):
    """The row's fields fit none of the layouts vlmlint (and the common trainers) read.

    **Why** A trainer's loader looks the conversation up by field name: a row without those fields
    raises KeyError mid-run, or trains as an empty sample. It usually means a renamed or misspelt
    field (`conversation` for `conversations`), or a row from another dataset mixed in.

    **Example** `{"id": "9", "img": "a.jpg", "dialog": [...]}` in a LLaVA file: neither
    `conversations`, `messages`, `instruction`/`output` nor `image`/`text` is present. The message
    lists the fields seen and the fields each layout is recognised by.

    **Fix** Rename the fields to one layout's (e.g. LLaVA: `"image"` and `"conversations"`), map
    them with `--columns` (`--columns messages=dialog,images=img`: docs/datasets.md), or remove the
    row. With `--layout`, a row that does not fit the forced layout is VLM101 instead.
    """

    code = "VLM102"
    name = "unknown-layout"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for problem in row.sample.problems:
            if problem.code == self.code:
                yield self.finding(
                    row,
                    problem.message,
                    'rename the fields to one layout\'s (e.g. llava: "image" + "conversations"), map '
                    "them with --columns (e.g. --columns messages=dialog,images=img), or remove the row",
                )


class MissingImage(Rule):
    """An image (or a video or audio clip) the row refers to does not exist.

    **Why** The data loader raises FileNotFoundError when it reaches the row, hours into a run, or
    a lenient loader skips the row and its text trains without the image it talks about.

    **Example** `{"image": "coco/000123.jpg", ...}` where coco/000123.jpg is not under the dataset
    folder (or under --image-root). Videos and audio clips (`videos`, `audios`, `video`, typed
    `video` / `audio` parts) and each frame of a video given as a frame list are checked the same
    way: `{"videos": ["clips/1.mp4"], ...}` without clips/1.mp4 is "video 1 not found".

    **Fix** Restore the file, correct the path, pass --image-root if paths are relative to another
    folder, or remove the row.
    """

    code = "VLM103"
    name = "missing-image"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in numbered_images(row, ImageError.MISSING):
            yield self.finding(
                row,
                f"image {position} not found: {info.reference}",
                "restore the file, fix the path, or pass --image-root",
            )
        for label, info in numbered_media(row, ImageError.MISSING):
            yield self.finding(
                row,
                f"{label} not found: {info.error}" if info.frames else f"{label} not found: {info.reference}",
                "restore the file, fix the path, or pass --image-root",
            )


class ImageOutsideRoot(Rule):
    """An image path leaves the dataset folder (`..`, an absolute path, or a symlink pointing out); it is not read.

    **Why** A manifest decides which files the linter (and a training job) opens: `../../etc/...`
    or a symlink out of the folder reads files the dataset does not own, and the data stops being
    self-contained, so a copy of the folder (to a cluster, to the hub) loses those images.

    **Example** `{"image": "../shared/cat.jpg", ...}`, `{"image": "/home/me/cat.jpg", ...}`, or
    `images/cat.jpg` being a symlink to `/mnt/photos/cat.jpg`. The folder is the manifest's, or
    --image-root when given. A symlink that stays inside the folder is fine. The same holds for the
    files of a scanned folder: a manifest, metadata file or sidecar caption that is a symlink out of
    it is reported here and not read. Videos, audio clips and the frames of a frame-list video follow
    the same rule.

    **Fix** Copy the image into the dataset folder and reference it by a relative path, pass
    --image-root with a folder that contains every image, or pass --allow-outside-root to read it.
    """

    code = "VLM104"
    name = "image-outside-root"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for problem in row.sample.problems:  # a data file of the folder (the reader did not open it)
            if problem.code == self.code:
                yield self.finding(
                    row,
                    problem.message,
                    "copy the file into the dataset folder instead of linking it, or pass --allow-outside-root",
                )
        for position, info in numbered_images(row, ImageError.OUTSIDE):
            yield self.finding(
                row,
                f"image {position} ({info.reference}) is not read: {info.error}",
                "copy the image into the dataset folder, pass --image-root with a folder that "
                "holds it, or pass --allow-outside-root",
            )
        for label, info in numbered_media(row, ImageError.OUTSIDE):
            yield self.finding(
                row,
                f"{label} ({info.reference}) is not read: {info.error}",
                f"copy the {info.kind} into the dataset folder, pass --image-root with a folder that "
                "holds it, or pass --allow-outside-root",
            )


class RemoteImage(Rule):
    """An image is a URL: it is not fetched unless --allow-remote, so the row's counts are unknown.

    **Why** Training-time fetches fail, time out or return different bytes than the ones the data
    was checked with; and without the image the row's token count cannot be known.

    **Example** `{"image": "https://example.com/cat.jpg", ...}`. A video or audio URL
    (`{"type": "video_url", "video_url": {"url": "https://..."}}`) is reported too; it is never
    fetched, since vlmlint does not count video or audio yet (VLM109).

    **Fix** Download the images next to the manifest and point the rows at the local files, or pass
    --allow-remote to fetch them for the scan.
    """

    code = "VLM105"
    name = "remote-image"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in numbered_images(row, ImageError.REMOTE):
            yield self.finding(
                row,
                f"image {position} is a URL, not fetched unless --allow-remote: {info.reference}",
                "download the image and reference the local file, or pass --allow-remote",
            )
        for label, info in numbered_media(row, ImageError.REMOTE):
            if info.frames:  # a frame of a frame-list video: an image URL (fetched with --allow-remote)
                message = f"{label}: {info.error}"
                fix = "download the frames and reference the local files, or pass --allow-remote"
            else:
                message = f"{label} is a URL, not fetched: {info.reference}"
                fix = f"download the {info.kind} and reference the local file"
            yield self.finding(row, message, fix)


class ImageFieldNotList(Rule):
    """A ShareGPT/LLaMA-Factory, OpenAI or Alpaca row gives `images` as one string or object, not a list.

    **Why** These layouts define `images` as a list. vlmlint reads a lone value as one image, but
    a loader that iterates the field takes a string character by character: LLaMA-Factory then
    sees 9 "images" for `"test1.jpg"` and stops with "The number of images does not match the
    number of image tokens" (LLaMA-Factory #5883). LLaVA's `image` may be a string: not a finding.

    **Example** `{"messages": [...], "images": "a.jpg"}`, or `"images": {"path": "a.jpg"}`.

    **Fix** Wrap the value in a list: `"images": ["a.jpg"]`.
    """

    code = "VLM106"
    name = "image-field-not-list"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for problem in row.sample.notes:
            if problem.code == self.code:
                images = row.sample.images
                if "a string" in problem.message and len(images) == 1:
                    fix = f'wrap it in a list: "images": ["{images[0].reference}"]'
                else:
                    fix = 'wrap it in a list: "images": [{...}]'
                yield self.finding(row, problem.message, fix)


class _IdTable:
    """The ids of one file as 128-bit hashes (blake2b) in open-addressing arrays: 24 bytes a slot.

    Why not a dict of strings: some 120 bytes an id, 120 MB for a million-row file; this keeps a
    scan's memory nearly flat. Two different ids share a hash with probability about n^2 / 2^129.
    """

    def __init__(self, capacity: int = 1 << 10) -> None:
        self._size = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self._mask = capacity - 1
        self._high = array("Q", bytes(8 * capacity))  # 0: an empty slot (stored values are odd)
        self._low = array("Q", bytes(8 * capacity))
        self._where = array("q", bytes(8 * capacity))

    def setdefault(self, key: str, position: int) -> int:
        """The position stored for `key`, storing `position` first when the key is new."""
        digest = blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        high = int.from_bytes(digest[:8], "little") | 1
        low = int.from_bytes(digest[8:], "little")
        slot = low & self._mask
        while self._high[slot]:
            if self._high[slot] == high and self._low[slot] == low:
                return self._where[slot]
            slot = (slot + 1) & self._mask
        self._high[slot], self._low[slot], self._where[slot] = high, low, position
        self._size += 1
        if self._size * 4 > (self._mask + 1) * 3:  # above 3/4 full: twice the slots
            self._grow()
        return position

    def _grow(self) -> None:
        old = zip(self._high, self._low, self._where, strict=True)
        self._allocate((self._mask + 1) * 2)
        for high, low, where in old:
            if high:
                slot = low & self._mask
                while self._high[slot]:
                    slot = (slot + 1) & self._mask
                self._high[slot], self._low[slot], self._where[slot] = high, low, where

    def __len__(self) -> int:
        return self._size


# Repeated ids reported one by one per file; the last of them says that later ones are not (a file of
# a million copies of one id would otherwise be a million findings, a report of gigabytes).
MAX_DUPLICATE_FINDINGS = 1_000


class DuplicateId(Rule):
    """Two rows of one file carry the same id.

    **Why** Ids are how rows are deduplicated, joined with evaluation results and excluded from
    the test split; a repeated id usually means a row copied twice (it trains twice) or two
    datasets merged whose numbering collides, so a filter by id hits the wrong row.

    **Example** `{"id": "7", ...}` on line 3 and again on line 40 of the same file. The scope is
    one source file (a manifest, a parquet/arrow file, a saved dataset): the files of a folder are
    often splits whose numbering restarts, or one dataset saved in two formats, so ids are not
    compared across files. The `id` field (else `uid`) is compared as text, so `7` equals `"7"`.

    **Fix** Give the later row its own id (e.g. `7-2`), or remove it when it repeats the first.
    Memory: the ids of the file being read are kept as 128-bit hashes with the line (or item) where
    each was first seen, 32 to 64 bytes per id (some 50 MB for a file of a million rows), dropped when
    the next file starts; skip the rule with `--ignore VLM107` if that matters. The first 1,000
    repeated ids of a file are reported (the 1,000th says so), later ones are not; an id longer than
    200 characters is shown by its first 200.
    """

    code = "VLM107"
    name = "duplicate-id"
    severity = Severity.WARNING
    compares_rows = True

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._source: str | None = None
        self._first = _IdTable()  # id -> line (JSONL) or item index where it was first seen
        self._repeats = 0  # rows of this file whose id was seen before

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        sample = row.sample
        if sample.source != self._source:  # readers yield a file's rows together
            self._source, self._first, self._repeats = sample.source, _IdTable(), 0
        if sample.id is None:
            return
        position = sample.line if sample.line is not None else sample.index
        first = self._first.setdefault(sample.id, position)
        if first == position:
            return
        self._repeats += 1
        if self._repeats > MAX_DUPLICATE_FINDINGS:
            return
        where = f"line {first}" if sample.line is not None else f"item {first} of this file"
        message = f"id {shown(sample.id)} was already used by the row at {where}"
        if self._repeats == MAX_DUPLICATE_FINDINGS:
            message += (
                f"; this is the {MAX_DUPLICATE_FINDINGS:,}th repeated id of this file, later ones are "
                "not reported"
            )
        if len(sample.id) <= MAX_SHOWN_CHARS:
            example = f"e.g. {sample.id!r} -> '{sample.id}-2'"
        else:
            example = "e.g. with '-2' appended"
        yield self.finding(
            row, message, f"give this row its own id ({example}), or remove it if it repeats that row"
        )


class ProcessorRejectsRow(Rule):
    """The model's processor refuses the row as a whole (e.g. PaliGemma given a row without an image).

    **Why** The processor raises while the batch is built, which stops the data loader; a lenient
    trainer drops the row silently.

    **Example** A text-only conversation in a PaliGemma dataset: "PaliGemma requires at least one
    image per prompt". With a processor vlmlint has no formula for, the real processor is called on
    every row, and any error it raises there is this finding, with its type and first line
    ("ValueError: ...").

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
