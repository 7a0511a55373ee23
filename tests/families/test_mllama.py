"""Differential tests: vlmlint's Llama 3.2 Vision (Mllama) counts against the real transformers classes.

The real MllamaImageProcessorPil gives the tile grid (aspect_ratio_ids, num_tiles) and, run without
rescale/normalize on a white image, the resized size (the non-zero part of the padded canvas). The
real MllamaProcessor gives input_ids: one <|image|> per image, and the BOS handling.
"""

from __future__ import annotations

import io
import warnings
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model, mllama
from vlmlint.readers import iter_samples
from vlmlint.template_cache import conversation_for_template

FOLDER = PROCESSORS / "llama-3.2-11b-vision-instruct"
HUB = mllama.MllamaSettings(tile_size=560, max_image_tiles=4)


@lru_cache(maxsize=32)
def real_image_processor(tile_size: int, max_image_tiles: int):
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    return MllamaImageProcessorPil(
        size={"height": tile_size, "width": tile_size},
        max_image_tiles=max_image_tiles,
        do_rescale=False,
        do_normalize=False,
    )


def real_count(height: int, width: int, tile_size: int, max_image_tiles: int):
    """(resized height, resized width, (rows, cols)) from the real image processor's output."""
    processor = real_image_processor(tile_size, max_image_tiles)
    image = Image.new("RGB", (width, height), (255, 255, 255))
    output = processor(images=[[image]])
    ratio_id = int(output["aspect_ratio_ids"][0][0])
    tiles = int(output["num_tiles"][0][0])
    rows, cols = mllama.supported_aspect_ratios(max_image_tiles)[ratio_id - 1]
    assert rows * cols == tiles
    assert list(output["aspect_ratio_mask"][0][0]) == [1] * tiles + [0] * (max_image_tiles - tiles)
    pixels = np.asarray(output["pixel_values"])[0, 0, :tiles, 0]  # (tiles, tile, tile), first channel
    canvas = pixels.reshape(rows, cols, tile_size, tile_size).transpose(0, 2, 1, 3)
    canvas = canvas.reshape(rows * tile_size, cols * tile_size)
    filled = canvas > 0  # white image (255) on a zero padding, no rescale/normalize
    resized_height = int(filled.any(axis=1).sum())
    resized_width = int(filled.any(axis=0).sum())
    assert filled[:resized_height, :resized_width].all()  # the image sits top-left, padding after it
    return resized_height, resized_width, (rows, cols)


def assert_same(height: int, width: int, tile_size: int = 560, max_image_tiles: int = 4) -> None:
    settings_ = mllama.MllamaSettings(tile_size=tile_size, max_image_tiles=max_image_tiles)
    got = mllama.count(height, width, settings_)
    assert (got.resized_height, got.resized_width, got.grid) == real_count(
        height, width, tile_size, max_image_tiles
    ), (height, width, tile_size, max_image_tiles)
    assert got.tokens == 1


# Edges: extreme shapes, aspect ratios around 200, each canvas size exactly (scale 1: a tie between
# canvases, least area wins) and one pixel either side (upscale below, another tile above).
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
    (559, 559),
    (560, 560),
    (561, 561),
    (560, 1120),
    (560, 1121),
    (1120, 560),
    (1120, 1120),
    (1121, 1121),
    (1680, 560),
    (2240, 560),
    (560, 2240),
    (2241, 560),
    (839, 1680),
    (840, 1680),
    (841, 1680),
    (480, 640),
    (1080, 1920),
    (1920, 1080),
    (3000, 4000),
    (27, 5400),
    (200, 4000),
    (16, 16),
]


@pytest.mark.parametrize("height,width", EDGES)
def test_hub_edges_match_real_image_processor(height, width):
    assert_same(height, width)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 700),
    width=st.integers(1, 700),
    tile_size=st.sampled_from([14, 16, 28, 32, 56]),
    max_image_tiles=st.integers(1, 6),
)
def test_random_sizes_and_settings_match_real_image_processor(height, width, tile_size, max_image_tiles):
    assert_same(height, width, tile_size, max_image_tiles)


@pytest.mark.parametrize("max_image_tiles", [1, 2, 3, 4, 5, 6, 8])
def test_aspect_ratio_order_is_transformers_order(max_image_tiles):
    from transformers.models.mllama.image_processing_pil_mllama import get_all_supported_aspect_ratios

    assert list(mllama.supported_aspect_ratios(max_image_tiles)) == [
        tuple(r) for r in get_all_supported_aspect_ratios(max_image_tiles)
    ]


def test_count_exact_equals_the_formula():
    processor = real_image_processor(560, 4)
    sizes = [(480, 640), (1, 4000), (1120, 1121), (27, 5400)]
    images = [Image.new("RGB", (w, h)) for h, w in sizes]
    exact = mllama.count_exact(processor, images, HUB)
    assert exact == [mllama.count(h, w, HUB) for h, w in sizes]


def test_settings_come_from_the_fixture_files():
    model = load_model(str(FOLDER))
    assert model.family.name == "mllama"
    assert model.settings == HUB
    assert model.max_position_embeddings == 131072


def test_processor_has_no_num_multimodal_tokens_helper():
    """MllamaProcessor defines no _get_num_multimodal_tokens (and needs none: one token per image)."""
    assert not hasattr(real_processor(), "_get_num_multimodal_tokens")


@lru_cache(maxsize=1)
def real_processor():
    from transformers import AutoImageProcessor, AutoTokenizer, MllamaProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MllamaProcessor(
            image_processor=AutoImageProcessor.from_pretrained(FOLDER),
            tokenizer=AutoTokenizer.from_pretrained(FOLDER),
            chat_template=(FOLDER / "chat_template.jinja").read_text(),
        )


def test_one_image_prompt_keeps_one_image_token_and_gets_two_bos():
    processor = real_processor()
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True)
    output = processor(text=[text], images=[Image.new("RGB", (640, 480))])
    ids = list(output["input_ids"][0])
    bos = processor.tokenizer.convert_tokens_to_ids(mllama.BOS_TOKEN)
    assert ids[:2] == [bos, bos]  # the template's bos_token, then the tokenizer's own
    assert ids.count(processor.image_token_id) == mllama.count(480, 640, HUB).tokens == 1
    assert int(output["aspect_ratio_ids"][0][0]) == 2  # (1, 2): one row of two tiles
    # Raw prompt: the processor moves its BOS after the leading <|image|>, the tokenizer adds another.
    output = processor(text=["<|image|>Describe it."], images=[Image.new("RGB", (640, 480))])
    tokens = processor.tokenizer.convert_ids_to_tokens(output["input_ids"][0])
    assert tokens[:3] == [mllama.BOS_TOKEN, mllama.PLACEHOLDER, mllama.BOS_TOKEN]


def _decode(ref):
    source = io.BytesIO(ref.data) if ref.data is not None else ref.path
    with Image.open(source) as image:
        image.load()
        return ImageOps.exif_transpose(image).convert("RGB")


@pytest.mark.parametrize("use_chat_template", [True, False])
@pytest.mark.parametrize("dataset", ["llava", "sharegpt", "openai", "captions", "demo"])
def test_scanner_lengths_equal_the_real_processor(dataset, use_chat_template):
    """End to end (what tests/test_fixtures.py does, whose real_processor() cannot build Mllama)."""
    processor = real_processor()
    scanner = Scanner(ScanConfig(dataset="", model=str(FOLDER), use_chat_template=use_chat_template))
    checked = 0
    for outcome in scanner.scan_samples(iter_samples(str(DATASETS / dataset))):
        result = outcome.result
        if result.seq_len is None:
            continue
        messages = result.sample.messages
        if use_chat_template:
            text = processor.apply_chat_template(conversation_for_template(messages))
        else:
            text = scanner.render(messages)
        images = [_decode(ref) for ref in result.sample.images] or None
        output = processor(text=[text], images=images)
        ids = list(output["input_ids"][0])
        assert result.seq_len == len(ids), result.sample.location
        assert sum(result.image_tokens) == ids.count(processor.image_token_id) == len(result.images)
        assert result.text_tokens == len(ids) - len(result.images)
        if images:
            ratios = mllama.supported_aspect_ratios(HUB.max_image_tiles)
            grids = [ratios[int(i) - 1] for i in output["aspect_ratio_ids"][0][: len(images)]]
            assert [info.grid for info in result.images] == grids, result.sample.location
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("dataset", ["captions", "llava"])
def test_exact_mode_agrees_with_the_header_path(dataset):
    fast = Scanner(ScanConfig(dataset=str(DATASETS / dataset), model=str(FOLDER)))
    exact = Scanner(
        ScanConfig(dataset=str(DATASETS / dataset), model=str(FOLDER), exact=True), model=fast.model
    )
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        assert a.result.images == b.result.images, a.result.sample.location
        assert a.result.seq_len == b.result.seq_len
