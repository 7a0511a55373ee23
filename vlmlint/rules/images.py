"""Rules about the image files themselves: unreadable, oversized, odd shapes, modes and frames.

They read the header facts of `ImageInfo` (size after EXIF orientation, format, mode, orientation,
animation, transparency) and the processor's resized size. No rule decodes pixels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

from PIL import Image

from vlmlint.models.base import Family
from vlmlint.models.registry import family_named
from vlmlint.records import Finding, ImageError, ImageInfo, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext
from vlmlint.rules.rows import numbered_images, numbered_media

# EXIF orientations that turn the image by 90 or 270 degrees: width and height swap.
_SWAPPING = frozenset({5, 6, 7, 8})
_ORIENTATIONS = {
    2: "mirrored left-right",
    3: "upside down",
    4: "mirrored top-bottom",
    5: "mirrored and turned 90 degrees",
    6: "turned 90 degrees",
    7: "mirrored and turned 90 degrees",
    8: "turned 90 degrees",
}
_HIGH_BIT_DEPTH = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I"})


def _sized(row: RowResult) -> Iterator[tuple[int, ImageInfo]]:
    """(1-based position, info) of each image whose header was read and that the processor accepts."""
    for position, info in enumerate(row.images, start=1):
        if info.error_code is None and info.width and info.height:
            yield position, info


def _setting(context: RuleContext, name: str) -> int | None:
    """An integer image setting of the model's family (e.g. Qwen-VL's max_pixels), else None."""
    value = getattr(context.image_settings, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class UnreadableImage(Rule):
    """An image cannot be decoded: not an image, corrupt, truncated, empty, or not a file.

    **Why** PIL raises (UnidentifiedImageError, "image file is truncated") inside the data loader
    worker, which kills the run, or the loader substitutes a blank image. Truncation is caught
    without decoding by the missing end-of-image marker (JPEG, PNG, GIF) or the pixel data running
    past the end of the file (TIFF), then confirmed with one decode so files with trailing bytes
    pass; `--exact` decodes every image and also catches corruption inside the data.

    **Example** `photo.jpg` holding an HTML error page from a failed download, an empty (0-byte)
    file, a folder named `img.png`, or a JPEG cut off half way (no end-of-image marker). Videos and
    audio clips are checked without decoding (their first 512 bytes): an empty file, not a regular
    file, or text where a container should be (`clip.mp4` holding an HTML page); a frame-list video
    has each frame checked as an image.

    Also reported, without reading further: a file in a format vlmlint does not open (EPS/PostScript,
    whose loading runs Ghostscript, WMF, MPEG, PCX...: it reads JPEG, PNG, GIF, WebP, BMP, TIFF, AVIF,
    HEIF, ICO, JPEG 2000, PPM, TGA and QOI), a header that needs more than 64 MiB read or a TIFF
    whose first IFD declares more than 524,288 values (strips, tiles), an embedded image (data: URI,
    stored bytes) above 32 MiB, and an --allow-remote download above 32 MiB or not complete in 30 s.

    **Fix** Re-download or re-encode the file, or remove the row.
    """

    code = "VLM201"
    name = "unreadable-image"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in numbered_images(row, ImageError.UNREADABLE):
            yield self.finding(
                row,
                f"image {position}: {info.error}",
                f"re-encode or re-download {info.reference}, or drop the row",
            )
        for label, info in numbered_media(row, ImageError.UNREADABLE):
            yield self.finding(
                row, f"{label}: {info.error}", f"re-encode or re-download {info.reference}, or drop the row"
            )


class DecompressionBomb(Rule):
    """An image has more pixels than PIL will open (a decompression bomb, or just a huge scan).

    **Why** PIL's `Image.open` raises DecompressionBombError above twice `Image.MAX_IMAGE_PIXELS`
    (89,478,485 by default, so above 178,956,970 pixels) and warns above it; the loader crashes,
    or decodes gigabytes per image (3 bytes a pixel in RGB) and runs out of memory. vlmlint never
    decodes such an image, not even with `--exact`; the limit is the `bomb_pixels` threshold.

    **Example** A 20000x15000 map scan (300,000,000 pixels), or a small PNG whose header declares
    65535x65535.

    **Fix** Downscale the image offline to at most the limit (the hint gives a size), or remove
    the row. Raise `Image.MAX_IMAGE_PIXELS` in the loader only for files you trust.
    """

    code = "VLM202"
    name = "decompression-bomb"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = int(context.thresholds["bomb_pixels"])
        pil_limit = Image.MAX_IMAGE_PIXELS
        for position, info in enumerate(row.images, start=1):
            if not info.width or not info.height:
                continue
            pixels = info.width * info.height
            if pixels <= limit and info.error_code != ImageError.BOMB:
                continue
            if pil_limit and pixels > 2 * pil_limit:
                pil = f"PIL's Image.open raises DecompressionBombError (above {2 * pil_limit:,} pixels)"
            elif pil_limit and pixels > pil_limit:
                pil = f"PIL's Image.open warns (DecompressionBombWarning, above {pil_limit:,} pixels)"
            else:
                pil = "PIL opens it"
            scale = math.sqrt(limit / pixels)
            width, height = max(1, math.floor(info.width * scale)), max(1, math.floor(info.height * scale))
            yield self.finding(
                row,
                f"image {position} is {info.width}x{info.height} = {pixels:,} pixels, above the "
                f"{limit:,}-pixel limit: {pil}, and decoding it takes {pixels * 3 / 2**30:.1f} GiB as "
                "RGB; vlmlint does not decode it",
                f"downscale it to at most {limit:,} pixels (e.g. {width}x{height}) or drop the row",
            )


class ExtremeAspectRatio(Rule):
    """The model's image processor refuses the image's shape (e.g. an aspect ratio above 200 for Qwen-VL).

    **Why** Qwen-VL's smart_resize raises "absolute aspect ratio must be smaller than 200" for
    such images, which stops the data loader, or a lenient pipeline squashes the image to nothing.
    A ratio of exactly 200 passes.

    **Example** A 27x5600 px strip (ratio 207.4) in a Qwen2-VL dataset.

    **Fix** Pad the short side, or split the long side into tiles (one image each) so each piece
    is below the limit, or remove the row.
    """

    code = "VLM203"
    name = "extreme-aspect-ratio"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in numbered_images(row, ImageError.REJECTED):
            shape = ""
            if info.width and info.height:
                ratio = max(info.width, info.height) / min(info.width, info.height)
                shape = f" ({info.width}x{info.height}, aspect ratio {ratio:.1f})"
            yield self.finding(
                row,
                f"image {position}{shape} is refused by the processor: {info.error}",
                "pad the short side or split the long side into tiles below the processor's "
                "aspect-ratio limit, or drop the row",
            )


class TinyImage(Rule):
    """An image is tiny: a side of a few pixels, or an area below the processor's minimum, so it is upscaled.

    **Why** A 16x16 icon or a 200x12 crop holds less than one vision patch of information per
    side; the processor upscales it (Qwen-VL to at least 28 px a side and `min_pixels` in area,
    fixed-size families to their input size), so the row trains on an interpolated blur its text
    cannot be about. Such images are usually extraction bugs (favicons, spacer GIFs, failed crops).

    **Example** A 20x15 px thumbnail, which Qwen2-VL upscales to 84x56; or a 35x35 image (1,225
    pixels) below Qwen2-VL's `min_pixels` of 3,136, upscaled to 56x56 (2.6x the pixels).

    **Fix** Use the full-size image, or remove the row; for a `min_pixels` upscale, lower
    `min_pixels`. Thresholds: `tiny_image_side` (a side below it), and `tiny_upscale_factor` (an
    image below the family's `min_pixels`, where it has one, enlarged by more than this factor in
    area; a mere rounding to the patch grid is not reported).
    """

    code = "VLM204"
    name = "tiny-image"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        side_limit = context.thresholds["tiny_image_side"]
        min_pixels = (
            _setting(context, "min_pixels") if getattr(context.image_settings, "do_resize", True) else None
        )
        for position, info in _sized(row):
            width, height = info.width, info.height
            pixels = width * height
            resized_width, resized_height = info.resized_width or 0, info.resized_height or 0
            fix = f"replace {info.reference} with its full-size original, or drop the row"
            if min(width, height) < side_limit:
                reason = f"a side below {side_limit:g} px"
            elif (
                min_pixels
                and pixels < min_pixels
                and resized_width * resized_height > pixels * context.thresholds["tiny_upscale_factor"]
            ):
                # Below the processor's minimum area and enlarged well beyond a rounding to the patch grid.
                reason = f"{pixels:,} pixels, below the processor's min_pixels of {min_pixels:,}"
                fix = f"lower min_pixels to <= {pixels}, or {fix}"
            else:
                continue
            seen = ""
            if resized_width * resized_height > pixels:
                grown = resized_width * resized_height / pixels
                seen = f"; the processor upscales it to {resized_width}x{resized_height} ({grown:.1f}x the pixels)"
            yield self.finding(row, f"image {position} is only {width}x{height} px ({reason}){seen}", fix)


class ExifRotated(Rule):
    """An image carries an EXIF orientation: loaders that ignore it show it turned or mirrored.

    **Why** transformers' `load_image` (and vlmlint's counts) apply the EXIF orientation, but many
    training loaders call `Image.open(path).convert("RGB")` (LLaVA, most custom datasets), which
    ignores it: the model then sees a phone photo sideways or upside down while its text says "on
    the left", and for orientations 5-8 (a 90-degree turn) width and height swap, so the image
    token count differs from vlmlint's. Warning rather than info: vlmlint cannot tell which loader
    you use, and the two disagree silently.

    **Example** A 4032x3024 JPEG stored with orientation 6 (a portrait photo): 3024x4032 once
    rotated. For LLaVA-NeXT (llava-v1.6-mistral-7b) that is 2352 image tokens as load_image rotates
    it; 2340 if the loader ignores EXIF (a newline token ends each row of features). Qwen-VL's
    count is the same either way; the picture the model sees is not.

    **Fix** Bake the orientation into the pixels so every loader sees the same image:
    `ImageOps.exif_transpose(Image.open(p)).save(p)` (it removes the tag), or apply
    `ImageOps.exif_transpose` in your loader.
    """

    code = "VLM205"
    name = "exif-rotated"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in _sized(row):
            orientation = info.orientation
            if orientation not in _ORIENTATIONS:
                continue
            how = _ORIENTATIONS[orientation]
            if orientation in _SWAPPING:
                message = (
                    f"image {position} has EXIF orientation {orientation} ({how}), stored "
                    f"{info.height}x{info.width}, {info.width}x{info.height} once rotated"
                )
                if info.tokens is not None and info.tokens_without_exif is not None:
                    if info.tokens_without_exif != info.tokens:
                        message += (
                            f": {info.tokens} image tokens as transformers' load_image rotates it; "
                            f"{info.tokens_without_exif} if your loader ignores EXIF"
                        )
                    else:
                        message += f": {info.tokens} image tokens either way"
            else:
                message = (
                    f"image {position} has EXIF orientation {orientation}: a loader that ignores EXIF "
                    f"shows it {how} (same {info.width}x{info.height} size either way)"
                )
            yield self.finding(
                row,
                message,
                f"re-save {info.reference} with the rotation applied: "
                "ImageOps.exif_transpose(Image.open(p)).save(p), or exif_transpose in your loader",
            )


class UnusualMode(Rule):
    """An image's pixel format changes when it is converted to RGB: CMYK, 16-bit, float, or transparency.

    **Why** Every processor converts to 8-bit RGB, and the conversion loses or changes content:
    CMYK is converted by PIL's plain formula without the file's colour profile (colours shift);
    16- and 32-bit integer images (modes I;16, I) are clipped, so every value above 255 turns
    white; float images (mode F) are truncated, so values in 0..1 turn black. With an alpha
    channel (RGBA, LA, PA) or a transparent palette colour, transformers' image processor
    composites the image on white, but loaders that call `.convert("RGB")` first (transformers'
    `load_image`, LLaVA) drop the alpha and transparent pixels show whatever colour they store,
    often black: black text on a transparent background becomes an all-black image.

    Transparency is reported as **info** (the header cannot tell whether any pixel is actually
    transparent: many screenshots are RGBA and fully opaque); the other modes as warnings.

    **Example** A 16-bit grayscale PNG from a microscope (mode I;16): white after conversion. A
    logo PNG in RGBA on a transparent background.

    **Fix** Convert the file yourself, the way you mean it: CMYK with its ICC profile
    (`ImageCms`); 16-bit by scaling (`(np.asarray(im) >> 8).astype("uint8")`); transparency by
    compositing on the background you want (`Image.alpha_composite(Image.new("RGBA", im.size,
    "white"), im.convert("RGBA")).convert("RGB")`); then save as 8-bit RGB.
    """

    code = "VLM206"
    name = "unusual-mode"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in _sized(row):
            mode = info.mode or ""
            severity = self.severity
            if mode in _HIGH_BIT_DEPTH:
                what = "16/32-bit integer pixels: converting to RGB clips every value above 255 to white"
                fix = 'rescale to 8 bits (e.g. (np.asarray(im) >> 8).astype("uint8") for 16-bit data)'
            elif mode == "F":
                what = "32-bit float pixels: converting to RGB truncates them (values in 0..1 become black)"
                fix = "rescale the values to 0..255 and save as 8-bit"
            elif mode == "CMYK":
                what = "CMYK: converted to RGB by PIL's plain formula, without its colour profile (colours shift)"
                fix = "convert it to RGB with its ICC profile (PIL.ImageCms) and save it as RGB"
            elif info.transparency:
                kind = "an alpha channel" if "A" in mode.upper() else "a transparent colour"
                what = (
                    f"{kind}: the image processor composites it on white, but a loader that calls "
                    '.convert("RGB") first drops the alpha (transparent pixels show the colour they store, often black)'
                )
                fix = (
                    'flatten it on the background you mean: Image.alpha_composite(Image.new("RGBA", im.size, '
                    '"white"), im.convert("RGBA")).convert("RGB")'
                )
                severity = Severity.INFO
            else:
                continue
            finding = self.finding(
                row,
                f"image {position} ({info.format or 'image'}, mode {mode}) has {what}",
                f"{fix}, then save {info.reference} as 8-bit RGB",
            )
            yield finding if severity == self.severity else replace(finding, severity=severity)


class AnimatedImage(Rule):
    """An image has several frames (animated GIF, WebP or PNG, multi-page TIFF): only the first is used.

    **Why** `Image.open(...).convert("RGB")` and transformers' `load_image` keep the first frame;
    a caption about the motion ("the dog jumps over the bar") or about a later page then describes
    something the model never sees. (A camera MPO, a JPEG carrying a preview or depth picture, is
    not reported: its first frame is the photo.)

    **Example** `clip.gif`, a 40-frame animation whose first frame is a blank title card.

    **Fix** Save the frame you mean as a still PNG or JPEG (`im.seek(k); im.convert("RGB").save(...)`),
    or use the model's video input for clips.
    """

    code = "VLM207"
    name = "animated-image"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        for position, info in _sized(row):
            if not info.animated:
                continue
            kind = "a multi-page TIFF" if info.format == "TIFF" else f"an animated {info.format or 'image'}"
            yield self.finding(
                row,
                f"image {position} is {kind}: only its first {'page' if info.format == 'TIFF' else 'frame'} "
                "is used",
                f"save the frame you mean from {info.reference} as a still PNG/JPEG, or use the video input",
            )


class HeavyResize(Rule):
    """The processor shrinks or enlarges an image's area by more than a factor (16 by default).

    **Why** Shrunk, fine detail is lost: a 4000x3000 scanned page becomes 504x364 pixels for a
    small `max_pixels`, and its small text is unreadable to the model that is asked to read it.
    Enlarged, the model sees an interpolated blow-up. This is often a deliberate token budget
    (LLaVA-1.5 sees every photo at 336x336), hence info: check it matches the task (OCR, charts
    and documents need the detail). Enlargements of images with a side below `tiny_image_side`
    are VLM204's. For Gemma 3 with pan-and-scan, the crops count as seen pixels.

    **Example** A 6000x4000 photo (24,000,000 pixels) under a Qwen2-VL processor with
    `max_pixels` 200,704: resized to 532x364 (193,648 pixels), 123.9x fewer.

    **Fix** Where the family has a setting, the hint names it: Qwen-VL `max_pixels` (one image
    token per (patch_size x merge_size)^2 pixels: 784 for Qwen2-VL) or `min_pixels`;
    Idefics3/SmolVLM and Pixtral `size.longest_edge`. Otherwise crop the region that matters, or
    split the image into several images (InternVL and LLaVA-NeXT pick their tile grid by aspect
    ratio, so a larger tile budget does not necessarily help). Threshold: `heavy_resize_factor`.
    """

    code = "VLM208"
    name = "heavy-resize"
    severity = Severity.INFO

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        limit = context.thresholds["heavy_resize_factor"]
        family = family_named(context.family)
        for position, info in _sized(row):
            area = info.width * info.height
            if not info.resized_width or not info.resized_height or area > context.thresholds["bomb_pixels"]:
                continue  # no resize known, or never decoded at all (VLM202's)
            seen = info.resized_width * info.resized_height
            if family is not None and family.resized_copies is not None:
                seen *= family.resized_copies(info.grid)  # Gemma 3's pan-and-scan crops, each full size
            size = f"image {position} is {info.width}x{info.height} ({area:,} px)"
            target = f"{info.resized_width}x{info.resized_height} ({seen:,} px)"
            if area > seen * limit:
                factor = area / seen
                yield self.finding(
                    row,
                    f"{size}; the processor shrinks it to {target}, {factor:.1f}x fewer pixels: fine detail is lost",
                    self._shrink_fix(info, context, limit, family),
                )
            elif (
                seen > area * limit and min(info.width, info.height) >= context.thresholds["tiny_image_side"]
            ):
                factor = seen / area
                yield self.finding(
                    row,
                    f"{size}; the processor enlarges it to {target}, {factor:.1f}x more pixels: the model sees a blur",
                    self._grow_fix(info, context, limit),
                )

    @staticmethod
    def _shrink_fix(info: ImageInfo, context: RuleContext, limit: float, family: Family | None) -> str:
        long_side = max(info.width, info.height)
        if family is not None and family.shrink_hint is not None:  # Qwen-VL: max_pixels
            hint = family.shrink_hint(info.height, info.width, limit, context.image_settings)
            if hint is not None:
                return hint
        longest = _setting(context, "longest_edge") or _setting(context, "max_height")
        if longest:  # Idefics3 / SmolVLM (size.longest_edge), Pixtral (size.longest_edge)
            tile = _setting(context, "max_image_size") or _setting(context, "patch_size") or 1
            edge = math.ceil(long_side / math.sqrt(limit) / tile) * tile
            if edge > longest:
                return f"set size.longest_edge >= {edge} (more image tokens), or crop the region that matters"
        return "crop the region that matters, or split the image into several images"

    @staticmethod
    def _grow_fix(info: ImageInfo, context: RuleContext, limit: float) -> str:
        area = info.width * info.height
        if _setting(context, "min_pixels") and _setting(context, "factor"):  # Qwen-VL
            return (
                f"set min_pixels <= {math.floor(area * limit)}, or use a larger original of {info.reference}"
            )
        longest = _setting(context, "longest_edge")
        if longest:  # Idefics3 / SmolVLM resize every image's long side to size.longest_edge, up or down
            tile = _setting(context, "max_image_size") or 1
            edge = max(tile, math.floor(max(info.width, info.height) * math.sqrt(limit) / tile) * tile)
            if edge < longest:
                return f"set size.longest_edge <= {edge} (fewer image tokens), or use a larger original"
        return f"use a larger original of {info.reference}, or drop the row"
