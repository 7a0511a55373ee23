"""Differential tests: vlmlint's LLaVA-NeXT anyres count against the real LlavaNextProcessor.

The real side is transformers' LlavaNextImageProcessorPil and LlavaNextProcessor with the fixture
tokenizer: the count is the number of image_token_id in input_ids for a one-image prompt.
Pinpoint ties (equal effective and wasted area: every image up to 336x336 with the hub list) and the
round(..., 7) in the unpadding (transformers #34625 / #35779) get explicit cases.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import PROCESSORS, real_processor
from vlmlint.models import CountError, llava_next, load_model
from vlmlint.models.base import ImageCount, Run

FOLDER = PROCESSORS / "llava-v1.6-mistral-7b"
HUB_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
HUB_IMAGE = dict(
    size={"shortest_edge": 336},
    crop_size={"height": 336, "width": 336},
    image_grid_pinpoints=HUB_PINPOINTS,
)
HUB_PROCESSOR = dict(patch_size=14, vision_feature_select_strategy="default", num_additional_image_tokens=1)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(FOLDER)


def image(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


def real_processor_for(tokenizer, image_kw: dict, processor_kw: dict):
    from transformers import LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    return LlavaNextProcessor(
        image_processor=LlavaNextImageProcessorPil(**image_kw), tokenizer=tokenizer, **processor_kw
    )


def ours(processor) -> llava_next.LlavaNextSettings:
    config = {
        "patch_size": processor.patch_size,
        "vision_feature_select_strategy": processor.vision_feature_select_strategy,
        "num_additional_image_tokens": processor.num_additional_image_tokens,
    }
    return llava_next.settings_from(processor.image_processor, config, {})


def real_tokens(processor, height: int, width: int) -> int:
    ids = list(processor(text=["<image>"], images=[image(height, width)])["input_ids"][0])
    return ids.count(processor.image_token_id)


def assert_same(processor, height: int, width: int) -> ImageCount | None:
    settings_ = ours(processor)
    try:
        expected = real_tokens(processor, height, width)
    except (ValueError, ZeroDivisionError) as exc:
        with pytest.raises(CountError):
            llava_next.count(height, width, settings_)
        return str(exc)
    got = llava_next.count(height, width, settings_)
    assert got.tokens == expected, (height, width)
    exact = llava_next.count_exact(processor.image_processor, [image(height, width)], settings_)
    assert exact == [got]
    return got


EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (199, 1),
    (200, 1),
    (201, 1),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (336, 336),
    (335, 337),
    (337, 335),
    (672, 672),
    (673, 673),
    (808, 1100),
    (1080, 1920),
    (1920, 1080),
    (3000, 4000),
    (100, 200),
    (200, 100),
]
# Either side of each switch of the chosen pinpoint (hub list), e.g. 400x799 -> (672, 672),
# 400x800 -> (336, 672) (a tie on effective area, less waste), 400x801 -> (336, 1008).
PINPOINT_SWITCHES = [
    (200, 672),
    (200, 673),
    (400, 336),
    (400, 337),
    (400, 799),
    (400, 800),
    (400, 801),
    (700, 349),
    (700, 350),
    (700, 351),
    (700, 1399),
    (700, 1400),
    (700, 1401),
]
# Sizes where the unpadding ratio lands a hair under an integer (x.9999999...): plain int() would
# give one fewer row/column; transformers rounds to 7 places first (#34625, #35779).
ROUNDING = [(47, 47), (44, 55), (94, 94), (47, 1128), (49, 882), (88, 99), (98, 294), (55, 176)]


@pytest.mark.parametrize("height,width", EDGES + PINPOINT_SWITCHES + ROUNDING)
def test_hub_config_edges_match_real_processor(tokenizer, height, width):
    assert_same(real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR), height, width)


def test_pinpoint_switches_are_where_expected():
    pins = tuple(tuple(p) for p in HUB_PINPOINTS)
    chosen = [llava_next.select_best_resolution(h, w, pins) for h, w in PINPOINT_SWITCHES[2:7]]
    assert chosen == [(672, 336), (672, 672), (672, 672), (336, 672), (336, 1008)]


def test_known_values():
    s = load_model(str(FOLDER)).settings
    assert (
        llava_next.count(336, 336, s).tokens == 1176
    )  # (336, 672): 24x24 unpadded + 24 newlines + 576 + 1 - 1
    got = llava_next.count(808, 1100, s)
    assert got == ImageCount(494, 672, (2, 2, 36, 48), 2340)
    assert llava_next.count(1, 4000, s).tokens == 576  # every unpadded row is padding: only the base
    assert llava_next.count(47, 47, s).grid == (
        1,
        2,
        24,
        24,
    )  # int(23.999999999999996) would give 23 -> 22 cols


def test_rounding_is_what_keeps_a_row():
    # 47x47 in (336, 672): new_width = 47 * (24 / 47) = 23.999999999999996; int() alone gives 23.
    assert 47 * (24 / 47) < 24
    assert llava_next.unpadded_features(47, 47, 24, 24, 1, 2) == (24, 24)


def test_pinpoint_ties_take_the_first_listed(tokenizer):
    # Every image up to 336x336 fits (336, 672) and (672, 336) equally (same effective and wasted area):
    # the first listed wins, and the two give very different counts for non-square images.
    s = ours(real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR))
    assert llava_next.select_best_resolution(100, 200, s.image_grid_pinpoints) == (336, 672)
    swapped_kw = dict(
        HUB_IMAGE, image_grid_pinpoints=[[672, 336], [336, 672], [672, 672], [1008, 336], [336, 1008]]
    )
    swapped = real_processor_for(tokenizer, swapped_kw, HUB_PROCESSOR)
    assert llava_next.select_best_resolution(100, 200, ours(swapped).image_grid_pinpoints) == (672, 336)
    hub = real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR)
    a, b = assert_same(hub, 100, 200), assert_same(swapped, 100, 200)
    assert (a.tokens, b.tokens) == (1752, 876)
    assert assert_same(hub, 200, 100).tokens == 888


CROPS = st.sampled_from([28, 42, 56])


@st.composite
def pinpoint_lists(draw, crop: int):
    """Multiples of the crop (the usual case, full of ties) or arbitrary sizes (ragged tiles), in any order."""
    if draw(st.booleans()):
        cells = st.tuples(st.integers(1, 4), st.integers(1, 4)).map(lambda t: [t[0] * crop, t[1] * crop])
    else:
        cells = st.tuples(st.integers(crop // 2, 4 * crop), st.integers(crop // 2, 4 * crop)).map(list)
    return draw(st.lists(cells, min_size=1, max_size=6, unique_by=tuple))


@settings(max_examples=90, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    height=st.integers(1, 1500),
    width=st.integers(1, 1500),
    crop=CROPS,
    size_kind=st.sampled_from(["shortest_edge", "height_width", "bigger_shortest_edge"]),
    do_center_crop=st.booleans(),
    strategy=st.sampled_from(["default", "full", None]),
    additional=st.sampled_from([0, 1]),
)
@example(
    data=None,
    height=100,
    width=200,
    crop=28,
    size_kind="shortest_edge",
    do_center_crop=True,
    strategy="default",
    additional=1,
)
def test_random_sizes_pinpoints_and_settings_match_real_processor(
    tokenizer, data, height, width, crop, size_kind, do_center_crop, strategy, additional
):
    pinpoints = data.draw(pinpoint_lists(crop)) if data is not None else [[crop, 2 * crop], [2 * crop, crop]]
    size = {
        "shortest_edge": {"shortest_edge": crop},
        "height_width": {"height": crop, "width": crop},
        "bigger_shortest_edge": {"shortest_edge": crop + 14},
    }[size_kind]
    image_kw = dict(
        size=size,
        crop_size={"height": crop, "width": crop},
        do_center_crop=do_center_crop,
        image_grid_pinpoints=pinpoints,
    )
    processor_kw = dict(
        patch_size=14, vision_feature_select_strategy=strategy, num_additional_image_tokens=additional
    )
    assert_same(real_processor_for(tokenizer, image_kw, processor_kw), height, width)


def test_ragged_tiles_that_cannot_stack_are_refused(tokenizer):
    # No center crop, tiles cut at crop_size.height but resized to the shortest edge: a ragged edge tile
    # comes out another shape than the base patch and numpy refuses to stack them.
    image_kw = dict(
        size={"shortest_edge": 28},
        crop_size={"height": 28, "width": 28},
        do_center_crop=False,
        image_grid_pinpoints=[[28, 42]],
    )
    processor = real_processor_for(tokenizer, image_kw, HUB_PROCESSOR)
    assert "inhomogeneous" in assert_same(processor, 20, 30)


def test_pinpoint_smaller_than_a_patch_is_refused(tokenizer):
    image_kw = dict(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, image_grid_pinpoints=[[14, 28]]
    )
    processor = real_processor_for(tokenizer, image_kw, HUB_PROCESSOR)
    assert "division by zero" in assert_same(processor, 20, 30)


def test_fixture_folder_matches_real_processor_and_hub_values():
    model = load_model(str(FOLDER))
    assert model.family is llava_next.FAMILY
    s = model.settings
    assert s.image_grid_pinpoints == tuple(tuple(p) for p in HUB_PINPOINTS) == s.model_image_grid_pinpoints
    assert (s.patch_size, s.num_additional_image_tokens, s.vision_feature_select_strategy) == (
        14,
        1,
        "default",
    )
    assert model.max_position_embeddings == 32768
    processor = real_processor(FOLDER)
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image"}]}]
    )
    assert text == "[INST] <image>\nWhat is this? [/INST]"
    for height, width in [(1, 1), (480, 640), (1024, 768), (1, 4000)]:
        ids = list(processor(text=[text], images=[image(height, width)])["input_ids"][0])
        assert ids[0] == processor.tokenizer.bos_token_id
        assert ids.count(processor.image_token_id) == llava_next.count(height, width, s).tokens


def test_expansion_is_one_run_of_the_placeholder():
    s = load_model(str(FOLDER)).settings
    assert llava_next.expand(llava_next.count(336, 336, s), s) == (Run("<image>", 1176),)


@pytest.mark.parametrize("height,width", [(336, 336), (808, 1100), (1, 4000), (47, 47), (100, 200)])
def test_get_num_multimodal_tokens_agrees_on_the_hub_config(tokenizer, height, width):
    processor = real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR)
    helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)]).num_image_tokens
    assert (
        helper
        == [llava_next.count(height, width, ours(processor)).tokens]
        == [real_tokens(processor, height, width)]
    )


def test_get_num_multimodal_tokens_disagrees_when_crop_is_not_the_shortest_edge(tokenizer):
    # The helper takes size.shortest_edge as the patch size; the pipeline counts from pixel_values,
    # i.e. crop_size. shortest_edge 56 with crop 42, a 60x90 image in the (84, 84) pinpoint:
    # pipeline: 2x2 tiles of 3x3 features -> 6x6, unpadded to 4 rows: 4*6 + 4 newlines + 9 base = 37;
    # helper: 84 // 56 = 1 tile of 4x4 features, unpadded to 2 rows: 2*4 + 2 + 16 base = 26.
    image_kw = dict(
        size={"shortest_edge": 56},
        crop_size={"height": 42, "width": 42},
        image_grid_pinpoints=[[42, 84], [84, 42], [84, 84]],
    )
    processor = real_processor_for(tokenizer, image_kw, HUB_PROCESSOR)
    real = real_tokens(processor, 60, 90)
    assert llava_next.count(60, 90, ours(processor)).tokens == real
    helper = processor._get_num_multimodal_tokens(image_sizes=[(60, 90)]).num_image_tokens[0]
    assert helper != real
    assert (helper, real) == (26, 37)


@pytest.mark.parametrize("name", ["sharegpt", "openai"])
def test_exact_mode_agrees_with_the_header_path(name):
    from tests.conftest import DATASETS
    from vlmlint.config import ScanConfig
    from vlmlint.engine import Scanner

    fast = Scanner(ScanConfig(dataset=str(DATASETS / name), model=str(FOLDER)))
    exact = Scanner(ScanConfig(dataset=str(DATASETS / name), model=str(FOLDER), exact=True), model=fast.model)
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        assert a.result.images == b.result.images, a.result.sample.location
        assert a.result.seq_len == b.result.seq_len
