"""Molmo2 against the real Molmo2Processor's recorded outputs (fixtures/reference/molmo2.json): the
image_grids row and crop count per image, every special token of the expansion, the BOS the processor
prepends, and the whole input_ids length of a one-user-turn prompt."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.reference import _records
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, load_model, molmo2
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "molmo2-8b"
RECORDS = _records.load("molmo2")
CASES = RECORDS["cases"]

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("molmo2") is not None, reason=str(_records.version_mismatch("molmo2"))
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


def specials(expansions: list) -> dict[str, int]:
    totals: dict[str, int] = {}
    for expansion in expansions:
        for segment in expansion:
            token, n = (segment.token, segment.count) if isinstance(segment, Run) else (segment, 1)
            totals[token] = totals.get(token, 0) + n
    return totals


def test_load_model_picks_molmo2_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "molmo2"
    assert model.settings == molmo2.Molmo2Settings(bos_token="<|endoftext|>")


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]) + str(c["kwargs"] or "")
)
def test_formula_matches_the_real_processor(case, scanner):
    settings = dataclasses.replace(scanner.model.settings, **case["kwargs"])
    result = case["result"]
    counts = []
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = molmo2.count(height, width, settings)
        assert list(count.grid) == real["grid"]
        _, (tiling_h, tiling_w) = molmo2.image_grid(height, width, settings)
        assert tiling_h * tiling_w + 1 == real["crops"]
        counts.append(count)
    got = specials([molmo2.expand(c, settings) for c in counts])
    for token in ("<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<im_end>"):
        assert got.get(token, 0) == result["specials"][token], token
    assert got["<im_patch>"] == sum(c.tokens for c in counts)
    assert result["specials"]["<|endoftext|>"] == 1  # the BOS __call__ prepends
    assert row_length(scanner, counts) == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (112, 112), (2241, 378)} <= sizes
    assert any(len(case["sizes"]) == 2 for case in CASES)


def test_bos_is_not_doubled_when_the_prompt_starts_with_it():
    s = molmo2.Molmo2Settings(bos_token="<|endoftext|>")
    assert molmo2.compose("<|endoftext|>hi", [], s) == ["<|endoftext|>hi"]
    assert molmo2.compose("hi", [], s) == ["<|endoftext|>", "hi"]


def test_column_and_start_token_switches():
    s = molmo2.Molmo2Settings(
        image_use_col_tokens=False, single_crop_col_tokens=False, single_crop_start_token=False
    )
    c = molmo2.count(500, 500, s)
    assert specials([molmo2.expand(c, s)]) == {"<im_start>": 2, "<im_patch>": c.tokens, "<im_end>": 2}
    # use_single_crop_col_tokens None follows image_use_col_tokens
    settings = molmo2.settings_from({}, {"image_use_col_tokens": False}, {})
    assert not settings.single_crop_col_tokens and settings.single_crop_start_token


def test_settings_refusals_and_verify_without_torchvision():
    with pytest.raises(CountError, match="square"):
        molmo2.settings_from({"size": {"height": 378, "width": 336}}, {}, {})
    with pytest.raises(CountError, match="overlap"):
        molmo2.settings_from({"overlap_margins": [14, 14]}, {}, {})
    with pytest.raises(CountError, match="needs torch and torchvision"):
        molmo2.count_exact({}, [], molmo2.Molmo2Settings())
