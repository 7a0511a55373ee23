"""Differential tests: vlmlint's DeepSeek-OCR-2 count and expansion against the real DeepseekOcr2Processor.

The real side is transformers' own code: `get_optimal_tiled_canvas` of image_processing_pil_deepseek_ocr2,
DeepseekOcr2ImageProcessorPil's preprocess (num_local_patches, the global view's pixel size) and
DeepseekOcr2Processor built from the fixture folder (fixtures/support.py's real_processor). Counts are <image> ids in
input_ids and the whole input_ids length, for one- and two-image rows.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, deepseek_ocr2, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "deepseek-ocr-2"
HUB = deepseek_ocr2.DeepseekOcr2Settings()
FIT = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_call(processor, sizes: list[tuple[int, int]], text: str, **kwargs) -> dict | str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = processor(text=[text], images=[image(h, w) for h, w in sizes], **kwargs)
        except ValueError as exc:
            return str(exc)
    ids = list(out["input_ids"][0])
    return {
        "image": ids.count(processor.image_token_id),
        "length": len(ids),
        "crops": [int(n) for n in out["num_local_patches"]],
        "global": [tuple(v.shape[-2:]) for v in out["pixel_values"]],
    }


def test_load_model_picks_deepseek_ocr2_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "deepseek_ocr2"
    assert model.counted_by() == "formula (family deepseek_ocr2)"
    assert model.settings == HUB
    assert (HUB.global_tokens, HUB.local_tokens) == (256, 144)


@FIT
@given(
    st.integers(1, 20000), st.integers(1, 20000), st.sampled_from([(2, 6), (1, 9), (1, 1), (3, 4), (2, 12)])
)
@example(768, 768, (2, 6))
@example(769, 768, (2, 6))
@example(1, 2000, (2, 6))
@example(1000, 8000, (2, 6))
@example(2048, 1024, (1, 9))
def test_canvas_is_get_optimal_tiled_canvas(height, width, bounds):
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import get_optimal_tiled_canvas

    s = dataclasses.replace(HUB, min_patches=bounds[0], max_patches=bounds[1])
    real = get_optimal_tiled_canvas((height, width), (768, 768), *bounds)
    assert deepseek_ocr2.optimal_canvas(height, width, s) == tuple(real)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 5000),
    st.integers(1, 5000),
    st.sampled_from(
        [{}, {"max_patches": 9}, {"crop_to_patches": False}, {"min_patches": 1, "max_patches": 4}]
    ),
)
@example(1, 1, {})
@example(1, 4000, {})
@example(4000, 1, {})
@example(1, 2000, {})
@example(768, 768, {})
@example(769, 768, {})
@example(3264, 2448, {})
@example(1, 1000, {"crop_to_patches": False})
def test_count_is_the_processor_call(processor, height, width, kwargs):
    """<image> ids, num_local_patches and the global view's size of processor(text, images), refusals too."""
    s = dataclasses.replace(HUB, **kwargs)
    real = real_call(processor, [(height, width)], "<image>\nFree OCR.", **kwargs)
    if isinstance(real, str):
        with pytest.raises(CountError) as refused:
            deepseek_ocr2.count(height, width, s)
        assert real in str(refused.value)
        return
    count = deepseek_ocr2.count(height, width, s)
    assert count.tokens == real["image"]
    assert count.grid[0] * count.grid[1] == real["crops"][0]
    view = deepseek_ocr2.global_view(height, width, s)
    assert real["global"][0] == (max(view), max(view))  # padded to a square
    if not real["crops"][0]:
        assert (count.resized_height, count.resized_width) == view
    assert deepseek_ocr2.expand(count, s) == (Run("<image>", real["image"]),)


def row_length(scanner: Scanner, sizes: list[tuple[int, int]], text: str) -> int:
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    rendered = scanner.render((Message(Role.USER, parts),))
    counts = [deepseek_ocr2.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


@pytest.mark.parametrize(
    "sizes",
    [[(300, 200)], [(3264, 2448)], [(1080, 1920)], [(769, 768), (100, 5000)], [(1, 2000), (2000, 1)]],
    ids=str,
)
def test_whole_prompt_matches_the_processor(processor, scanner, sizes):
    """The chat template's rendering through vlmlint's Scanner, vs processor(text) on the same text."""
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text="Free OCR."),)
    rendered = scanner.render((Message(Role.USER, parts),))
    assert rendered == "<image>\n" * len(sizes) + "Free OCR."
    real = real_call(processor, sizes, rendered)
    assert row_length(scanner, sizes, "Free OCR.") == real["length"]
    assert sum(deepseek_ocr2.count(h, w, HUB).tokens for h, w in sizes) == real["image"]


def test_processor_images_kwargs_win_over_the_preprocessor_config(tmp_path, processor):
    folder = tmp_path / "ocr2"
    shutil.copytree(FOLDER, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["max_patches"] = 9  # DeepseekOcr2Processor passes its own max_patches 6 on every call
    pre["tile_size"] = 512  # not among the processor's images_kwargs: this one counts
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    s = load_model(str(folder)).settings
    assert (s.max_patches, s.tile_size, s.local_tokens) == (6, 512, 64)
    real = real_call(harness.real_processor(folder), [(1000, 8000)], "<image>")
    assert real["crops"] == [6] and deepseek_ocr2.count(1000, 8000, s).tokens == real["image"]
    # the processor's tokens for the global view follow size.height, even without crop_to_patches
    assert dataclasses.replace(s, crop_to_patches=False).global_tokens == 256


def test_processor_config_and_tokenizer_kwargs_are_read():
    s = deepseek_ocr2.settings_from(
        processor_image_settings(),
        {"patch_size": 14, "downsample_ratio": 2, "tokenizer_init_kwargs": {"max_patches": 3}},
        {},
    )
    assert (s.patch_size, s.downsample_ratio, s.max_patches) == (14, 2, 3)
    assert s.global_tokens == 37**2  # ceil(1024 / 14 / 2)


def processor_image_settings():
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import (
        DeepseekOcr2ImageProcessorPil,
    )

    return DeepseekOcr2ImageProcessorPil()


def test_count_exact_runs_the_real_image_processor(processor):
    images = [image(300, 1000), image(3264, 2448), image(2000, 2000)]
    exact = deepseek_ocr2.count_exact(processor.image_processor, images, HUB)
    assert exact == [deepseek_ocr2.count(i.height, i.width, HUB) for i in images]


def test_dataset_scan_counts_rows_as_the_processor(tmp_path, processor):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    for name, (w, h) in {"a.png": (2448, 3264), "b.png": (300, 200)}.items():
        Image.new("RGB", (w, h)).save(tmp_path / name)
    rows = [
        {"id": "1", "images": ["a.png"], "messages": [{"role": "user", "content": "<image>Free OCR."}]},
        {
            "id": "2",
            "images": ["a.png", "b.png"],
            "messages": [{"role": "user", "content": "<image><image>Read."}],
        },
    ]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    # The header path against the real processor on decoded images (--exact), row by row: --verify would
    # not decode the 8 MP page (its pixel budget, vlmlint/verify.py ROW_PIXELS).
    args = [
        "scan",
        str(tmp_path / "data.jsonl"),
        "--model",
        str(FOLDER),
        "--verify",
        "0",
        "-f",
        "jsonl",
        "--all-rows",
    ]

    def rows(*extra):
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code in (0, 1), result.output
        return [(r["seq_len"], r["image_tokens"]) for r in map(json.loads, result.stdout.splitlines())]

    formula = rows()
    assert len(formula) == 2 and all(seq is not None for seq, _ in formula)
    assert formula == rows("--exact")
