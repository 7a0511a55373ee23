"""Rules about pre-tokenized rows: processor output (input_ids, image_grid_thw, ...) stored in the dataset.

The reader keeps these fields in `Sample.pretokenized` (pixel_values as its shape only); nothing is
recounted, the rules compare the stored fields with one another and with the model's image token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from vlmlint.models.registry import MROPE_FAMILIES
from vlmlint.readers.layouts import TOKEN_FIELDS
from vlmlint.records import Finding, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext

# MROPE_FAMILIES (models/registry.py): the families with a position_span, whose position_ids have shape
# (3, seq): temporal, height and width rows.


def _image_runs(ids: Sequence[int], token_id: int) -> list[int]:
    """Lengths of the runs of consecutive image token ids, in order (Qwen-VL: one run per image)."""
    runs: list[int] = []
    previous = None
    for token in ids:
        if token == token_id:
            if previous == token_id:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = token
    return runs


def _grids(grids: Sequence[Sequence[int]]) -> str:
    return "[" + ", ".join("x".join(str(v) for v in grid) for grid in grids) + "]"


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(v) for v in shape) + ("," if len(shape) == 1 else "") + ")"


class ImageTokenFeatureMismatch(Rule):
    """A pre-tokenized row holds a different number of image token ids than its images give features.

    **Why** The model replaces each image token id in input_ids with one image feature; the vision
    tower gives t*h*w / merge_size^2 features per image of image_grid_thw (Qwen-VL: merge_size 2).
    When they differ, transformers raises "Image features and image tokens do not match, tokens: X,
    features: Y" (candle: "Image embedding length X does not match placeholder tokens Y"). It happens
    when input_ids were kept from an older processor run (other max_pixels, an edited text) while
    pixel_values and image_grid_thw were recomputed, or the other way round.

    **Example** `image_grid_thw` `[[1, 12, 16]]` (48 features with merge 2) but 47 `<|image_pad|>` ids
    in input_ids.

    **Fix** Re-run the processor on the row's text and images in one call, so input_ids,
    pixel_values and image_grid_thw come from the same settings.
    """

    code = "VLM501"
    name = "image-token-feature-mismatch"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        data = row.sample.pretokenized
        if data is None or context.image_token_id is None or not context.merge_size:
            return
        merge = context.merge_size
        token = context.image_placeholder
        runs = _image_runs(data["input_ids"], context.image_token_id)
        tokens = sum(runs)
        grids = data.get("image_grid_thw")
        pixels = data.get("pixel_values_shape")
        if grids is not None:
            per_image = [t * h * w // merge**2 for t, h, w in grids]
            features = sum(per_image)
            source = f"image_grid_thw {_grids(grids)} (t*h*w/{merge}^2 each: {per_image})"
        elif pixels is not None and len(pixels) == 2:
            per_image = None
            features = pixels[0] // merge**2
            source = f"pixel_values of {pixels[0]} patch rows ({pixels[0]}/{merge}^2)"
        else:
            return  # no image side stored: nothing to compare the image tokens with
        same_runs = per_image is not None and len(runs) == len(per_image)
        if tokens == features and (per_image is None or runs == per_image):
            return
        if same_runs:
            wrong = [
                f"image {i} needs {need} {token} ids, input_ids has {have}"
                for i, (have, need) in enumerate(zip(runs, per_image, strict=True), start=1)
                if have != need
            ]
            fix = "re-run the processor on this row's text and images in one call: " + "; ".join(wrong)
        elif per_image is not None:
            fix = (
                f"re-run the processor on this row's text and images in one call: input_ids needs "
                f"{len(per_image)} run(s) of {token} of {per_image} ids, it has {runs}"
            )
        else:
            fix = (
                f"re-run the processor on this row's text and images in one call: input_ids needs "
                f"{features} {token} ids, it has {tokens}"
            )
        if tokens != features:
            message = (
                f"{tokens} image token ids ({token}, id {context.image_token_id}) in input_ids but "
                f'{features} image features from {source}: the model raises "Image features and '
                f'image tokens do not match, tokens: {tokens}, features: {features}"'
            )
        else:
            message = (
                f"the runs of {token} ids in input_ids {runs} do not match the images' features "
                f"from {source}: image features land on the wrong image's tokens"
            )
        yield self.finding(row, message, fix)


class PositionIdsShape(Rule):
    """A pre-tokenized row's position_ids do not have the shape the model needs for its input_ids.

    **Why** Qwen-VL's M-RoPE takes position_ids of shape (3, seq): one row of temporal, height and
    width positions per token (4 rows when packed sequences prepend their text positions). A row
    dropped or one cut short breaks the rotary embedding ("Qwen-VL position_ids do not match the
    attention input" in sglang; a shape error or a wrong batch size in transformers); 1-D
    positions are copied to all three rows, and the images silently lose their 2-D positions.
    Models without M-RoPE need one position per input id.

    **Example** position_ids of shape (2, 42) for 42 input_ids with Qwen2-VL.

    **Fix** Recompute position_ids with the model's get_rope_index for this row's input_ids and
    image_grid_thw, or drop the column and let the model compute them.
    """

    code = "VLM502"
    name = "position-ids-shape"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        data = row.sample.pretokenized
        if data is None or data.get("position_ids_shape") is None:
            return
        shape = tuple(data["position_ids_shape"])
        seq = len(data["input_ids"])
        if context.family in MROPE_FAMILIES:
            dims = (shape[0], shape[2]) if len(shape) == 3 and shape[1] == 1 else shape  # batch of 1
            if len(dims) == 2 and dims[0] in (3, 4) and dims[1] == seq:
                return
            yield self.finding(
                row,
                f"position_ids has shape {_shape(shape)} but M-RoPE needs (3, {seq}): a temporal, a "
                f"height and a width position for each of the {seq} input_ids",
                f"recompute position_ids with get_rope_index for this row (shape (3, {seq})), or drop the "
                "column so the model computes them",
            )
            return
        dims = shape[1:] if len(shape) == 2 and shape[0] == 1 else shape
        if dims == (seq,):
            return
        yield self.finding(
            row,
            f"position_ids has shape {_shape(shape)} but input_ids has {seq} ids: one position per id "
            f"expected ({seq},)",
            f"rebuild position_ids as 0..{seq - 1} ({seq} entries), or drop the column",
        )


class LengthMismatch(Rule):
    """A pre-tokenized row's per-token fields (input_ids, attention_mask, labels) differ in length.

    **Why** Collators pad each field on its own and stack them position by position: a labels
    list one shorter than input_ids fails to collate ("expected sequence of length 42 at dim 1
    (got 41)"), or is padded with -100 so that its targets no longer sit on their tokens (one id
    dropped in the middle shifts every later target by one); an attention_mask of another length
    masks the wrong tokens or raises a shape error.

    **Example** input_ids and attention_mask of 42 entries, labels of 41 (cut when the row was
    truncated by hand).

    **Fix** Rebuild the shorter or longer fields from input_ids (labels: -100 on the prompt and
    padding), or re-run the tokenization so all fields come from one call.
    """

    code = "VLM503"
    name = "length-mismatch"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        data = row.sample.pretokenized
        if data is None:
            return
        lengths = {key: len(data[key]) for key in TOKEN_FIELDS if key in data}
        seq = lengths["input_ids"]
        wrong = [key for key, length in lengths.items() if length != seq]
        if not wrong:
            return
        yield self.finding(
            row,
            "per-token fields differ in length: " + ", ".join(f"{k} {n}" for k, n in lengths.items()),
            f"give {', '.join(wrong)} {seq} entries like input_ids ("
            + (
                "rebuild labels from input_ids with -100 on the prompt"
                if "labels" in wrong
                else "rebuild from input_ids"
            )
            + "), or re-run the tokenization",
        )


class GridPixelMismatch(Rule):
    """A pre-tokenized row's pixel_values has another number of patch rows than its image_grid_thw says.

    **Why** Qwen-VL's vision tower cuts pixel_values into images by image_grid_thw: each image takes
    t*h*w patch rows. With fewer or more rows the patch embedding, its rotary positions and the
    split into images fail with a shape error, or images get each other's patches. It happens when
    pixel_values and image_grid_thw come from different processor runs or were cut separately.

    **Example** image_grid_thw `[[1, 4, 4]]` (16 patch rows) with a pixel_values of shape (15, 1176).

    **Fix** Re-run the image processor on the row's images so pixel_values and image_grid_thw come
    from one call.
    """

    code = "VLM504"
    name = "grid-pixel-mismatch"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        data = row.sample.pretokenized
        if data is None:
            return
        grids, pixels = data.get("image_grid_thw"), data.get("pixel_values_shape")
        if grids is None or pixels is None or len(pixels) != 2:
            return  # only the flat (patches, channels*t*patch*patch) layout of Qwen-VL is checked
        need = sum(t * h * w for t, h, w in grids)
        if pixels[0] == need:
            return
        yield self.finding(
            row,
            f"pixel_values has {pixels[0]} patch rows (shape {_shape(pixels)}) but image_grid_thw "
            f"{_grids(grids)} needs {need} (the sum of t*h*w)",
            f"re-run the image processor on this row's images so pixel_values ({need} rows for these "
            "grids) and image_grid_thw come from one call",
        )
