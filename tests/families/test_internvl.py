"""Differential tests: vlmlint's InternVL count against the real InternVLProcessor and GotOcr2ImageProcessorPil.

The real side is transformers' own classes (GotOcr2ImageProcessorPil, InternVLProcessor with the fixture's
Qwen2 tokenizer, and transformers' get_optimal_tiled_canvas for the grid). Every token count is the
number of <IMG_CONTEXT> ids in input_ids for a one-image prompt, and the tile count is the processor's
pixel_values length.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import PROCESSORS, real_processor
from tests.families._releases import merge_kwargs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, internvl, load_model
from vlmlint.records import ImageInfo, Message, Part, Role

FOLDER = PROCESSORS / "internvl3-1b-hf"
HUB = dict(size={"height": 448, "width": 448}, min_patches=1, max_patches=12, crop_to_patches=False)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(FOLDER)


def image(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


def real_processor_for(tokenizer, image_seq_length: int = 256, **image_kw):
    """The real InternVLProcessor (its video slot left empty: transformers needs torchvision for it)."""
    from transformers import InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    class WithoutVideo(InternVLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return WithoutVideo(
        image_processor=GotOcr2ImageProcessorPil(**image_kw),
        tokenizer=tokenizer,
        video_processor=None,
        image_seq_length=image_seq_length,
    )


def ours(processor) -> internvl.InternVLSettings:
    config = {
        "image_seq_length": processor.image_seq_length,
        "processor_class": "InternVLProcessor",
        "tokenizer_init_kwargs": dict(processor.tokenizer.init_kwargs),
    }
    return internvl.settings_from(processor.image_processor, config, {"model_type": "internvl"})


def real_grid(processor, height: int, width: int) -> tuple[int, int]:
    """(rows, columns) from transformers' own get_optimal_tiled_canvas, with the image kwargs the
    processor's own _merge_kwargs gives the image processor."""
    from transformers.image_utils import SizeDict
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

    ip = processor.image_processor
    merged = merge_kwargs(processor)["images_kwargs"]
    size = merged.get("size", ip.size)
    size = SizeDict(**size) if isinstance(size, dict) else size
    min_patches = merged.get("min_patches", ip.min_patches)
    max_patches = merged.get("max_patches", ip.max_patches)
    if not (merged.get("crop_to_patches", ip.crop_to_patches) and max_patches > 1):
        return 1, 1
    columns, rows = get_optimal_tiled_canvas(
        (height, width), (size.height, size.width), min_patches, max_patches
    )
    return rows, columns


def _helper_counts_run_only() -> bool:
    """transformers 5.25 changed InternVLProcessor._get_num_multimodal_tokens (processing_internvl.py)
    from the whole span to the image-token run: 2 + image_seq_length * patches became
    image_seq_length * patches (no <img>, </img>)."""
    from packaging.version import Version

    from vlmlint.models import compat

    return Version(compat.transformers_version()) >= Version("5.25.0")


def _span_extra() -> int:
    """What the helper counts beyond the <IMG_CONTEXT> run: <img> and </img> up to 5.24."""
    return 0 if _helper_counts_run_only() else 2


def assert_same(processor, height: int, width: int, helper_agrees: bool = True) -> None:
    settings_ = ours(processor)
    got = internvl.count(height, width, settings_)
    output = processor(text=[internvl.PLACEHOLDER], images=[image(height, width)])
    ids = list(output["input_ids"][0])
    tokenizer = processor.tokenizer
    num_patches = len(output["pixel_values"])
    assert ids.count(processor.image_token_id) == got.tokens, (height, width)
    assert got.tokens == processor.image_seq_length * num_patches
    # the whole span: <img> + run + </img>, nothing else (Qwen2 adds no BOS)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<img>") and ids[-1] == tokenizer.convert_tokens_to_ids(
        "</img>"
    )
    assert len(ids) == got.tokens + 2
    rows, columns = real_grid(processor, height, width)
    if rows * columns > 1:
        assert got.grid == (rows, columns)
        assert num_patches == rows * columns + 1  # the thumbnail
        settings_ = ours(processor)
        assert (got.resized_height, got.resized_width) == (
            rows * settings_.tile_height,
            columns * settings_.tile_width,
        )
    else:
        assert got.grid == (1, 1) and num_patches == 1
    assert internvl.count_exact(processor.image_processor, [image(height, width)], settings_) == [got]
    if helper_agrees:
        helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])
        # The helper counts the whole span (<img> and </img> too; from 5.25 the run only) and agrees
        # with the pipeline on tiles.
        assert helper["num_image_tokens"] == [got.tokens + _span_extra()]
        assert helper["num_image_patches"] == [num_patches]


# Square images tie on the aspect ratio with every k x k grid: k x k wins once the image's area exceeds
# half of k*k tiles (448: 634^2 > 401408 > 633^2, 951^2 > 903168 > 950^2). Same at 2:1 (4x2 vs 2x1) and
# between two grids at equal distance (ratio 11.5: 11x1 vs 12x1, area vs 0.5 * 12 tiles).
EDGES = [
    (1, 1),
    (2, 3),
    (10, 10),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (199, 1),
    (448, 448),
    (447, 449),
    (633, 633),
    (634, 634),
    (950, 950),
    (951, 951),
    (633, 1266),
    (634, 1268),
    (1266, 633),
    (1268, 634),
    (230, 2645),
    (460, 5290),
    (300, 700),
    (1080, 1920),
    (1920, 1080),
    (768, 1024),
    (3000, 4000),
    (4000, 3000),
]


@pytest.mark.parametrize("height,width", EDGES)
def test_hub_settings_edges_match_real_processor(tokenizer, height, width):
    assert_same(real_processor_for(tokenizer, **HUB), height, width)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1200),
    width=st.integers(1, 1200),
    tile_height=st.sampled_from([14, 28, 56]),
    tile_width=st.sampled_from([14, 28, 56]),
    min_patches=st.integers(1, 4),
    max_patches=st.integers(1, 16),
    image_seq_length=st.sampled_from([1, 4, 64, 256]),
    crop_flag=st.booleans(),
)
@example(
    height=56,
    width=56,
    tile_height=28,
    tile_width=28,
    min_patches=1,
    max_patches=12,
    image_seq_length=4,
    crop_flag=False,
)
@example(
    height=40,
    width=40,
    tile_height=28,
    tile_width=28,
    min_patches=1,
    max_patches=12,
    image_seq_length=4,
    crop_flag=True,
)
@example(
    height=100,
    width=300,
    tile_height=28,
    tile_width=28,
    min_patches=5,
    max_patches=4,
    image_seq_length=4,
    crop_flag=True,
)
def test_random_sizes_and_settings_match_real_processor(
    tokenizer, height, width, tile_height, tile_width, min_patches, max_patches, image_seq_length, crop_flag
):
    processor = real_processor_for(
        tokenizer,
        image_seq_length=image_seq_length,
        size={"height": tile_height, "width": tile_width},
        min_patches=min_patches,
        max_patches=max_patches,
        crop_to_patches=crop_flag,
    )
    assert_same(processor, height, width)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    tile=st.sampled_from([224, 336, 384, 448, 512]),
    min_patches=st.integers(1, 6),
    max_patches=st.integers(1, 40),
)
def test_grid_selection_equals_transformers_helper(height, width, tile, min_patches, max_patches):
    """The pure grid choice, float for float and tie for tie, on sizes too big to run the pipeline on."""
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

    expected = get_optimal_tiled_canvas((height, width), (tile, tile), min_patches, max_patches)
    assert internvl.optimal_tiled_canvas(height, width, tile, tile, min_patches, max_patches) == expected


def test_grid_order_equals_transformers_enumeration():
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_all_supported_aspect_ratios

    for low, high in [(1, 12), (1, 6), (2, 9), (4, 40), (3, 2)]:
        assert list(internvl.supported_grids(low, high)) == get_all_supported_aspect_ratios(low, high)


def test_processor_forces_tiling_even_when_the_image_processor_says_no(tokenizer):
    """The hub image processor saves crop_to_patches false; InternVLProcessor tiles anyway."""
    processor = real_processor_for(tokenizer, **HUB)
    assert processor.image_processor.crop_to_patches is False
    alone = processor.image_processor(images=[image(500, 1000)])
    assert list(alone["num_patches"]) == [1]  # the image processor on its own does not tile
    output = processor(text=[internvl.PLACEHOLDER], images=[image(500, 1000)])
    assert len(output["pixel_values"]) == 3  # 2x1 tiles + thumbnail through the processor
    settings_ = ours(processor)
    assert settings_.crop_to_patches is True
    assert internvl.count(500, 1000, settings_).tokens == 3 * 256


def test_fallback_is_the_real_class_attribute():
    """The installed release's forced images kwargs (5.2x: the class attribute; up to 5.20:
    InternVLProcessorKwargs._defaults) are the 5.24 fallback's, and _call_kwargs reads them."""
    from transformers import InternVLProcessor
    from transformers.models.internvl import processing_internvl

    forced = getattr(InternVLProcessor, "images_kwargs", None)
    if forced is None:
        forced = processing_internvl.InternVLProcessorKwargs._defaults["images_kwargs"]
    assert forced == internvl.PROCESSOR_IMAGES_KWARGS
    assert internvl._call_kwargs({}) == forced


def test_fixture_folder_settings_and_expansion():
    model = load_model(str(FOLDER))
    assert model.family is internvl.FAMILY
    assert model.settings == internvl.InternVLSettings(
        tile_height=448,
        tile_width=448,
        min_patches=1,
        max_patches=12,
        crop_to_patches=True,
        image_seq_length=256,
    )
    assert model.max_position_embeddings == 32768
    count = internvl.count(1080, 1920, model.settings)
    assert count.grid == (2, 4) and count.tokens == 9 * 256
    assert internvl.expand(count, model.settings) == ("<img>", Run("<IMG_CONTEXT>", 2304), "</img>")
    scanner = Scanner(ScanConfig(dataset="", model=str(FOLDER)), model=model)
    message = Message(Role.USER, (Part(is_image=True), Part("Hi")))
    rendered = scanner.render((message,))
    assert rendered == "<|im_start|>user\n<IMG_CONTEXT>\nHi<|im_end|>\n"
    info = ImageInfo(
        "x.jpg", 1920, 1080, resized_width=1792, resized_height=896, grid=count.grid, tokens=count.tokens
    )
    text, saved = scanner.compose(rendered, (info,))
    real = real_processor(FOLDER)(text=[rendered], images=[image(1080, 1920)])
    assert len(model.tokenizer(text)["input_ids"]) + saved == len(real["input_ids"][0])


def test_got_ocr2_is_not_counted_as_internvl(tokenizer):
    processor = real_processor_for(tokenizer, **HUB)
    with pytest.raises(CountError, match="GOT-OCR2"):
        internvl.settings_from(processor.image_processor, {"processor_class": "GotOcr2Processor"}, {})
    with pytest.raises(CountError, match="GOT-OCR2"):
        internvl.settings_from(processor.image_processor, {}, {"model_type": "got_ocr2"})


def test_no_tiling_when_max_patches_is_one(tokenizer):
    processor = real_processor_for(
        tokenizer, size={"height": 28, "width": 28}, max_patches=1, image_seq_length=4
    )
    for height, width in [(1, 1), (50, 500), (500, 50)]:
        assert_same(processor, height, width)
        assert internvl.count(height, width, ours(processor)).tokens == 4


@pytest.mark.parametrize("name", ["llava"])  # 1x1, aspect 200, EXIF-rotated and palette images
def test_exact_mode_agrees_with_the_header_path(name):
    from tests.conftest import DATASETS

    fast = Scanner(ScanConfig(dataset=str(DATASETS / name), model=str(FOLDER)))
    exact = Scanner(ScanConfig(dataset=str(DATASETS / name), model=str(FOLDER), exact=True), model=fast.model)
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        assert a.result.images == b.result.images, a.result.sample.location
        assert a.result.seq_len == b.result.seq_len
        assert [f.code for f in a.findings] == [f.code for f in b.findings]


@pytest.mark.parametrize(
    "init_kwargs",
    [
        {"crop_to_patches": False},
        {"max_patches": 4},
        {"min_patches": 3, "size": {"height": 224, "width": 224}},
    ],
)
def test_tokenizer_init_kwargs_beat_the_processor_and_image_processor(init_kwargs):
    """ProcessorMixin._merge_kwargs: image kwargs in the tokenizer's init kwargs (tokenizer_config.json)
    override the image processor's and even InternVLProcessor's forced crop_to_patches."""
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(FOLDER, **init_kwargs)
    processor = real_processor_for(tok, **HUB)
    without = internvl.settings_from(
        processor.image_processor, {"image_seq_length": 256, "processor_class": "InternVLProcessor"}, {}
    )
    disagreements = 0
    for height, width in [(500, 1000), (500, 3000), (1080, 1920), (10, 10)]:
        assert_same(processor, height, width, helper_agrees=False)
        # _get_num_multimodal_tokens merges kwargs without the tokenizer's init kwargs: it counts as if
        # they were not there, and so disagrees with the pipeline.
        helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])["num_image_tokens"]
        assert helper == [internvl.count(height, width, without).tokens + _span_extra()]
        disagreements += helper != [internvl.count(height, width, ours(processor)).tokens + _span_extra()]
    assert disagreements > 0
