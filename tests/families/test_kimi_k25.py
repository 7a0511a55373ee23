"""Kimi K2.5 against the real Kimi_K25Processor's recorded outputs (fixtures/reference/kimi_k25.json).

The image processor is torchvision-only, so `make test` cannot run it: the reference job records what
the real processor gives on blank images (image_grid_thw, <|media_pad|> per image, the whole input_ids
length of a one-user-turn prompt) and these tests hold vlmlint's formula, expansion and Scanner to it.
"""

from __future__ import annotations

import pytest

from fixtures.reference import _records
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, kimi_k25, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "kimi-k2.5"
RECORDS = _records.load("kimi_k25")
CASES = RECORDS["cases"]

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("kimi_k25") is not None, reason=str(_records.version_mismatch("kimi_k25"))
)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def row_length(scanner: Scanner, sizes: list[list[int]]) -> int:
    """input_ids length of the one-user-turn prompt the recorder rendered, through vlmlint."""
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text="Describe the image."),)
    rendered = scanner.render((Message(Role.USER, parts),))
    counts = [kimi_k25.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def test_load_model_picks_kimi_k25_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "kimi_k25"
    assert model.counted_by() == "formula (family kimi_k25)"
    assert model.settings == kimi_k25.KimiK25Settings(
        patch_size=14, merge_size=2, max_patches=16384, max_size_per_side=512, image_token="<|media_pad|>"
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]))
def test_formula_matches_the_real_processor(case, scanner):
    result = case["result"]
    settings = scanner.model.settings
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = kimi_k25.count(height, width, settings)
        assert list(count.grid) == real["grid"]
        assert count.tokens == real["tokens"]
        assert (count.resized_height, count.resized_width) == (real["grid"][1] * 14, real["grid"][2] * 14)
        assert kimi_k25.expand(count, settings) == (Run("<|media_pad|>", real["tokens"]),)
    assert result["specials"]["<|media_pad|>"] == sum(i["tokens"] for i in result["images"])
    assert row_length(scanner, case["sizes"]) == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (7169, 30), (100000, 14)} <= sizes
    assert any(len(case["sizes"]) == 2 for case in CASES)


def test_unequal_max_sides_are_refused_as_the_image_processor_does():
    with pytest.raises(CountError, match="identical values"):
        kimi_k25.settings_from({"size": {"max_height": 512, "max_width": 256}}, {}, {})


def test_count_exact_without_torchvision_says_what_is_needed():
    with pytest.raises(CountError, match="needs torch and torchvision"):
        kimi_k25.count_exact({}, [], kimi_k25.KimiK25Settings())


def test_no_resize_off_the_patch_grid_is_refused():
    settings = kimi_k25.KimiK25Settings(do_resize=False)
    assert kimi_k25.count(28, 56, settings).tokens == 2
    with pytest.raises(CountError):
        kimi_k25.count(29, 56, settings)
