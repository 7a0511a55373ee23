"""Llama 4 against the real Llama4Processor's recorded outputs (fixtures/reference/llama4.json).

The image processor is torchvision-only, so `make test` cannot run it: the reference job records what the
real processor gives on white images (aspect_ratios, the tiles per image, the resized extent inside the
black padding, every special token of the expansion, the whole input_ids length of a one-user-turn prompt)
and these tests hold vlmlint's formula, expansion and Scanner to it.
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
from vlmlint.models import CountError, ModelError, Run, llama4, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "llama-4-scout-17b-16e-instruct"
RECORDS = _records.load("llama4")
CASES = RECORDS["cases"]
TOKENS = (
    "<|image_start|>",
    "<|image_end|>",
    "<|tile_x_separator|>",
    "<|tile_y_separator|>",
    "<|image|>",
    "<|patch|>",
)

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("llama4") is not None, reason=str(_records.version_mismatch("llama4"))
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


def test_load_model_picks_llama4_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "llama4"
    assert model.counted_by() == "formula (family llama4)"
    assert model.settings == llama4.Llama4Settings()
    assert model.settings.tokens_per_tile == 144
    assert model.max_position_embeddings == 10485760


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]) + str(c["kwargs"] or "")
)
def test_formula_matches_the_real_processor(case, scanner):
    settings = dataclasses.replace(scanner.model.settings, **case["kwargs"])
    result = case["result"]
    assert result["tile"] == [settings.tile_size, settings.tile_size]
    counts = []
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = llama4.count(height, width, settings)
        assert list(count.grid) == real["aspect_ratio"]
        assert count.tokens == real["chunks"] * 144
        assert [count.resized_height, count.resized_width] == real["resized"]
        counts.append(count)
    got = specials([llama4.expand(c, settings) for c in counts])
    for token in TOKENS:
        assert got.get(token, 0) == result["specials"][token], token
    assert got["<|patch|>"] == sum(c.tokens for c in counts)
    assert result["specials"]["<|begin_of_text|>"] == 1  # the template's; the tokenizer adds none
    assert row_length(scanner, counts) == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (336, 336), (337, 337), (1345, 1344), (336, 5377)} <= sizes
    assert any(len(case["sizes"]) == 2 for case in CASES)
    assert {r["chunks"] for case in CASES for r in case["result"]["images"]} >= {1, 3, 5, 17}
    assert any(case["kwargs"].get("resize_to_max_canvas") for case in CASES)


def test_expansion_is_prompt_split_image():
    s = llama4.Llama4Settings()
    one = llama4.count(300, 300, s)
    assert llama4.expand(one, s) == ("<|image_start|>", "<|image|>", Run("<|patch|>", 144), "<|image_end|>")
    two = llama4.count(336, 672, s)
    assert two.grid == (1, 2) and two.tokens == 3 * 144
    p = Run("<|patch|>", 144)
    assert llama4.expand(two, s) == (
        "<|image_start|>", p, "<|tile_x_separator|>", p, "<|tile_y_separator|>", "<|image|>", p, "<|image_end|>",
    )  # fmt: skip
    tall = llama4.count(672, 336, s)
    assert llama4.expand(tall, s) == (
        "<|image_start|>", p, "<|tile_y_separator|>", p, "<|tile_y_separator|>", "<|image|>", p, "<|image_end|>",
    )  # fmt: skip


def test_supported_resolutions_are_find_supported_resolutions():
    # transformers' docstring example (max_num_chunks 5, 224 px tiles), reordered as the function builds it
    got = llama4.supported_resolutions(4, 224)
    assert sorted(got) == sorted(
        [(224, 896), (448, 448), (224, 224), (896, 224), (224, 672), (672, 224), (224, 448), (448, 224)]
    )
    assert got[:3] == ((224, 896), (448, 448), (224, 224))  # ratio 0.25 first, then 1.0 (2x2 before 1x1)


def test_settings_are_read_from_the_files(tmp_path):
    folder = tmp_path / "llama4"
    shutil.copytree(FOLDER, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["max_patches"] = 4
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    proc = json.loads((folder / "processor_config.json").read_text())
    proc["pixel_shuffle_ratio"] = 1.0
    (folder / "processor_config.json").write_text(json.dumps(proc))
    model = load_model(str(folder))
    assert (model.settings.max_patches, model.settings.downsample_ratio) == (4, 1)
    assert llama4.count(2000, 2000, model.settings).tokens == 5 * 576


def test_tokenizer_init_kwargs_override_the_image_processor():
    s = llama4.settings_from({"max_patches": 16}, {"tokenizer_init_kwargs": {"max_patches": 2}}, {})
    assert s.max_patches == 2


def test_refusals_and_verify_without_torchvision(tmp_path):
    with pytest.raises(CountError, match="must be square"):
        llama4.settings_from({"size": {"height": 336, "width": 448}}, {}, {})
    with pytest.raises(CountError, match="pixel_shuffle_ratio"):
        llama4.settings_from({}, {"pixel_shuffle_ratio": 0}, {})
    with pytest.raises(CountError, match="do_resize=False"):
        llama4.count(100, 100, llama4.Llama4Settings(do_resize=False))
    with pytest.raises(CountError, match="needs torch and torchvision"):
        llama4.count_exact({}, [], llama4.Llama4Settings())
    folder = tmp_path / "llama4"
    shutil.copytree(FOLDER, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["size"] = {"height": 336, "width": 448}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    with pytest.raises(ModelError, match="must be square"):
        load_model(str(folder))
