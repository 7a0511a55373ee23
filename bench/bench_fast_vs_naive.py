"""vlmlint's default path against the naive loop a user would write, on the same data, in one run.

    python bench/bench_fast_vs_naive.py [--rows 2000] [--models qwen2-vl,llava-v1.6-mistral-7b,idefics3-8b-llama3]
    python bench/bench_fast_vs_naive.py --rows 300 --models support:gemma4,support:glm4v

A model `support:MODEL_TYPE` is the support matrix's tiny folder for that model type, built from the
class defaults (fixtures/support.py): for processors without a formula this measures the
real-processor fallback (its rows/s) against the same naive loop.

Generates (once, under bench/.data/, git-ignored) a LLaVA JSONL dataset: one or two images per row,
JPEG and PNG, sizes from 16 px to 4,000 px per side, square and extreme aspect ratios, drawn from a
pool of files. Then, for each model (a processor folder under fixtures/processors/ or any path):

- fast: `Scanner.scan()` (headers + the family's formula + batched tokenization), timed end to end;
- naive: per row, decode the images as transformers' load_image does and call the real processor
  (PIL backend) on `processor.apply_chat_template(messages)`, as a user's pre-flight script would.

It prints rows/s of each, the ratio, and how many rows' counts disagree (sequence length and image
tokens). Disagreements are listed; the target is 0.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from PIL import Image, ImageOps  # noqa: E402

DATA = ROOT / "bench" / ".data"
POOL_SIZES = [
    (16, 16), (16, 4000), (4000, 16), (20, 3990), (3990, 20), (64, 64), (224, 224), (336, 336),
    (384, 384), (448, 448), (640, 480), (480, 640), (800, 600), (1024, 768), (768, 1024), (1280, 720),
    (1920, 1080), (1080, 1920), (2048, 2048), (3000, 4000), (4000, 3000), (4000, 4000), (333, 1000),
    (1000, 333), (100, 2000), (2000, 100), (37, 512), (512, 37), (1500, 1500), (2500, 1200),
]  # fmt: skip
QUESTIONS = [
    "Describe this image in detail.",
    "What is written on the sign?",
    "How many people are in the picture, and what are they doing?",
    "Is there anything unusual in this scene? Explain your answer step by step.",
]
ANSWERS = [
    "The image shows a busy street with cars, a red bus and several pedestrians crossing at a light.",
    "There are three people. Two are sitting on a bench and one is walking a dog along the path.",
    "The sign reads 'Open 9 to 5, Monday to Friday'. It is mounted above a small wooden door.",
]


def _size(name: str) -> tuple[int, int]:
    w, h = name.rsplit("_", 1)[1].split(".")[0].split("x")
    return int(w), int(h)


def build_dataset(rows: int, seed: int = 7) -> Path:
    """The dataset, built once per row count; images come from a varied pool of files."""
    folder = DATA / f"llava-{rows}"
    manifest = folder / "data.jsonl"
    if manifest.exists():
        return manifest
    rng = random.Random(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    pool = []
    for i, (w, h) in enumerate(POOL_SIZES * 4):  # 120 files: every size in JPEG and PNG, two variants
        fmt = "PNG" if i % 3 == 0 else "JPEG"
        name = f"images/img_{i:03d}_{w}x{h}.{'png' if fmt == 'PNG' else 'jpg'}"
        colour = tuple(rng.randrange(256) for _ in range(3))
        image = Image.new("RGB", (w, h), colour)
        image.paste(
            tuple(255 - c for c in colour), (w // 4, h // 4, max(w // 4 + 1, w // 2), max(h // 4 + 1, h // 2))
        )
        image.save(folder / name, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
        pool.append(name)
    # Like real datasets: most images are photo/screen sized, one in ten is huge or extreme.
    large = [name for name in pool if max(_size(name)) > 1300]
    common = [name for name in pool if name not in large]
    with manifest.open("w") as out:
        for index in range(rows):
            images = [
                rng.choice(large if rng.random() < 0.1 else common)
                for _ in range(2 if rng.random() < 0.3 else 1)
            ]
            prompt = "<image>\n" * len(images) + rng.choice(QUESTIONS)
            row = {
                "id": f"bench-{index}",
                "image": images if len(images) > 1 else images[0],
                "conversations": [
                    {"from": "human", "value": prompt},
                    {"from": "gpt", "value": rng.choice(ANSWERS)},
                ],
            }
            out.write(json.dumps(row) + "\n")
    return manifest


def fast_path(manifest: Path, model: str):
    from vlmlint.config import ScanConfig
    from vlmlint.engine import Scanner

    start = time.perf_counter()
    scanner = Scanner(ScanConfig(dataset=str(manifest), model=model))
    loaded = time.perf_counter()
    outcomes = list(scanner.scan())
    done = time.perf_counter()
    return outcomes, done - loaded, loaded - start


def _counted_token_id(model: str, processor) -> int:
    """The id of the token vlmlint counts as an image's tokens: its expansion's repeated run (Llama 4's
    <|patch|>, not the one <|image|> per image that processor.image_token_id names)."""
    from vlmlint.models import Run, load_model

    loaded = load_model(model)
    count = loaded.family.count(448, 448, loaded.settings)
    runs = [piece for piece in loaded.family.expand(count, loaded.settings) if isinstance(piece, Run)]
    if not runs:
        return processor.image_token_id
    return processor.tokenizer.convert_tokens_to_ids(runs[0].token)


def naive_loop(manifest: Path, model: str, outcomes, built=None) -> tuple[dict[int, tuple], float]:
    """Per row: decode images (load_image semantics) and run the real processor, as a user would."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import real_processor

    from vlmlint.template_cache import conversation_for_template, without_media

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stubbed = built is not None
        if built is not None:  # a support-matrix folder: its processor, video/audio parts absent
            from fixtures.support import real_processor as support_processor

            processor = support_processor(built.folder, built.processor_class)
        else:
            try:
                processor = real_processor(model)
                stubbed = False
            except (TypeError, AttributeError):  # audio/video parts required (Gemma 4, MiniCPM-V)
                from fixtures.support import real_processor as support_processor

                processor = support_processor(Path(model))
                stubbed = True  # MiniCPM-V returns torch tensors unless told otherwise
    image_token_id = built.image_token_id if built is not None else _counted_token_id(model, processor)
    results: dict[int, tuple] = {}
    start = time.perf_counter()
    for outcome in outcomes:
        sample = outcome.result.sample
        try:
            images = []
            for ref in sample.images:
                with Image.open(io.BytesIO(ref.data) if ref.data else ref.path) as image:
                    images.append(ImageOps.exif_transpose(image).convert("RGB"))
            if processor.chat_template is not None:
                text = processor.apply_chat_template(
                    conversation_for_template(without_media(sample.messages))
                )
            else:
                text = outcome.result.sample.messages  # not reached for the benchmarked models
            # one row's images as one sample (a flat list is one image per sample for some processors)
            nested = [images] if built is not None and images else images or None
            output = processor(
                text=[text], images=nested, **({"return_tensors": "np"} if built or stubbed else {})
            )
            ids = list(output["input_ids"][0])
            results[sample.index] = (len(ids), sum(1 for t in ids if t == image_token_id))
        except Exception as exc:  # the processor refuses the row (e.g. aspect ratio > 200)
            results[sample.index] = ("error", type(exc).__name__)
    return results, time.perf_counter() - start


def compare(outcomes, naive: dict[int, tuple]) -> list[str]:
    problems = []
    for outcome in outcomes:
        result = outcome.result
        expected = naive[result.sample.index]
        if expected[0] == "error":
            if result.seq_len is not None:
                problems.append(
                    f"row {result.sample.index}: processor raised {expected[1]}, vlmlint counted {result.seq_len}"
                )
            continue
        got = (result.seq_len, sum(t or 0 for t in result.image_tokens))
        if got != expected:
            problems.append(f"row {result.sample.index}: vlmlint {got} vs processor {expected}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--models", default="qwen2-vl,llava-v1.6-mistral-7b,idefics3-8b-llama3")
    args = parser.parse_args()
    manifest = build_dataset(args.rows)
    print(f"dataset: {manifest} ({args.rows} rows, images {min(POOL_SIZES)}..{max(POOL_SIZES)} px, JPEG+PNG)")
    print(f"{'model':<28} {'fast rows/s':>12} {'naive rows/s':>13} {'ratio':>8} {'disagree':>9}")
    failures = 0
    for name in args.models.split(","):
        built = None
        if name.startswith("support:"):
            from fixtures.support import build_folder

            built = build_folder(name.removeprefix("support:"), DATA / "support")
            model = str(built.folder)
        else:
            model = name if os.path.isdir(name) else str(ROOT / "fixtures" / "processors" / name)
        if not os.path.isdir(model):
            print(f"{name:<28} (no such processor folder; skipped)")
            continue
        outcomes, fast_seconds, load_seconds = fast_path(manifest, model)
        naive, naive_seconds = naive_loop(manifest, model, outcomes, built)
        problems = compare(outcomes, naive)
        failures += len(problems)
        fast_rate, naive_rate = len(outcomes) / fast_seconds, len(outcomes) / naive_seconds
        print(
            f"{name:<28} {fast_rate:>12.0f} {naive_rate:>13.1f} {fast_rate / naive_rate:>7.{0 if fast_rate >= 10 * naive_rate else 1}f}x {len(problems):>9d}"
            f"   (model load {load_seconds:.1f}s, not in the rate)"
        )
        for line in problems[:10]:
            print("    " + line)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
