"""Differential tests: vlmlint's LLaVA-1.5 count against the real LlavaProcessor and its image processors.

The real side is transformers' own classes (CLIPImageProcessorPil / LlavaImageProcessorPil and
LlavaProcessor with the fixture tokenizer); every count is the number of image_token_id in input_ids
for a one-image prompt, plus the pixel_values size the processor counted from.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import PROCESSORS, real_processor
from vlmlint.models import CountError, llava, load_model

FOLDER = PROCESSORS / "llava-1.5-7b"
HUB_IMAGE = dict(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}, do_center_crop=True)
HUB_PROCESSOR = dict(patch_size=14, vision_feature_select_strategy="default", num_additional_image_tokens=1)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(FOLDER)


def image(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


def real_processor_for(tokenizer, image_kw: dict, processor_kw: dict, llava_image_processor: bool = False):
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    cls = LlavaImageProcessorPil if llava_image_processor else CLIPImageProcessorPil
    return LlavaProcessor(image_processor=cls(**image_kw), tokenizer=tokenizer, **processor_kw)


def ours(processor) -> llava.LlavaSettings:
    config = {
        "patch_size": processor.patch_size,
        "vision_feature_select_strategy": processor.vision_feature_select_strategy,
        "num_additional_image_tokens": processor.num_additional_image_tokens,
    }
    return llava.settings_from(processor.image_processor, config, {})


def real_count(processor, height: int, width: int) -> tuple[int, tuple[int, int]]:
    output = processor(text=["<image>"], images=[image(height, width)])
    ids = list(output["input_ids"][0])
    return ids.count(processor.image_token_id), tuple(int(v) for v in output["pixel_values"][0].shape[-2:])


def assert_same(processor, height: int, width: int) -> None:
    settings_ = ours(processor)
    try:
        expected_tokens, expected_size = real_count(processor, height, width)
    except ValueError as exc:
        assert "must be > 0" in str(exc)
        with pytest.raises(CountError):
            llava.count(height, width, settings_)
        return
    got = llava.count(height, width, settings_)
    assert got.tokens == expected_tokens, (height, width)
    assert (got.resized_height, got.resized_width) == expected_size
    assert got.grid == (expected_size[0] // processor.patch_size, expected_size[1] // processor.patch_size)
    exact = llava.count_exact(processor.image_processor, [image(height, width)], settings_)
    assert exact == [got]


# The hub config resizes the short edge to 336 before cropping: a 1x4000 image would become 336x1344000
# (gigabytes), so the extreme edges run on the same pipeline scaled down (shortest_edge/crop 28).
SMALL_IMAGE = dict(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, do_center_crop=True)


@pytest.mark.parametrize(
    "height,width",
    [
        (1, 1),
        (1, 199),
        (1, 200),
        (1, 201),
        (1, 4000),
        (4000, 1),
        (199, 1),
        (200, 1),
        (201, 1),
        (13, 15),
        (27, 29),
    ],
)
def test_extreme_edges_match_real_processor(tokenizer, height, width):
    for processor_kw in (HUB_PROCESSOR, dict(patch_size=14, vision_feature_select_strategy="full")):
        assert_same(real_processor_for(tokenizer, SMALL_IMAGE, processor_kw), height, width)
        resize_only = dict(SMALL_IMAGE, do_center_crop=False)
        assert_same(real_processor_for(tokenizer, resize_only, processor_kw), height, width)


@pytest.mark.parametrize(
    "height,width",
    [
        (16, 16),
        (335, 335),
        (336, 336),
        (337, 337),
        (335, 337),
        (224, 224),
        (480, 640),
        (1080, 1920),
        (1920, 1080),
        (5, 999),
    ],
)
def test_hub_config_is_576_and_matches(tokenizer, height, width):
    processor = real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR)
    assert_same(processor, height, width)
    assert llava.count(height, width, ours(processor)).tokens == 576


SIZES = st.sampled_from(
    [
        {"shortest_edge": 28},
        {"shortest_edge": 56},
        {"shortest_edge": 70},
        {"height": 56, "width": 84},
        {"height": 42, "width": 42},
        {"shortest_edge": 42, "longest_edge": 84},
        {"shortest_edge": 56, "longest_edge": 70},
        {"max_height": 70, "max_width": 56},
        {"max_height": 112, "max_width": 112},
    ]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 900),
    width=st.integers(1, 900),
    size=SIZES,
    crop=st.sampled_from([None, (28, 28), (56, 42), (14, 70)]),
    pad=st.booleans(),
    patch=st.sampled_from([14, 16]),
    strategy=st.sampled_from(["default", "full", None]),
    additional=st.sampled_from([0, 1]),
    do_resize=st.booleans(),
)
@example(
    height=100,
    width=37,
    size={"shortest_edge": 28},
    crop=None,
    pad=True,
    patch=14,
    strategy="default",
    additional=1,
    do_resize=True,
)
@example(
    height=1,
    width=900,
    size={"max_height": 70, "max_width": 56},
    crop=None,
    pad=False,
    patch=14,
    strategy="full",
    additional=0,
    do_resize=True,
)
def test_random_sizes_and_settings_match_real_processor(
    tokenizer, height, width, size, crop, pad, patch, strategy, additional, do_resize
):
    if not do_resize and crop is None and max(height, width) > 300:
        width, height = min(width, 300), min(height, 300)  # keep unresized images small
    image_kw = dict(size=size, do_resize=do_resize, do_center_crop=crop is not None, do_pad=pad)
    if crop is not None:
        image_kw["crop_size"] = {"height": crop[0], "width": crop[1]}
    processor_kw = dict(
        patch_size=patch, vision_feature_select_strategy=strategy, num_additional_image_tokens=additional
    )
    processor = real_processor_for(tokenizer, image_kw, processor_kw, llava_image_processor=pad)
    assert_same(processor, height, width)


def test_fixture_folder_matches_real_processor_and_hub_values():
    model = load_model(str(FOLDER))
    assert model.family is llava.FAMILY
    s = model.settings
    assert (s.patch_size, s.num_additional_image_tokens, s.vision_feature_select_strategy) == (
        14,
        1,
        "default",
    )
    assert model.max_position_embeddings == 4096
    processor = real_processor(FOLDER)
    for height, width in [(1, 1), (480, 640), (1024, 768)]:
        tokens, size = real_count(processor, height, width)
        assert llava.count(height, width, s) == llava.ImageCount(336, 336, (24, 24), 576)
        assert (tokens, size) == (576, (336, 336))
    # BOS <s> is added, the template's "<image>\n" expands in place: one placeholder run, nothing else.
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}],
        add_generation_prompt=True,
    )
    assert text == "USER: <image>\nWhat is this? ASSISTANT:"
    ids = list(processor(text=[text], images=[image(50, 60)])["input_ids"][0])
    assert ids[0] == processor.tokenizer.bos_token_id
    assert ids.count(processor.image_token_id) == 576


def test_expansion_is_one_run_of_the_placeholder():
    s = llava.LlavaSettings(
        patch_size=14, num_additional_image_tokens=1, vision_feature_select_strategy="default"
    )
    count = llava.count(10, 10, s)
    assert llava.expand(count, s) == (llava.Run("<image>", 576),)


def test_get_num_multimodal_tokens_agrees_with_crop_and_disagrees_without(tokenizer):
    processor = real_processor_for(tokenizer, HUB_IMAGE, HUB_PROCESSOR)
    helper = processor._get_num_multimodal_tokens(image_sizes=[(480, 640)])
    assert helper.num_image_tokens == [576] == [llava.count(480, 640, ours(processor)).tokens]
    # Resize-only config: the helper still assumes crop_size, the pipeline counts the resized image.
    resize_only = real_processor_for(tokenizer, dict(SMALL_IMAGE, do_center_crop=False), HUB_PROCESSOR)
    real_tokens, real_size = real_count(resize_only, 56, 84)
    assert real_size == (28, 42) and real_tokens == 2 * 3 + 1 - 1
    assert llava.count(56, 84, ours(resize_only)).tokens == real_tokens
    assert resize_only._get_num_multimodal_tokens(image_sizes=[(56, 84)]).num_image_tokens == [4]  # 2x2 crop


def test_missing_patch_size_is_refused_like_the_processor(tokenizer):
    processor = real_processor_for(tokenizer, HUB_IMAGE, dict(vision_feature_select_strategy="default"))
    with pytest.raises(TypeError):
        processor(text=["<image>"], images=[image(20, 20)])
    config = {"vision_config": {"patch_size": 14}, "vision_feature_select_strategy": "default"}
    with pytest.raises(CountError, match='"patch_size": 14'):
        llava.settings_from(processor.image_processor, {"vision_feature_select_strategy": None}, config)


def test_strategy_is_the_processors_not_the_models(tokenizer):
    # processor_config.json without vision_feature_select_strategy: the processor keeps the CLS slot (577)
    # while a model with "default" drops it (576 features): the model then refuses the row.
    processor = real_processor_for(tokenizer, HUB_IMAGE, dict(patch_size=14, num_additional_image_tokens=1))
    s = llava.settings_from(
        processor.image_processor,
        {"patch_size": 14, "num_additional_image_tokens": 1},
        {"vision_feature_select_strategy": "default"},
    )
    assert s.model_vision_feature_select_strategy == "default" and s.vision_feature_select_strategy is None
    assert real_count(processor, 100, 100)[0] == llava.count(100, 100, s).tokens == 577


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
