"""Differential tests: vlmlint's LLaVA-OneVision count against the real LlavaOnevisionProcessor.

The real side is transformers' LlavaOnevisionImageProcessorPil and LlavaOnevisionProcessor with the
fixture tokenizer and chat template. A row's images go in as ONE nested list (`images=[[a, b]]`), as
`processor.apply_chat_template(..., tokenize=True)` and TRL's collators pass them: with one image the
processor counts anyres features, with several it counts 729 + 1 per image. A flat list
(`images=[a, b]` for one prompt) makes every image its own "single-image sample"; that call shape is
tested too, as a documented disagreement, not as what a row produces.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import DATASETS, PROCESSORS, real_processor
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, llava_onevision, load_model
from vlmlint.models.base import ImageCount, Run, processor_defaults
from vlmlint.template_cache import conversation_for_template

FOLDER = PROCESSORS / "llava-onevision-qwen2-7b-ov"
HUB_PINPOINTS = [[h, w] for h in range(384, 2305, 384) for w in range(384, 2305, 384)]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def image(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def hub():
    """The fixture folder's real processor (settings as the hub checkpoint's)."""
    return real_processor(FOLDER)


@pytest.fixture(scope="module")
def hub_settings():
    return load_model(str(FOLDER)).settings


def processor_for(hub, view: int, pinpoints, **processor_kw):
    """A real LlavaOnevisionProcessor with other settings (video slot skipped as in conftest)."""
    from transformers import LlavaOnevisionProcessor
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    class WithoutVideo(LlavaOnevisionProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": view, "width": view}, image_grid_pinpoints=[list(p) for p in pinpoints]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return WithoutVideo(
            image_processor=image_processor,
            tokenizer=hub.tokenizer,
            video_processor=None,
            chat_template=hub.chat_template,
            **processor_kw,
        )


def ours(processor) -> llava_onevision.OnevisionSettings:
    """settings_from on the processor's own values, as load_model reads them from its files."""
    from transformers import LlavaOnevisionProcessor

    config = {
        "num_image_tokens": processor.num_image_tokens,
        "vision_feature_select_strategy": processor.vision_feature_select_strategy,
        "vision_aspect_ratio": processor.vision_aspect_ratio,
    }
    return llava_onevision.settings_from(
        processor.image_processor, processor_defaults(LlavaOnevisionProcessor, config), {}
    )


def one_image_prompt(processor) -> str:
    return processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    )


def separated_prompt(processor, n: int) -> str:
    """n images in n user turns, so that each image's <image> run can be told apart in input_ids."""
    turns = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Picture {i}"}]}
        for i in range(n)
    ]
    return processor.apply_chat_template(turns)


def runs(ids, token_id: int) -> list[int]:
    out, current = [], 0
    for token in list(ids) + [None]:
        if token == token_id:
            current += 1
        elif current:
            out.append(current)
            current = 0
    return out


def real_row(processor, sizes: list[tuple[int, int]]):
    """input_ids runs and image-processor output for one row holding these images (nested list)."""
    text = one_image_prompt(processor) if len(sizes) == 1 else separated_prompt(processor, len(sizes))
    output = processor(text=[text], images=[[image(h, w) for h, w in sizes]])
    return runs(output["input_ids"][0], processor.image_token_id), output


def assert_single(processor, height: int, width: int) -> ImageCount | str:
    settings_ = ours(processor)
    try:
        (expected,), output = real_row(processor, [(height, width)])
    except ValueError as exc:
        with pytest.raises(CountError):
            llava_onevision.count(height, width, settings_)
        return str(exc)
    got = llava_onevision.count(height, width, settings_)
    assert got.tokens == expected, (height, width)
    rows, cols = got.grid
    assert len(output["pixel_values"][0]) == 1 + rows * cols  # base view + the anyres tiles
    assert [int(v) for v in output["image_sizes"][0]] == [height, width]
    if height * width <= 2_000_000:  # the exact path runs the image processor again: skip the huge ones
        assert llava_onevision.count_exact(processor.image_processor, [image(height, width)], settings_) == [
            got
        ]
    return got


# -- the pure anyres formula against the processor's own feature count (cheap, many examples) -------

pinpoint_lists = st.lists(
    st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=8, unique=True
)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    view=st.sampled_from([384, 336, 224]),
    grid=pinpoint_lists,
    strategy=st.sampled_from(["full", "default", None]),
    max_patches=st.sampled_from([1, 4, 9, 16]),
)
@example(height=384, width=384, view=384, grid=[(1, 1)], strategy="full", max_patches=9)
def test_formula_equals_get_number_of_features(hub, height, width, view, grid, strategy, max_patches):
    pinpoints = [(view * a, view * b) for a, b in grid]
    processor = processor_for(
        hub,
        view,
        pinpoints,
        num_image_tokens=(view // 14) ** 2,
        vision_feature_select_strategy=strategy,
        vision_aspect_ratio=f"anyres_max_{max_patches}",
    )
    expected = processor._get_number_of_features(height, width, view, view) - (strategy == "default")
    settings_ = ours(processor)
    assert llava_onevision.count(height, width, settings_).tokens == expected
    assert llava_onevision.count(height, width, settings_, images_in_row=3).tokens == (
        (view // 14) ** 2 + 1 - (strategy == "default")
    )


@settings(max_examples=300, deadline=None)
@given(height=st.integers(1, 8000), width=st.integers(1, 8000), grid=pinpoint_lists)
def test_select_best_resolution_and_fit_equal_transformers(height, width, grid):
    from transformers.image_processing_utils import get_patch_output_size, select_best_resolution

    pinpoints = [(384 * a, 384 * b) for a, b in grid]
    best = select_best_resolution((height, width), pinpoints)
    assert llava_onevision.select_best_resolution(height, width, pinpoints) == tuple(best)
    fitted = get_patch_output_size(
        np.zeros((3, height, width), dtype=np.uint8), best, input_data_format="channels_first"
    )
    assert llava_onevision._patch_output_size(height, width, best) == tuple(fitted)


# -- one image per row: the whole real pipeline ----------------------------------------------------

# Either side of the anyres_max_9 cut: the unpadded grid of these sizes crosses 1.21 * 9 * 729
# features (ratio > 1.1), found by scanning heights at fixed widths with the hub pinpoints.
REDUCTION_CUTS = [
    (1222, 1000),
    (1223, 1000),
    (768, 1600),
    (769, 1600),
    (696, 2304),
    (697, 2304),
    (1209, 4000),
    (1210, 4000),
]
# Either side of the unpadding round(): one more row of the 27-grid survives the unpadding.
UNPADDING_CUTS = [
    (305, 600),
    (306, 600),
    (611, 600),
    (612, 600),
    (50, 108),
    (51, 108),
    (49, 108),
    (353, 706),
    (353, 707),
]


EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (16, 16),  # tiny: upscaled to the 384 canvas
    (27, 5400),
    (384, 384),  # exactly one pinpoint
    (383, 384),
    (385, 384),
    (384, 768),
    (384, 769),
    (768, 383),
    (768, 768),
    (769, 769),
    (1152, 1152),
    (2304, 2304),  # the largest canvas
    (2305, 2304),
    (4000, 4000),  # huge: capped at the largest canvas, then reduced to about 9*729
    (3000, 4000),
    (1080, 1920),
    (899, 1024),  # the transformers conversion script's test image
    (503, 316),
]


@pytest.mark.parametrize("height,width", EDGES + REDUCTION_CUTS + UNPADDING_CUTS)
def test_edges_single_image_row(hub, height, width):
    assert isinstance(assert_single(hub, height, width), ImageCount)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(height=st.integers(1, 900), width=st.integers(1, 900))
@example(height=1, width=900)
@example(height=900, width=1)
def test_single_image_row_hub(hub, height, width):
    assert_single(hub, height, width)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 700),
    width=st.integers(1, 700),
    view=st.sampled_from([384, 336]),
    grid=pinpoint_lists,
    strategy=st.sampled_from(["full", "default"]),
    max_patches=st.sampled_from([1, 4, 9]),
)
def test_single_image_row_other_settings(hub, height, width, view, grid, strategy, max_patches):
    pinpoints = [(view * a, view * b) for a, b in grid]
    processor = processor_for(
        hub,
        view,
        pinpoints,
        num_image_tokens=(view // 14) ** 2,
        vision_feature_select_strategy=strategy,
        vision_aspect_ratio=f"anyres_max_{max_patches}",
    )
    assert_single(processor, height, width)


def test_aspect_ratio_without_a_number_is_refused_like_the_processor(hub):
    processor = processor_for(hub, 384, HUB_PINPOINTS, num_image_tokens=729, vision_aspect_ratio="anyres")
    with pytest.raises(ValueError):
        real_row(processor, [(100, 100)])
    with pytest.raises(CountError):
        llava_onevision.count(100, 100, ours(processor))
    # several images per row never reach the anyres reduction: the processor and vlmlint accept them
    assert real_row(processor, [(100, 100), (50, 80)])[0] == [730, 730]
    assert llava_onevision.count(100, 100, ours(processor), images_in_row=2).tokens == 730


# -- several images per row ------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.tuples(st.integers(1, 1200), st.integers(1, 1200)), min_size=2, max_size=4))
@example(sizes=[(1, 4000), (4000, 4000)])
@example(sizes=[(384, 384), (384, 384)])
def test_multi_image_row(hub, hub_settings, sizes):
    got_runs, output = real_row(hub, sizes)
    assert list(output["batch_num_images"]) == [len(sizes)]
    counts = [llava_onevision.count(h, w, hub_settings, images_in_row=len(sizes)) for h, w in sizes]
    assert [c.tokens for c in counts] == got_runs == [730] * len(sizes)
    assert all(len(views) == 1 for views in output["pixel_values"])  # one padded-square view, no tiles
    assert all(c.grid == (0, 0) and (c.resized_height, c.resized_width) == (384, 384) for c in counts)
    exact = llava_onevision.count_exact(hub.image_processor, [image(h, w) for h, w in sizes], hub_settings)
    assert exact == counts


def test_default_strategy_multi_image_row(hub):
    processor = processor_for(
        hub, 384, HUB_PINPOINTS, num_image_tokens=729, vision_feature_select_strategy="default"
    )
    got_runs, _ = real_row(processor, [(300, 200), (64, 900), (1000, 1000)])
    assert got_runs == [729, 729, 729]
    assert {
        llava_onevision.count(h, w, ours(processor), images_in_row=3).tokens for h, w in [(300, 200), (1, 1)]
    } == {729}


def test_apply_chat_template_passes_a_row_as_one_nested_sample(hub, hub_settings):
    """The call shape vlmlint predicts: apply_chat_template(tokenize=True) nests the row's images."""
    a, b = image(480, 640), image(200, 300)
    two = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": a},
                {"type": "image", "image": b},
                {"type": "text", "text": "Hi"},
            ],
        }
    ]
    out = hub.apply_chat_template(two, tokenize=True, return_dict=True)
    assert list(out["batch_num_images"]) == [2]
    assert list(out["input_ids"][0]).count(hub.image_token_id) == 2 * 730
    one = [{"role": "user", "content": [{"type": "image", "image": a}, {"type": "text", "text": "Hi"}]}]
    out = hub.apply_chat_template(one, tokenize=True, return_dict=True)
    assert (
        list(out["input_ids"][0]).count(hub.image_token_id)
        == llava_onevision.count(480, 640, hub_settings).tokens
        == 2929
    )


def test_flat_image_list_treats_every_image_as_its_own_sample(hub, hub_settings):
    """DISAGREEMENT (call shape): processor(text=[one prompt], images=[a, b]) anyres-counts each image."""
    sizes = [(480, 640), (200, 300)]
    text = separated_prompt(hub, 2)
    output = hub(text=[text], images=[image(h, w) for h, w in sizes])
    assert list(output["batch_num_images"]) == [1, 1]
    flat = runs(output["input_ids"][0], hub.image_token_id)
    assert (
        flat
        == [llava_onevision.count(h, w, hub_settings, images_in_row=1).tokens for h, w in sizes]
        == [2929, 1261]
    )
    assert flat != [llava_onevision.count(h, w, hub_settings, images_in_row=2).tokens for h, w in sizes]


# -- transformers' _get_num_multimodal_tokens ------------------------------------------------------


@FAST
@given(height=st.integers(1, 6000), width=st.integers(1, 6000))
def test_get_num_multimodal_tokens_agrees_for_single_image_rows(hub, hub_settings, height, width):
    helper = hub._get_num_multimodal_tokens(image_sizes=[(height, width)])
    assert helper["num_image_tokens"] == [llava_onevision.count(height, width, hub_settings).tokens]
    assert helper["num_image_patches"] == [1]  # it says 1 view; the pipeline makes 1 + rows*cols views


def test_get_num_multimodal_tokens_disagrees_for_multi_image_rows(hub, hub_settings):
    """DISAGREEMENT: the helper anyres-counts every size; a multi-image row gets 730 per image."""
    sizes = [(480, 640), (200, 300), (1080, 1920)]
    helper = hub._get_num_multimodal_tokens(image_sizes=sizes)["num_image_tokens"]
    pipeline, _ = real_row(hub, sizes)
    assert pipeline == [llava_onevision.count(h, w, hub_settings, images_in_row=3).tokens for h, w in sizes]
    assert pipeline == [730, 730, 730]
    assert (
        helper == [llava_onevision.count(h, w, hub_settings).tokens for h, w in sizes] == [2929, 1261, 7269]
    )
    assert helper != pipeline


# -- settings, expansion and the whole row through the engine --------------------------------------


def test_settings_from_the_fixture_files(hub_settings):
    assert hub_settings.num_image_tokens == 729
    assert hub_settings.vision_feature_select_strategy == "full"
    assert hub_settings.vision_aspect_ratio == "anyres_max_9"  # processor default: not in processor_config
    assert (hub_settings.view_height, hub_settings.view_width, hub_settings.tile_size) == (384, 384, 384)
    assert [list(p) for p in hub_settings.image_grid_pinpoints] == HUB_PINPOINTS


def test_settings_need_num_image_tokens(hub):
    from transformers import LlavaOnevisionProcessor

    with pytest.raises(CountError):
        llava_onevision.settings_from(
            hub.image_processor, processor_defaults(LlavaOnevisionProcessor, {}), {}
        )
    # ...as the real processor cannot count without it
    processor = processor_for(hub, 384, HUB_PINPOINTS)
    with pytest.raises(TypeError):
        real_row(processor, [(10, 10)])


def test_expand_is_one_run_of_image_tokens(hub_settings):
    count = llava_onevision.count(899, 1024, hub_settings)
    assert llava_onevision.expand(count, hub_settings) == (Run("<image>", count.tokens),)
    assert llava_onevision.FAMILY.placeholder == "<image>"


def test_fixture_template_renders_like_the_hub_docs(hub):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What are these?"}]}]
    assert hub.apply_chat_template(messages) == "<|im_start|>user <image>\nWhat are these?<|im_end|>"


def _decode(ref):
    import io

    from PIL import ImageOps

    source = io.BytesIO(ref.data) if ref.data is not None else ref.path
    with Image.open(source) as opened:
        opened.load()
        return ImageOps.exif_transpose(opened).convert("RGB")


@pytest.mark.parametrize("dataset,exact", [("llava", False), ("llava", True), ("demo", False)])
def test_rows_equal_the_real_processor_with_the_row_nested(dataset, exact):
    """Like tests/test_fixtures.py, but passing each row's images as one sample (images=[images])."""
    scanner = Scanner(ScanConfig(dataset=str(DATASETS / dataset), model=str(FOLDER), exact=exact))
    processor = real_processor(FOLDER)
    checked = multi = 0
    for outcome in scanner.scan():
        result = outcome.result
        if result.seq_len is None:
            continue
        sample = result.sample
        text = processor.apply_chat_template(conversation_for_template(sample.messages))
        images = [_decode(ref) for ref in sample.images]
        output = processor(text=[text], images=[images] if images else None)
        ids = list(output["input_ids"][0])
        assert result.seq_len == len(ids), sample.location
        assert sum(result.image_tokens) == ids.count(processor.image_token_id), sample.location
        assert result.text_tokens == len(ids) - sum(result.image_tokens)
        checked += 1
        multi += len(images) > 1
    assert checked > 0 and multi > 0  # both kinds of rows were compared
