"""MiniCPM-V 4.6 / 4.7: a source image plus up to max_slice_nums slices, each cut to whole merged blocks.

Image processor (transformers 5.24 `MiniCPMV4_6ImageProcessorPil._preprocess`, the same arithmetic in the
torchvision `MiniCPMV4_6ImageProcessor`; MiniCPM-V 4.7's image processor is this class too, per
image_processing_auto): for an image of H x W, S = scale_resolution (448), p = patch_size (14),
m = 4 in downsample_mode "16x" (2 in "4x"; 4 in both up to transformers 5.20.2, whose find_best_resize
takes no downsample_mode: `merge_follows_mode` reads which from the installed class), d = p * m (56 px):

1. `get_sliced_grid` (slice_mode): ratio = H * W / S^2, multiple = min(ceil(ratio), max_slice_nums); at
   most 1 means no slices. Else among num_slices in (multiple - 1, multiple, multiple + 1), not 1 and at
   most max_slice_nums, every rows x cols factorisation is scored abs(log(W / H) - log(cols / rows));
   the smallest error wins, a tie goes to more rows.
2. `find_best_resize` of the source: when H * W > S^2 or there are no slices (upscaling allowed),
   h = int(S / sqrt(W / H)), w = int(h * (W / H)); then each side becomes
   `ensure_divide(side, d)` = max(round(side / d) * d, d) (Python's round: half to even).
3. `get_refine_size` (with slices): ensure_divide(W, cols), ensure_divide(H, rows), then
   find_best_resize of (H' / rows, W' / cols) as floats with upscaling, times (rows, cols). The refined
   image is cut into rows x cols equal slices.

Each part's target size is (height / p, width / p) patches and its tokens are h_p * w_p // (m^2) (the
processor's image_token_divisor: 4 in "4x", 16 otherwise).

Processor (`MiniCPMV4_6Processor.replace_image_token` and `_prepend_local_ids`; MiniCPMV4_7Processor's
are the same for images): each tokenizer image_token (`<|image_pad|>` on the hub) becomes

    [<image_id>i</image_id>]  <image> + image_token x source + </image>
    + rows joined by "\\n", each row cols x (<slice> + image_token x slice + </slice>)

where i counts the images of one sample from 0 (use_image_id) and the slices appear only where the
processor's own slice_mode (the image processor's attribute when it was built) is on and the grid is
not 0 x 0. All marker tokens are the tokenizer's (image_start_token, slice_start_token, ...).

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): the processor's images_kwargs
hold only return_tensors, so the image processor's attributes (preprocessor_config.json, class defaults
where it says nothing), overridden by the tokenizer's init kwargs where they name max_slice_nums,
scale_resolution, patch_size, slice_mode, downsample_mode, do_resize or use_image_id; use_image_id falls
back to the image processor's. Both processors refuse a row whose image placeholders and images differ
in number (`validate_inputs`).

Positions: MiniCPM-V 4.6 passes no position ids (1-D, one per token). MiniCPM-V 4.7
(`MiniCPMV4_7Model.get_rope_index`) lays each image out on a canvas: the frame from <image> to its last
marker takes max(canvas_h, canvas_w) + 1 positions, canvas = (rows * slice_h, cols * slice_w) in merged
blocks with slices, else the source's (h_p / m, w_p / m).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Knob,
    Run,
    Segment,
    image_processor_types,
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

PLACEHOLDER = "<|image_pad|>"
# The tokens the processor reads from its tokenizer, as the hub tokenizer names them.
TOKEN_DEFAULTS = {
    "image_token": PLACEHOLDER,
    "image_start_token": "<image>",
    "image_end_token": "</image>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}
# MiniCPMV4_6ImageProcessorPil's class defaults (transformers 5.24).
DEFAULT_MAX_SLICE_NUMS = 9
DEFAULT_SCALE_RESOLUTION = 448
DEFAULT_PATCH_SIZE = 14
# The image settings `_merge_kwargs` lets tokenizer_config.json override.
IMAGE_KWARGS = (
    "max_slice_nums", "scale_resolution", "patch_size", "slice_mode", "downsample_mode", "do_resize",
)  # fmt: skip


@dataclass(frozen=True)
class MiniCPMVSettings:
    max_slice_nums: int = DEFAULT_MAX_SLICE_NUMS
    scale_resolution: int = DEFAULT_SCALE_RESOLUTION
    patch_size: int = DEFAULT_PATCH_SIZE
    slice_mode: bool = True  # the image processor's (call-time) slicing
    downsample_mode: str = "16x"
    do_resize: bool = True
    use_image_id: bool = True
    # The processor's self.slice_mode: the image processor's attribute when the processor was built,
    # which decides whether replace_image_token writes the slices.
    expand_slices: bool = True
    image_token: str = TOKEN_DEFAULTS["image_token"]
    image_start_token: str = TOKEN_DEFAULTS["image_start_token"]
    image_end_token: str = TOKEN_DEFAULTS["image_end_token"]
    slice_start_token: str = TOKEN_DEFAULTS["slice_start_token"]
    slice_end_token: str = TOKEN_DEFAULTS["slice_end_token"]
    image_id_start_token: str = TOKEN_DEFAULTS["image_id_start_token"]
    image_id_end_token: str = TOKEN_DEFAULTS["image_id_end_token"]
    # Whether find_best_resize's merge factor follows downsample_mode (transformers 5.2x, after 5.20.2);
    # up to 5.20.2 sides are multiples of patch_size * 4 in "4x" mode too (settings_from reads which).
    merge_follows_mode: bool = True

    @property
    def placeholder(self) -> str:
        """The processor's image_token is what it looks for in the text (Family.bound reads this)."""
        return self.image_token

    @property
    def merge_factor(self) -> int:
        """find_best_resize's merge_factor: sides are multiples of patch_size * this."""
        return 2 if self.downsample_mode == "4x" and self.merge_follows_mode else 4

    @property
    def token_divisor(self) -> int:
        """The processor's image_token_divisor: patches per image token."""
        return 4 if self.downsample_mode == "4x" else 16

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "max_slice_nums": self.max_slice_nums,
            "scale_resolution": self.scale_resolution,
            "patch_size": self.patch_size,
            "slice_mode": self.slice_mode,
            "downsample_mode": self.downsample_mode,
            "do_resize": self.do_resize,
        }


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> MiniCPMVSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's marker tokens."""
    del model_config
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)  # the image processor's own settings
        return default if value is None else value

    tokens = {}
    for name in TOKEN_DEFAULTS:
        value = tokenizer_token(tokenizer_kwargs, name, None)
        if name == "image_token":
            value = processor_config.get("tokenizer_image_token") or value
        if value is None:
            # MiniCPMV4_6Processor.__init__ reads tokenizer.<name>: without it the processor cannot be built
            raise CountError(f"the tokenizer has no {name}, so MiniCPMV4_6Processor cannot be built")
        tokens[name] = str(value)
    downsample_mode = pipeline("downsample_mode", "16x")
    if not isinstance(downsample_mode, str):
        raise CountError(f"downsample_mode must be '16x' or '4x', got {downsample_mode!r}")
    expand_slices = getattr(image_processor, "slice_mode", True)
    use_image_id = tokenizer_kwargs.get("use_image_id")
    if use_image_id is None:
        use_image_id = getattr(image_processor, "use_image_id", True)
    return MiniCPMVSettings(
        max_slice_nums=positive_int(pipeline("max_slice_nums", DEFAULT_MAX_SLICE_NUMS), "max_slice_nums"),
        scale_resolution=positive_int(
            pipeline("scale_resolution", DEFAULT_SCALE_RESOLUTION), "scale_resolution"
        ),
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        slice_mode=bool(pipeline("slice_mode", True)),
        downsample_mode=downsample_mode,
        do_resize=bool(pipeline("do_resize", True)),
        use_image_id=bool(use_image_id),
        expand_slices=True if expand_slices is None else bool(expand_slices),
        merge_follows_mode=merge_follows_mode(image_processor),
        **tokens,
    )


def merge_follows_mode(image_processor: Any) -> bool:
    """Whether the installed image processor's find_best_resize takes downsample_mode (transformers 5.23+;
    5.7.0 to 5.20.2 round to patch_size * 4 whatever the mode): read from its signature, not a version."""
    method = getattr(type(image_processor), "find_best_resize", None)
    if method is None:  # not the real class (tests' stand-ins): the newest behaviour
        return True
    return "downsample_mode" in inspect.signature(method).parameters


# ---- the image processor's arithmetic, in its order ----------------------------------------------


def ensure_divide(length: int | float, divisor: int) -> int:
    return max(round(length / divisor) * divisor, divisor)


def find_best_resize(
    height: int | float, width: int | float, settings: MiniCPMVSettings, allow_upscale: bool
) -> tuple[int, int]:
    """`find_best_resize`: the area scaled to scale_resolution^2 (when larger, or allowed), then each side
    to a multiple of patch_size * merge_factor."""
    scale = settings.scale_resolution
    if (height * width > scale * scale) or allow_upscale:
        aspect_ratio = width / height
        height = int(scale / math.sqrt(aspect_ratio))
        width = int(height * aspect_ratio)
    divisor = settings.patch_size * settings.merge_factor
    return ensure_divide(height, divisor), ensure_divide(width, divisor)


def sliced_grid(height: int, width: int, settings: MiniCPMVSettings) -> tuple[int, int] | None:
    """`get_sliced_grid`: (rows, cols), or None for no slices."""
    log_ratio = math.log(width / height)
    ratio = width * height / (settings.scale_resolution * settings.scale_resolution)
    multiple = min(math.ceil(ratio), settings.max_slice_nums)
    if multiple <= 1:
        return None
    best = (1, 1)
    min_error = float("inf")
    for num_slices in (multiple - 1, multiple, multiple + 1):
        if num_slices == 1 or num_slices > settings.max_slice_nums:
            continue
        for rows in range(1, num_slices + 1):
            if num_slices % rows == 0:
                cols = num_slices // rows
                error = abs(log_ratio - math.log(cols / rows))
                if error < min_error:
                    best = (rows, cols)
                    min_error = error
                elif error == min_error and rows > best[0]:
                    best = (rows, cols)
    return best


def refine_size(
    height: int, width: int, grid: tuple[int, int], settings: MiniCPMVSettings
) -> tuple[int, int]:
    """`get_refine_size`: the size the image is resized to before it is cut into rows x cols slices."""
    rows, cols = grid
    refine_width = ensure_divide(width, cols)
    refine_height = ensure_divide(height, rows)
    best_height, best_width = find_best_resize(refine_height / rows, refine_width / cols, settings, True)
    return best_height * rows, best_width * cols


def count(height: int, width: int, settings: MiniCPMVSettings, images_in_row: int = 1) -> ImageCount:
    """Image tokens of one image: the source's plus every slice's.

    grid: (rows, cols, source tokens, tokens per slice); rows = cols = 0 without slices. The resized size
    is the refined image's (the one cut into slices) where there are slices, else the source's.
    """
    del images_in_row  # every image is expanded on its own
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    patch = settings.patch_size
    grid = sliced_grid(height, width, settings) if settings.slice_mode else None
    if settings.do_resize:
        source_h, source_w = find_best_resize(height, width, settings, allow_upscale=grid is None)
    else:
        source_h, source_w = height, width
        _whole_patches(source_h, source_w, patch)
    source_tokens = (source_h // patch) * (source_w // patch) // settings.token_divisor
    if grid is None:
        return ImageCount(source_h, source_w, (0, 0, source_tokens, 0), source_tokens)
    rows, cols = grid
    if settings.do_resize:
        refined_h, refined_w = refine_size(height, width, grid, settings)
    else:
        refined_h, refined_w = height, width
        if height % rows or width % cols:
            # divide_to_patches cuts (height // rows)-px strips from the top: a remainder is one more
            # ragged slice than the grid has, which replace_image_token refuses
            raise CountError(
                f"with do_resize off, an image of {width}x{height} does not split into {rows}x{cols} "
                "equal slices: the processor refuses it"
            )
    slice_h, slice_w = refined_h // rows, refined_w // cols
    if not settings.do_resize:
        _whole_patches(slice_h, slice_w, patch)
    slice_tokens = (slice_h // patch) * (slice_w // patch) // settings.token_divisor
    tokens = source_tokens + rows * cols * slice_tokens if settings.expand_slices else source_tokens
    return ImageCount(refined_h, refined_w, (rows, cols, source_tokens, slice_tokens), tokens)


def _whole_patches(height: int, width: int, patch: int) -> None:
    if height % patch or width % patch:
        # reshape_by_patch reshapes (C, H, W) into whole patches: numpy refuses the rest
        raise CountError(
            f"with do_resize off, a {width}x{height} part of the image is not whole {patch}-px patches: "
            "the image processor cannot cut it into patches"
        )


def count_exact(image_processor: Any, images: list[Any], settings: MiniCPMVSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs; tokens from its target sizes."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, ZeroDivisionError) as exc:
        raise CountError(str(exc)) from None
    sizes = [[int(v) for v in size] for size in output["target_sizes"]]
    counts = []
    start = 0
    patch = settings.patch_size
    for (rows, cols), parts in zip(output["grids"], output["num_patches_per_image"], strict=True):
        rows, cols, parts = int(rows), int(cols), int(parts)
        mine = sizes[start : start + parts]
        start += parts
        tokens = [h * w // settings.token_divisor for h, w in mine]
        if rows and cols:
            if len(mine) != rows * cols + 1:
                raise CountError(f"got {len(mine) - 1} slices for a {rows}x{cols} grid")
            height, width = mine[1][0] * patch * rows, mine[1][1] * patch * cols
            total = sum(tokens) if settings.expand_slices else tokens[0]
            counts.append(ImageCount(height, width, (rows, cols, tokens[0], tokens[1]), total))
        else:
            height, width = mine[0][0] * patch, mine[0][1] * patch
            counts.append(ImageCount(height, width, (0, 0, tokens[0], 0), tokens[0]))
    return counts


# ---- the text -----------------------------------------------------------------------------------


def expand(count: ImageCount, settings: MiniCPMVSettings) -> Expansion:
    """`replace_image_token`: the source between <image> and </image>, then the slices row by row."""
    rows, cols, source_tokens, slice_tokens = count.grid
    token = settings.image_token
    segments: list[Segment] = [
        settings.image_start_token,
        Run(token, source_tokens),
        settings.image_end_token,
    ]
    if settings.expand_slices and rows and cols:
        for row in range(rows):
            if row:
                segments.append("\n")
            for _ in range(cols):
                segments += [settings.slice_start_token, Run(token, slice_tokens), settings.slice_end_token]
    return tuple(segments)


def compose(rendered: str, expansions: Sequence[Expansion], settings: MiniCPMVSettings) -> list[Segment]:
    """`_prepend_local_ids`: with use_image_id, image i of the sample gets <image_id>i</image_id> first."""
    pieces = rendered.split(settings.image_token)
    if len(pieces) - 1 != len(expansions):
        raise CountError(
            f"{len(pieces) - 1} image placeholders in the text for {len(expansions)} images: "
            "the processor cannot pair them"
        )
    segments: list[Segment] = [pieces[0]]
    for index, (expansion, piece) in enumerate(zip(expansions, pieces[1:], strict=True)):
        if settings.use_image_id:
            segments.append(f"{settings.image_id_start_token}{index}{settings.image_id_end_token}")
        segments.extend(expansion)
        segments.append(piece)
    return segments


def expansion_length(count: ImageCount, settings: MiniCPMVSettings) -> int:
    """Special tokens of one image's expansion, the image id's aside (vlmlint stats' drop points)."""
    rows, cols, source_tokens, slice_tokens = count.grid
    length = source_tokens + 2
    if settings.expand_slices and rows and cols:
        length += rows * cols * (slice_tokens + 2) + rows - 1
    return length


def max_slice_saturation(height: int, width: int, settings: MiniCPMVSettings) -> int:
    """From this max_slice_nums on the grid no longer changes: every candidate is allowed."""
    multiple = math.ceil(width * height / (settings.scale_resolution * settings.scale_resolution))
    return multiple + 1 if multiple > 1 else 1


@functools.lru_cache(maxsize=65536)
def _slice_drops(height: int, width: int, settings: MiniCPMVSettings) -> tuple[tuple[int, ...], int]:
    saturation = max_slice_saturation(height, width, settings)
    drops = []
    previous = None
    for value in range(1, saturation + 1):
        at = dataclasses.replace(settings, max_slice_nums=value)
        length = expansion_length(count(height, width, at), at)
        if previous is not None and length < previous:
            drops.append(value)
        previous = length
    return tuple(drops), saturation


def size_knob(settings: MiniCPMVSettings) -> Knob | str:
    """max_slice_nums, on the whole numbers from 1 (`vlmlint stats`)."""
    if not settings.slice_mode or not settings.expand_slices:
        return (
            "slice_mode is off: every image is one source image resized to about scale_resolution^2, so "
            "max_slice_nums has no effect; only the max length is recommended"
        )
    if not settings.do_resize:
        return (
            "do_resize is off: images are cut as they are and most sizes are refused, so max_slice_nums "
            "is not searched; only the max length is recommended"
        )

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # More slices are allowed as the value grows, but a grid of more slices can have thinner slices
        # of fewer tokens each: the values where an image's expansion shrinks are found by trying each.
        return _slice_drops(height, width, settings)

    return Knob(
        name="max_slice_nums",
        current=settings.max_slice_nums,
        step=1,
        low=1,
        settings_at=lambda value: dataclasses.replace(settings, max_slice_nums=value),
        shape=shape,
        open_ended=True,
        text_unchanged=False,  # rows of slices are joined by "\n"
        grid="whole numbers from 1 (1: no slices, the source image only)",
    )


def canvas_position_span(count: ImageCount, settings: MiniCPMVSettings) -> int:
    """MiniCPM-V 4.7's get_rope_index: positions of the image tokens, so that text positions + this
    gives the canvas frame's max(canvas_h, canvas_w) + 1, its <image>/</image>, <slice>/</slice> and
    row "\\n" markers included (those are counted as text tokens by the scan, so they are taken off).

    A newline or marker token right after the image is also drawn into the frame by the model; the
    scan counts it as one more position (an upper bound by those tokens).
    """
    rows, cols, source_tokens, slice_tokens = count.grid
    merge = math.isqrt(settings.token_divisor)  # the model's merge (by mode), not find_best_resize's rounding
    patch = settings.patch_size
    markers = 2
    if settings.expand_slices and rows and cols:
        slice_h = count.resized_height // rows // patch // merge
        slice_w = count.resized_width // cols // patch // merge
        canvas = max(rows * slice_h, cols * slice_w)
        markers += 2 * rows * cols + rows - 1
    else:
        canvas = max(count.resized_height // patch // merge, count.resized_width // patch // merge)
    return canvas + 1 - markers


MARKERS = tuple(TOKEN_DEFAULTS.values())

FAMILY = Family.define(
    __name__, name="minicpmv", title="MiniCPM-V 4.6", processor_classes=("MiniCPMV4_6Processor",),
    image_processor_types=image_processor_types("MiniCPMV4_6"), placeholder=PLACEHOLDER,
    marker_tokens=MARKERS,
)  # fmt: skip

# MiniCPM-V 4.7: the same image processor and expansion; its canvas M-RoPE positions differ.
FAMILY_4_7 = dataclasses.replace(
    FAMILY, name="minicpmv4_7", title="MiniCPM-V 4.7", processor_classes=("MiniCPMV4_7Processor",),
    image_processor_types=(), position_span=canvas_position_span,
)  # fmt: skip
