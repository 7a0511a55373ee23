"""Command A Vision against the real Cohere2VisionProcessor's recorded outputs (fixtures/reference/cohere2_vision.json).

The image processor is torchvision-only, so `make test` cannot run it: the reference job records what the real
processor gives on blank images (num_patches per image, the tiles in pixel_values, every special token of the
expansion, the whole input_ids length of a one-user-turn prompt) and these tests hold vlmlint's formula,
expansion and Scanner to it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from fixtures.reference import _records
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, cohere2_vision, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "command-a-vision-07-2025"
RECORDS = _records.load("cohere2_vision")
CASES = RECORDS["cases"]
TOKENS = ("<|IMG_PATCH|>", "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_LINE_BREAK|>")

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("cohere2_vision") is not None,
    reason=str(_records.version_mismatch("cohere2_vision")),
)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def row_length(scanner: Scanner, counts: list) -> int:
    """input_ids length of the one-user-turn prompt the recorder rendered, through vlmlint."""
    parts = tuple(Part(is_image=True) for _ in counts) + (Part(text="Describe the image."),)
    rendered = scanner.render((Message(Role.USER, parts),))
    composed, saved = scanner.compose(rendered, counts)
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def specials(expansions: list) -> dict[str, int]:
    totals: dict[str, int] = {}
    for expansion in expansions:
        for segment in expansion:
            token, n = (segment.token, segment.count) if isinstance(segment, Run) else (segment, 1)
            totals[token] = totals.get(token, 0) + n
    return totals


def test_load_model_picks_cohere2_vision_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "cohere2_vision"
    assert model.counted_by() == "formula (family cohere2_vision)"
    assert model.settings == cohere2_vision.Cohere2VisionSettings()
    assert model.max_position_embeddings == 131072


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]) + str(c["kwargs"] or "")
)
def test_formula_matches_the_real_processor(case, scanner):
    settings = dataclasses.replace(scanner.model.settings, **case["kwargs"])
    result = case["result"]
    counts = []
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = cohere2_vision.count(height, width, settings)
        assert cohere2_vision.num_patches(*count.grid) == real["num_patches"]
        assert count.tokens == real["num_patches"] * 256
        counts.append(count)
    assert sum(cohere2_vision.num_patches(*c.grid) for c in counts) == result["tiles"]
    got = specials([cohere2_vision.expand(c, settings) for c in counts])
    for token in TOKENS:
        assert got.get(token, 0) == result["specials"][token], token
    assert got["<|IMG_PATCH|>"] == sum(c.tokens for c in counts)
    assert result["specials"]["<BOS_TOKEN>"] == 2  # the template's and the tokenizer's
    assert row_length(scanner, counts) == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (512, 512), (513, 512), (512, 6145), (1537, 2048)} <= sizes
    assert any(len(case["sizes"]) == 2 for case in CASES)
    assert {i["num_patches"] for case in CASES for i in case["result"]["images"]} >= {1, 3, 5, 13}
    assert any(case["kwargs"].get("crop_to_patches") is False for case in CASES)


def test_expansion_is_replace_image_token():
    s = cohere2_vision.Cohere2VisionSettings()
    one = cohere2_vision.count(300, 300, s)
    assert (one.grid, one.tokens, one.resized_height) == ((1, 1), 256, 512)
    p = Run("<|IMG_PATCH|>", 256)
    assert cohere2_vision.expand(one, s) == ("<|START_OF_IMG|>", p, "<|IMG_LINE_BREAK|>", "<|END_OF_IMG|>")
    two = cohere2_vision.count(513, 512, s)  # 2 rows x 1 column + the thumbnail
    assert (two.grid, two.resized_height, two.resized_width) == ((2, 1), 1024, 512)
    assert cohere2_vision.expand(two, s) == ("<|START_OF_IMG|>",) + (p, "<|IMG_LINE_BREAK|>") * 3 + (
        "<|END_OF_IMG|>",
    )


def test_canvas_search_is_get_optimal_tiled_canvas():
    s = cohere2_vision.Cohere2VisionSettings(max_patches=4)
    # transformers' docstring example of get_all_supported_aspect_ratios(4), then sorted by columns * rows
    assert sorted(cohere2_vision.supported_grids(4)) == [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 1),
        (2, 2),
        (3, 1),
        (4, 1),
    ]
    assert cohere2_vision.supported_grids(4)[:3] == ((1, 1), (1, 2), (2, 1))
    assert cohere2_vision.optimal_canvas(100, 100, s) == (1, 1)  # the least upscale
    assert cohere2_vision.optimal_canvas(5000, 5000, s) == (2, 2)  # the least downscale
    assert cohere2_vision.optimal_canvas(600, 1100, s) == (2, 2)  # all below 1: 2x2 (0.93) beats 2x1 (0.85)


def test_settings_are_read_from_the_files(tmp_path):
    folder = tmp_path / "c2v"
    shutil.copytree(FOLDER, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["max_patches"] = 4
    pre["patch_size"] = 8
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    s = load_model(str(folder)).settings
    assert (s.max_patches, s.patch_size) == (4, 8)
    assert cohere2_vision.count(3000, 4000, s).tokens == 5 * 64  # 2x2 + thumbnail, 8 x 8 per tile


def test_tokenizer_init_kwargs_override_the_image_processor():
    init = {
        "max_patches": 2,
        "extra_special_tokens": {
            "boi_token": "<a>",
            "eoi_token": "<b>",
            "image_token": "<c>",
            "img_line_break_token": "<d>",
        },
    }
    s = cohere2_vision.settings_from({}, {"tokenizer_init_kwargs": init}, {})
    assert (s.max_patches, s.boi_token, s.placeholder) == (2, "<a>", "<c>")


def test_refusals_and_verify_without_torchvision(tmp_path):
    with pytest.raises(CountError, match="the tokenizer has no boi_token"):
        cohere2_vision.settings_from({}, {"tokenizer_init_kwargs": {}}, {})
    init = {"boi_token": "<a>", "eoi_token": "<b>", "image_token": "<c>", "img_line_break_token": "<d>"}
    with pytest.raises(CountError, match="square"):
        cohere2_vision.settings_from(
            {"size": {"height": 512, "width": 448}}, {"tokenizer_init_kwargs": init}, {}
        )
    with pytest.raises(CountError, match="needs torch and torchvision"):
        cohere2_vision.count_exact({}, [], cohere2_vision.Cohere2VisionSettings())
    folder = tmp_path / "c2v"
    shutil.copytree(FOLDER, folder)
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    del tok["extra_special_tokens"]["img_line_break_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    with pytest.raises(ModelError, match="img_line_break_token"):
        load_model(str(folder))
