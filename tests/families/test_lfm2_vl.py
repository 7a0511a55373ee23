"""LFM2-VL against the real Lfm2VlProcessor's recorded outputs (fixtures/reference/lfm2_vl.json).

The image processor is torchvision-only, so `make test` cannot run it: the reference job records what the
real processor gives on blank images (image_rows / image_cols / image_sizes, every special token of the
expansion, the tile markers, the whole input_ids length of a one-user-turn prompt, and its refusals) and
these tests hold vlmlint's formula, expansion and Scanner to it.
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
from vlmlint.models import CountError, Run, lfm2_vl, load_model
from vlmlint.models.base import compose_default
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "lfm2-vl-1.6b"
RECORDS = _records.load("lfm2_vl")
CASES = RECORDS["cases"]

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("lfm2_vl") is not None, reason=str(_records.version_mismatch("lfm2_vl"))
)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def row_length(scanner: Scanner, counts: list, settings: lfm2_vl.Lfm2VlSettings) -> int:
    """input_ids length of the one-user-turn prompt the recorder rendered, through vlmlint."""
    parts = tuple(Part(is_image=True) for _ in counts) + (Part(text="Describe the image."),)
    rendered = scanner.render((Message(Role.USER, parts),))
    segments = compose_default(rendered, settings.placeholder, [lfm2_vl.expand(c, settings) for c in counts])
    text = "".join(s.token if isinstance(s, Run) else s for s in segments)
    saved = sum(s.count - 1 for s in segments if isinstance(s, Run))
    ids = scanner.model.tokenizer(text, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def specials(expansions: list) -> dict[str, int]:
    totals: dict[str, int] = {}
    for expansion in expansions:
        for segment in expansion:
            token, n = (segment.token, segment.count) if isinstance(segment, Run) else (segment, 1)
            totals[token] = totals.get(token, 0) + n
    return totals


def test_load_model_picks_lfm2_vl_and_reads_its_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "lfm2_vl"
    assert model.counted_by() == "formula (family lfm2_vl)"
    assert model.settings == lfm2_vl.Lfm2VlSettings()
    assert not model.family.add_special_tokens  # Lfm2VlProcessor's text kwargs
    assert model.max_position_embeddings == 128000


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(f"{h}x{w}" for h, w in c["sizes"]) + str(c["kwargs"] or "")
)
def test_formula_matches_the_real_processor(case, scanner):
    settings = dataclasses.replace(scanner.model.settings, **case["kwargs"])
    result = case["result"]
    n = len(case["sizes"])
    if "error" in result:
        with pytest.raises(CountError) as refused:
            for height, width in case["sizes"]:
                lfm2_vl.count(height, width, settings, images_in_row=n)
        assert ("min_tiles" in result["error"]) == ("min_tiles" in str(refused.value))
        return
    counts = []
    for (height, width), real in zip(case["sizes"], result["images"], strict=True):
        count = lfm2_vl.count(height, width, settings, images_in_row=n)
        assert list(count.grid) == [real["rows"], real["cols"], *real["size"]]
        counts.append(count)
    expansions = [lfm2_vl.expand(c, settings) for c in counts]
    got = specials(expansions)
    for token in ("<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"):
        assert got.get(token, 0) == result["specials"][token], token
    assert got.get("<image>", 0) == sum(c.tokens for c in counts)
    markers = sum(n for token, n in got.items() if token.startswith("<|img_row_"))
    assert markers == result["tile_markers"]
    assert result["specials"]["<|startoftext|>"] == 1  # the template's; the processor adds none
    assert row_length(scanner, counts, settings) == result["input_ids"]
    if not case["kwargs"]:  # the Scanner's own compose and tokenization
        parts = tuple(Part(is_image=True) for _ in counts) + (Part(text="Describe the image."),)
        composed, saved = scanner.compose(scanner.render((Message(Role.USER, parts),)), counts)
        ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
        assert len(ids["input_ids"]) + saved == result["input_ids"]


def test_records_cover_the_edges():
    sizes = {tuple(s) for case in CASES for s in case["sizes"]}
    assert {(1, 1), (1, 4000), (4000, 1), (724, 724), (725, 725), (1, 100000), (16, 16)} <= sizes
    assert any(len(case["sizes"]) == 2 for case in CASES)
    images = [i for case in CASES if "images" in case["result"] for i in case["result"]["images"]]
    assert {(i["rows"], i["cols"]) for i in images} >= {(1, 1), (2, 2), (2, 4), (10, 1), (1, 10)}
    assert sum("error" in case["result"] for case in CASES) >= 3


def test_expansion_is_build_image_tokens():
    s = lfm2_vl.Lfm2VlSettings()
    one = lfm2_vl.count(100, 100, s)  # upscaled to min_image_tokens: 256x256 = 64 tokens
    assert (one.resized_height, one.resized_width, one.tokens) == (256, 256, 64)
    assert lfm2_vl.expand(one, s) == ("<|image_start|>", Run("<image>", 64), "<|image_end|>")
    tiled = lfm2_vl.count(1000, 1000, s)
    assert tiled.grid == (2, 2, 512, 512) and tiled.tokens == 4 * 256 + 256
    assert lfm2_vl.expand(tiled, s)[:3] == ("<|image_start|>", "<|img_row_1_col_1|>", Run("<image>", 256))
    assert lfm2_vl.expand(tiled, s)[-3:] == ("<|img_thumbnail|>", Run("<image>", 256), "<|image_end|>")
    plain = dataclasses.replace(s, use_image_special_tokens=False, use_thumbnail=False)
    assert lfm2_vl.expand(lfm2_vl.count(1000, 1000, plain), plain) == (Run("<image>", 256),) * 4


def test_smart_resize_rounds_half_to_even():
    s = lfm2_vl.Lfm2VlSettings(min_image_tokens=1)
    assert lfm2_vl.smart_resize(48, 48, s) == (64, 64)  # 1.5 -> 2
    assert lfm2_vl.smart_resize(80, 80, s) == (64, 64)  # 2.5 -> 2
    assert lfm2_vl.smart_resize(16, 16, s) == (32, 32)  # 0.5 -> 0, lifted to one block


def test_settings_are_read_from_the_files(tmp_path):
    folder = tmp_path / "lfm2"
    shutil.copytree(FOLDER, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["use_thumbnail"] = False
    pre["max_tiles"] = 4
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    proc = json.loads((folder / "processor_config.json").read_text())
    proc["use_image_special_tokens"] = False
    (folder / "processor_config.json").write_text(json.dumps(proc))
    model = load_model(str(folder))
    s = model.settings
    assert (s.use_thumbnail, s.max_tiles, s.use_image_special_tokens) == (False, 4, False)
    assert lfm2_vl.count(1080, 1920, s).tokens == 2 * 256  # 1x2 tiles (2x4 with max_tiles 10), no thumbnail


def test_tokenizer_init_kwargs_override_the_image_processor():
    s = lfm2_vl.settings_from(
        {"max_image_tokens": 256},
        {"tokenizer_init_kwargs": {"max_image_tokens": 128, "image_start_token": "<s_img>"}},
        {},
    )
    assert (s.max_image_tokens, s.image_start_token) == (128, "<s_img>")


def test_refusals_and_verify_without_torchvision():
    with pytest.raises(CountError, match="min_tiles must be less than or equal to max_tiles"):
        lfm2_vl.count(1000, 1000, lfm2_vl.Lfm2VlSettings(min_tiles=5, max_tiles=4))
    with pytest.raises(CountError, match="cannot stack"):
        lfm2_vl.count(1, 100000, lfm2_vl.Lfm2VlSettings())
    assert lfm2_vl.count(1, 100000, lfm2_vl.Lfm2VlSettings(use_thumbnail=False)).tokens == 10 * 256
    assert lfm2_vl.count(16, 16000, lfm2_vl.Lfm2VlSettings()).tokens == 505  # alone, it is not refused
    with pytest.raises(CountError, match="torch.cat"):
        lfm2_vl.count(16, 16000, lfm2_vl.Lfm2VlSettings(), images_in_row=2)
    with pytest.raises(CountError, match="needs torch and torchvision"):
        lfm2_vl.count_exact({}, [], lfm2_vl.Lfm2VlSettings())
