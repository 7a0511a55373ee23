"""The cost of images.read_header per distinct file: the fast header reader (image_header.py) against the
PIL path it stands in for, both in one run, on the same files.

    python bench/bench_image_header.py [--files 20000] [--pool 40]

Makes (once, under bench/.data/, git-ignored) a pool of varied images per format: JPEG photos of
320x240 to 4000x3000 with camera-like EXIF (orientation 1-8), some with ICC profiles, progressive or
grayscale; PNG RGB / RGBA / palette+tRNS / L; WebP lossy, lossless, with alpha, with EXIF in VP8X. Then
`--files` hard links per format and side (each row of a real dataset names its own file: no header cache
helps), and times read_header on each link: once as it runs (fast reader first), once with the fast
reader switched off (PIL's lazy open, as before), each side on its own links, twice with the sides swapped.
Prints microseconds per file and the ratio, per format.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PIL import Image, ImageCms  # noqa: E402

from vlmlint import images  # noqa: E402
from vlmlint.records import ImageRef  # noqa: E402

DATA = ROOT / "bench" / ".data" / "image_header"
SIZES = [(320, 240), (640, 480), (1024, 768), (1920, 1080), (1080, 1920), (4000, 3000), (800, 6000)]


def _photo(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """A photo-like picture (noise over a gradient) so that files have realistic sizes."""
    small = Image.effect_noise((max(1, size[0] // 8), max(1, size[1] // 8)), 40).convert("RGB")
    tint = Image.new("RGB", small.size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    return Image.blend(small, tint, 0.5).resize(size, Image.Resampling.BILINEAR)


def _exif(rng: random.Random) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = rng.randint(1, 8)
    exif[0x010F], exif[0x0110] = "Camera maker", "Model 7"
    exif[0x0131], exif[0x0132] = "firmware 1.0", "2026:12:03 10:00:00"
    exif[0x011A] = exif[0x011B] = 72.0
    exif[0x0128] = 2
    return exif.tobytes()


def _pool(fmt: str, count: int) -> list[Path]:
    folder = DATA / fmt / "pool"
    folder.mkdir(parents=True, exist_ok=True)
    paths = sorted(folder.iterdir())
    if len(paths) >= count:
        return paths[:count]
    rng = random.Random(fmt)
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    for index in range(count):
        size = SIZES[index % len(SIZES)] if fmt != "webp" else SIZES[index % 5]  # WebP: 16383 px at most
        image = _photo(rng, size)
        stream = io.BytesIO()
        if fmt == "jpg":
            options = {"quality": rng.randint(70, 95), "exif": _exif(rng)}
            if index % 3 == 0:
                options["icc_profile"] = icc
            if index % 4 == 1:
                options["progressive"] = True
            image.convert("L" if index % 7 == 3 else "RGB").save(stream, "JPEG", **options)
        elif fmt == "png":
            kind = ("RGB", "RGBA", "P", "L")[index % 4]
            shown = image.convert(kind) if kind != "P" else image.quantize(64)
            options = {"transparency": 0} if kind == "P" else {}
            if index % 3 == 0:
                options["icc_profile"] = icc
            shown.save(stream, "PNG", compress_level=1, **options)
        else:
            options = {"lossless": index % 3 == 0, "quality": rng.randint(60, 90)}
            if index % 2:
                options["exif"] = _exif(rng)
            (image.convert("RGBA") if index % 4 == 1 else image).save(stream, "WEBP", **options)
        (folder / f"{index:03d}.{fmt}").write_bytes(stream.getvalue())
    return sorted(folder.iterdir())[:count]


def _links(fmt: str, side: str, pool: list[Path], files: int) -> list[Path]:
    folder = DATA / fmt / f"links_{side}_{files}"
    if folder.is_dir() and len(list(folder.iterdir())) == files:
        return sorted(folder.iterdir())
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for index in range(files):
        link = folder / f"{index:06d}.{fmt}"
        if not link.exists():
            link.hardlink_to(pool[index % len(pool)])
        made.append(link)
    return made


def _time(paths: list[Path], fast: bool) -> float:
    refs = [ImageRef(reference=str(p), path=str(p)) for p in paths]
    original = images.read_fast
    if not fast:
        images.read_fast = lambda stream, size: None
    try:
        start = time.perf_counter()
        for ref in refs:
            images.read_header(ref, max_decode_pixels=10**12)
        return (time.perf_counter() - start) / len(refs) * 1e6
    finally:
        images.read_fast = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000, help="distinct files per format and side")
    parser.add_argument("--pool", type=int, default=40, help="different images per format")
    args = parser.parse_args()
    print(f"read_header per distinct file, {args.files:,} hard links per format and side, pool {args.pool}")
    print(f"{'format':8} {'fast us':>9} {'PIL us':>9} {'ratio':>7}")
    for fmt in ("jpg", "png", "webp"):
        pool = _pool(fmt, args.pool)
        first, second = _links(fmt, "a", pool, args.files), _links(fmt, "b", pool, args.files)
        for path in first + second:  # warm the page and dentry caches for both sides alike
            path.stat()
        fast_runs, pil_runs = [], []
        for fast_side, pil_side in ((first, second), (second, first)):
            fast_runs.append(_time(fast_side, True))
            pil_runs.append(_time(pil_side, False))
        fast_us, pil_us = min(fast_runs), min(pil_runs)
        print(f"{fmt:8} {fast_us:9.1f} {pil_us:9.1f} {pil_us / fast_us:6.2f}x")


if __name__ == "__main__":
    main()
