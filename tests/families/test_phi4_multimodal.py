"""Phi-4-multimodal against the real Phi4MultimodalProcessor's recorded outputs
(fixtures/reference/phi4_multimodal.json): num_img_tokens and the HD canvas per image, the whole
input_ids length of a one-user-turn prompt, and the image processor's refusals of extreme shapes."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.reference import _records
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, load_model, phi4_multimodal
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "phi-4-multimodal"
RECORDS = _records.load("phi4_multimodal")
CASES = RECORDS["cases"]

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("phi4_multimodal") is not None,
    reason=str(_records.version_mismatch("phi4_multimodal")),
)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def row_length(scanner: Scanner, counts: list) -> int:
    parts = tuple(Part(is_image=True) for _ in counts) + (Part(text="Describe the image."),)
    rendered = scanner.render((Message(Role.USER, parts),))
    composed, saved = scanner.compose(rendered, counts)
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def test_load_model_picks_phi4_multimodal_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "phi4_multimodal"
    assert model.family.placeholder == "<|image|>"
    assert model.settings == phi4_multimodal.Phi4MultimodalSettings(
        crop_size=448, patch_size=14, dynamic_hd=36
    )


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]) + "".join(map(str, c["kwargs"]))
)
def test_formula_matches_the_real_processor(case, scanner):
    settings = dataclasses.replace(scanner.model.settings, **case["kwargs"])
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError) as refused:
            for height, width in case["sizes"]:
                phi4_multimodal.count(height, width, settings)
        assert str(refused.value) == result["error"]
        return
    counts = []
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = phi4_multimodal.count(height, width, settings)
        assert count.tokens == real["tokens"]
        assert [count.resized_height, count.resized_width] == real["image_size"]
        assert count.grid == (real["image_size"][0] // 448, real["image_size"][1] // 448)
        assert phi4_multimodal.expand(count, settings) == (Run("<|image|>", real["tokens"]),)
        counts.append(count)
    assert result["specials"]["<|image|>"] == sum(c.tokens for c in counts)
    if not case["kwargs"]:
        assert row_length(scanner, counts) == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (2689, 2689), (448, 449), (300, 20000)} <= sizes
    assert sum("error" in case["result"] for case in CASES) == 3
    assert any(len(case["sizes"]) == 2 for case in CASES)


def test_settings_refusals():
    with pytest.raises(CountError, match="square"):
        phi4_multimodal.settings_from(
            {"size": {"height": 448, "width": 336}}, {"tokenizer_image_token": "x"}, {}
        )
    with pytest.raises(CountError, match="image_token"):
        phi4_multimodal.settings_from({}, {}, {})


def test_count_exact_without_torchvision_says_what_is_needed():
    with pytest.raises(CountError, match="needs torch and torchvision"):
        phi4_multimodal.count_exact({}, [], phi4_multimodal.Phi4MultimodalSettings())
