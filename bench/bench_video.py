"""The video header path against the naive loop, on the same rows in one run (issue 20's hidden cost).

    .venv-reference/bin/python bench/bench_video.py [--rows 60] [--seconds 4] [--model qwen2-vl]

Writes (once, under bench/.data/video-rows/, git-ignored) `--rows` distinct H.264 MP4 clips of
`--seconds` seconds at 640x360 30 fps and a JSONL manifest naming one per row. Then, on the same rows:

- the header path: `vlmlint scan` as a library (Scanner.scan: probe each clip's header with PyAV, the
  family's formula, tokenize), the scan timed (the model load, done once, is not: nor is the naive
  side's video processor load);
- the naive loop: per row, decode every frame of the clip with PyAV (transformers' own reader would do
  the same work) and run the model's real video processor (Qwen2VLVideoProcessor: torch and
  torchvision, hence the reference venv) with the decoder's VideoMetadata, reading video_grid_thw.

Prints both wall times, the ratio, and the disagreements (each row's video tokens, both sides).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "fixtures"))

DATA = ROOT / "bench" / ".data" / "video-rows"


def make_rows(rows: int, seconds: int) -> Path:
    from clips import encode

    DATA.mkdir(parents=True, exist_ok=True)
    manifest = DATA / f"rows-{rows}-{seconds}s.jsonl"
    if manifest.exists():
        return manifest
    lines = []
    for i in range(rows):
        clip = DATA / f"clip{i:04d}-{seconds}s.mp4"
        if not clip.exists():
            clip.write_bytes(encode("mp4", "libx264", 640, 360, 30, 30 * seconds))
        lines.append(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "<video>What happens in the video?"},
                        {"role": "assistant", "content": "Nothing much."},
                    ],
                    "videos": [clip.name],
                }
            )
        )
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def header_path(manifest: Path, model: str) -> tuple[float, list[int | None]]:
    from vlmlint.config import ScanConfig
    from vlmlint.engine import Scanner

    scanner = Scanner(ScanConfig(dataset=str(manifest), model=model, jobs=1))  # loading is not timed
    start = time.perf_counter()
    tokens = [outcome.result.media[0].tokens for outcome in scanner.scan()]
    return time.perf_counter() - start, tokens


def naive_loop(manifest: Path, model: str) -> tuple[float, list[int | None]]:
    import av
    import numpy as np
    from transformers import AutoVideoProcessor
    from transformers.video_utils import VideoMetadata

    from vlmlint.models import load_model

    folder = load_model(model).name if Path(model).is_dir() else None
    processor_dir = folder or str(_profile_folder(model))
    video_processor = AutoVideoProcessor.from_pretrained(processor_dir)  # loading is not timed
    start = time.perf_counter()
    tokens = []
    for line in manifest.read_text().splitlines():
        clip = DATA / json.loads(line)["videos"][0]
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)])
            fps = float(stream.average_rate)
        metadata = VideoMetadata(
            total_num_frames=len(frames), fps=fps, width=frames.shape[2], height=frames.shape[1]
        )
        output = video_processor(videos=[frames], video_metadata=[metadata], return_tensors="pt")
        grid = output["video_grid_thw"][0].tolist()
        tokens.append(grid[0] * grid[1] * grid[2] // video_processor.merge_size**2)
    return time.perf_counter() - start, tokens


def _profile_folder(name: str) -> Path:
    from vlmlint.models import profiles

    return profiles.profile_folder(profiles.PROFILES[name])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--model", default="qwen2-vl")
    args = parser.parse_args()
    manifest = make_rows(args.rows, args.seconds)
    fast_s, fast = header_path(manifest, args.model)
    naive_s, naive = naive_loop(manifest, args.model)
    disagreements = sum(a != b for a, b in zip(fast, naive, strict=True))
    print(
        f"{args.rows} rows, one {args.seconds} s 640x360 30 fps clip each, model {args.model}: "
        f"header path {fast_s:.2f} s ({args.rows / fast_s:.0f} rows/s), naive decode + video processor "
        f"{naive_s:.2f} s ({args.rows / naive_s:.1f} rows/s): {naive_s / fast_s:.0f}x; "
        f"{disagreements} disagreement(s); video tokens per row {fast[0]}"
    )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
