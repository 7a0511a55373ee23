"""vlmlint at scale, in one run: rows/s and peak memory on 100k and 1M LLaVA rows and a parquet dataset.

    python bench/bench_scale.py [--rows 100000,1000000] [--parquet-rows 50000] [--model qwen2-vl]

Generates once, under bench/.data/scale/ (git-ignored):
- a pool of 2,000 image files (JPEG and PNG; 16 px to 4,000 px per side, square, photo-like and extreme
  aspect ratios), which the rows reuse as real datasets do;
- LLaVA JSONL manifests of each --rows size (one or two images per row, varied questions and answers);
- a parquet file of --parquet-rows rows whose images are embedded as bytes (HF Image struct columns).

Then, each as its own `vlmlint scan ... --format json -o FILE` process (default --jobs: every core):
wall time end to end (model load included), rows/s, and the peak memory of the whole process tree
(parent and workers, sampled every 50 ms from /proc): RSS summed (shared pages counted once per
process) and PSS (shared pages divided among the processes: the physical memory held). The 100k JSONL scan also runs with --jobs 1
and the two JSON reports are compared. Last, on a 2,000-row subset: vlmlint's default path against the
naive per-row loop (decode every image, run the real processor), in this process, with the ratio.

Targets (issue 7, 2 cores, Qwen2-VL): >= 5,000 rows/s end to end on JSONL with local JPEGs, 1M rows in
under 5 minutes, peak RSS under 1 GiB and within 1.5x between 100k and 1M rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
DATA = ROOT / "bench" / ".data" / "scale"
POOL_FILES = 2000

from bench_fast_vs_naive import ANSWERS, QUESTIONS, compare, naive_loop  # noqa: E402

EXTRA_QUESTIONS = [
    "Read the text in the image and translate it into French.",
    "What colour is the largest object? Answer with one word.",
    "Write a short caption for this photo suitable for a news article about city life.",
    "Compare the two images and list three differences between them.",
]


def _pool(rng: random.Random) -> list[tuple[str, int, int]]:
    """The image files: (relative path, width, height); built once."""
    from PIL import Image

    folder = DATA / "images"
    index = DATA / "pool.json"
    if index.exists():
        return [tuple(item) for item in json.loads(index.read_text())]
    folder.mkdir(parents=True, exist_ok=True)
    pool = []
    for i in range(POOL_FILES):
        kind = rng.random()
        if kind < 0.75:  # photo and screen sizes
            w, h = rng.randint(200, 1600), rng.randint(200, 1600)
        elif kind < 0.9:  # large
            w, h = rng.randint(1600, 4000), rng.randint(1600, 4000)
        elif kind < 0.97:  # small
            w, h = rng.randint(16, 200), rng.randint(16, 200)
        else:  # extreme aspect ratios
            long, short = rng.randint(1000, 4000), rng.randint(16, 40)
            w, h = (long, short) if rng.random() < 0.5 else (short, long)
        fmt = "PNG" if i % 5 == 0 else "JPEG"
        name = f"images/img_{i:05d}.{'png' if fmt == 'PNG' else 'jpg'}"
        colour = tuple(rng.randrange(256) for _ in range(3))
        Image.new("RGB", (w, h), colour).save(DATA / name, fmt, **({"quality": 80} if fmt == "JPEG" else {}))
        pool.append((name, w, h))
    index.write_text(json.dumps(pool))
    return pool


def _row(rng: random.Random, index: int, pool, image_value) -> dict:
    count = 2 if rng.random() < 0.3 else 1
    images = [image_value(rng.choice(pool)) for _ in range(count)]
    question = rng.choice(QUESTIONS + EXTRA_QUESTIONS)
    answer = " ".join(rng.choice(ANSWERS) for _ in range(rng.randint(1, 4)))
    return {
        "id": f"scale-{index}",
        "image": images if count > 1 else images[0],
        "conversations": [
            {"from": "human", "value": "<image>\n" * count + question},
            {"from": "gpt", "value": answer},
        ],
    }


def build_jsonl(rows: int, pool) -> Path:
    path = DATA / f"llava-{rows}.jsonl"
    if path.exists():
        return path
    rng = random.Random(rows)
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as out:
        for index in range(rows):
            out.write(json.dumps(_row(rng, index, pool, lambda item: item[0])) + "\n")
    temporary.rename(path)
    return path


def build_parquet(rows: int, pool) -> Path:
    """Images embedded as {"bytes", "path"} structs, as datasets' Image feature stores them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = DATA / f"embedded-{rows}.parquet"
    if path.exists():
        return path
    small = [item for item in pool if item[1] * item[2] <= 1600 * 1600]  # keep the file a sane size
    data = {name: (DATA / name).read_bytes() for name, _, _ in small[:400]}
    rng = random.Random(rows)
    writer = None
    batch: list[dict] = []
    for index in range(rows):
        row = _row(rng, index, small[:400], lambda item: {"bytes": data[item[0]], "path": item[0]})
        row["image"] = row["image"] if isinstance(row["image"], list) else [row["image"]]
        row["images"] = row.pop("image")
        batch.append(row)
        if len(batch) == 5000 or index == rows - 1:
            table = pa.Table.from_pylist(batch)
            writer = writer or pq.ParquetWriter(str(path) + ".tmp", table.schema)
            writer.write_table(table)
            batch = []
    writer.close()
    os.rename(str(path) + ".tmp", path)
    return path


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of a process and all its descendants, from /proc.

    RSS summed over forked workers counts the pages they share with the parent once per process;
    PSS divides each shared page among its sharers: the physical memory the scan really holds.
    """
    rss = pss = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    stack.extend(int(c) for c in children.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return rss, pss


def run_scan(dataset: Path, model: str, out: Path, extra: list[str]) -> tuple[float, int, int, int]:
    """One `vlmlint scan` process: wall seconds, peak tree RSS, peak tree PSS, exit code."""
    command = [sys.executable, "-m", "vlmlint.cli", "scan", str(dataset), "--model", model, "--quiet",
               "--verify", "0", "--format", "json", "-o", str(out), *extra]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    peak = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory(process.pid)
            peak, peak_pss = max(peak, rss), max(peak_pss, pss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    done.set()
    sampler.join()
    wall = time.perf_counter() - start
    if process.returncode > 1:
        raise SystemExit(f"scan failed ({process.returncode}): {stderr.strip()}")
    return wall, peak, peak_pss, process.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="JSONL sizes, comma-separated")
    parser.add_argument("--parquet-rows", type=int, default=50000)
    parser.add_argument("--model", default="qwen2-vl")
    parser.add_argument("--naive-rows", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    rng = random.Random(11)
    started = time.perf_counter()
    pool = _pool(rng)
    sizes = [int(n) for n in args.rows.split(",") if n]
    manifests = {n: build_jsonl(n, pool) for n in sizes}
    parquet = build_parquet(args.parquet_rows, pool) if args.parquet_rows else None
    print(f"data ready in {time.perf_counter() - started:.0f} s under {DATA}", flush=True)
    out = DATA / "reports"
    out.mkdir(exist_ok=True)

    print(f"\nmodel {args.model}, {os.cpu_count()} cores; each scan is one process, model load included\n")
    print(
        f"{'dataset':<30}{'rows':>9}{'jobs':>6}{'wall s':>8}{'rows/s':>8}{'peak RSS MiB':>14}{'peak PSS MiB':>14}"
    )
    results = {}
    runs = [(f"llava-{n}.jsonl", manifests[n], n, []) for n in sizes]
    if sizes:
        runs.insert(1, (f"llava-{sizes[0]}.jsonl", manifests[sizes[0]], sizes[0], ["--jobs", "1"]))
    if parquet:
        runs.append((parquet.name, parquet, args.parquet_rows, []))
    for label, dataset, rows, extra in runs:
        report = out / f"{label}{'-j1' if extra else ''}.json"
        wall, peak, pss, _ = run_scan(dataset, args.model, report, extra)
        jobs = "1" if extra else "auto"
        results[(label, jobs)] = (rows, wall, peak, pss, report)
        print(
            f"{label:<30}{rows:>9}{jobs:>6}{wall:>8.1f}{rows / wall:>8.0f}{peak / 2**20:>14.0f}{pss / 2**20:>14.0f}",
            flush=True,
        )

    if sizes:
        first = f"llava-{sizes[0]}.jsonl"
        one = json.loads(results[(first, "1")][4].read_text())
        every = json.loads(results[(first, "auto")][4].read_text())
        print(f"\n{first}: report with the default --jobs == report with --jobs 1: {one == every}")
        if len(sizes) > 1:
            small, big = results[(first, "auto")], results[(f"llava-{sizes[-1]}.jsonl", "auto")]
            print(
                f"{sizes[-1]:,} rows / {sizes[0]:,} rows: peak RSS {big[2] / small[2]:.2f}x, "
                f"peak PSS {big[3] / small[3]:.2f}x"
            )

    # The naive per-row processor loop against the default path, on the same rows, in this process.
    subset = DATA / f"subset-{args.naive_rows}.jsonl"
    source = manifests[sizes[0]] if sizes else build_jsonl(args.naive_rows, pool)
    with source.open() as rows_in, subset.open("w") as rows_out:
        for _, line in zip(range(args.naive_rows), rows_in, strict=False):
            rows_out.write(line)
    from vlmlint.config import build_config
    from vlmlint.engine import Scanner
    from vlmlint.models import profiles

    scanner = Scanner(build_config(str(subset), {}, {"model": args.model, "jobs": 1}))
    start = time.perf_counter()
    outcomes = list(scanner.scan())
    fast = time.perf_counter() - start
    folder = (
        profiles.profile_folder(profiles.find_profile(args.model))
        if profiles.find_profile(args.model)
        else args.model
    )
    naive, slow = naive_loop(subset, str(folder), outcomes)
    problems = compare(outcomes, naive)
    print(
        f"\n{args.naive_rows} rows, one process: vlmlint {len(outcomes) / fast:,.0f} rows/s, naive processor loop "
        f"{len(outcomes) / slow:,.1f} rows/s: {slow / fast:,.0f}x; disagreements: {len(problems)}"
    )
    for problem in problems[:10]:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
