"""The cost of vlmlint's video header probe (vlmlint/video.py) per file, against a full decode.

    python bench/bench_video_probe.py [--runs 100] [--seconds 10]

Encodes (once, under bench/.data/, git-ignored) a 1280x720 30 fps H.264 clip of `--seconds` seconds
as MP4 (the frame count is in its header) and as MKV (no frame count: the probe demuxes and counts
packets, reading the whole file), plus the fixture clips' 320x240 MP4 and 64x48 MKV. Then times,
`--runs` times each: probe_video on the path, on an open file (media.py passes the handle it checked
is a regular file), on the bytes, and once a full PyAV decode of every frame (what the naive loop
pays before any video processor runs). Prints milliseconds per file.
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "fixtures"))

from vlmlint.video import probe_video  # noqa: E402

DATA = ROOT / "bench" / ".data" / "video"
CLIPS = ROOT / "fixtures" / "datasets" / "media" / "clips"


def _clips(seconds: int) -> list[Path]:
    import clips  # fixtures/clips.py

    DATA.mkdir(parents=True, exist_ok=True)
    made = []
    for fmt in ("mp4", "mkv"):
        path = DATA / f"h264_1280x720_30fps_{seconds}s.{fmt}"
        if not path.exists():
            path.write_bytes(clips.encode(fmt, "libx264", 1280, 720, Fraction(30), 30 * seconds))
        made.append(path)
    return made + [CLIPS / "h264_320x240_24fps.mp4", CLIPS / "h264_64x48_25fps.mkv"]


def _per_file(call, runs: int) -> float:
    call()  # the first call loads FFmpeg's libraries
    start = time.perf_counter()
    for _ in range(runs):
        call()
    return (time.perf_counter() - start) / runs * 1000


def _decode(path: Path) -> int:
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    print(
        f"{'clip':36} {'size':>9} {'frames':>7} {'from':>8} {'path ms':>8} {'handle ms':>9} {'bytes ms':>8} "
        f"{'decode ms':>9}"
    )
    for path in _clips(args.seconds):
        meta = probe_video(str(path))
        data = path.read_bytes()

        def on_handle(path=path):
            with open(path, "rb") as handle:
                probe_video(handle)

        by_path = _per_file(lambda path=path: probe_video(str(path)), args.runs)
        by_handle = _per_file(on_handle, args.runs)
        by_bytes = _per_file(lambda data=data: probe_video(data), args.runs)
        decode = _per_file(lambda path=path: _decode(path), max(1, min(args.runs, 3)))
        print(
            f"{path.name:36} {len(data):>9,} {meta.frames:>7} {meta.frames_from:>8} {by_path:>8.2f} "
            f"{by_handle:>9.2f} {by_bytes:>8.2f} {decode:>9.1f}"
        )


if __name__ == "__main__":
    main()
