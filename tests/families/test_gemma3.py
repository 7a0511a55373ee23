"""Differential tests: vlmlint's Gemma 3 count and expansion against the real Gemma3Processor.

The real side is transformers' own classes: Gemma3ImageProcessorPil (its `pan_and_scan` method and
its full preprocess) and Gemma3Processor built from the fixture folders (tests/conftest.py). Counts
are <image_soft_token> ids in input_ids for a one-image prompt, <start_of_image> ids (one per view)
and the pixel_values the processor made.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import PROCESSORS, real_processor
from tests.families._releases import needs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, gemma3, load_model
from vlmlint.records import ImageInfo

PLAIN = PROCESSORS / "gemma-3-4b-it"
PANSCAN = PROCESSORS / "gemma-3-4b-it-panscan"
HUB_PAS = dict(
    pan_and_scan_min_crop_size=256, pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2
)


@pytest.fixture(scope="module")
def plain():
    return real_processor(PLAIN)


@pytest.fixture(scope="module")
def panscan():
    return real_processor(PANSCAN)


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def settings_for(do_pan_and_scan: bool = True, **pas) -> gemma3.Gemma3Settings:
    return gemma3.Gemma3Settings(height=896, width=896, do_pan_and_scan=do_pan_and_scan, **{**HUB_PAS, **pas})


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    """What processor(text, images) gives for a one-image prompt."""
    tokenizer = processor.tokenizer
    output = processor(text=["<start_of_image>"], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "soft": ids.count(tokenizer.image_token_id),
        "boi": ids.count(tokenizer.boi_token_id),
        "views": len(output["pixel_values"]),
        "shape": tuple(int(v) for v in output["pixel_values"][0].shape[-2:]),
    }


def real_crops(height: int, width: int, s: gemma3.Gemma3Settings) -> list[np.ndarray]:
    """The real `pan_and_scan` method on a zero-strided (free) channels-first image of any size."""
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    pixels = np.broadcast_to(np.zeros((1, 1, 1), dtype=np.uint8), (3, height, width))
    return Gemma3ImageProcessorPil().pan_and_scan(
        image=pixels,
        pan_and_scan_min_crop_size=s.pan_and_scan_min_crop_size,
        pan_and_scan_max_num_crops=s.pan_and_scan_max_num_crops,
        pan_and_scan_min_ratio_to_activate=s.pan_and_scan_min_ratio_to_activate,
    )


def assert_grid_matches_method(height: int, width: int, s: gemma3.Gemma3Settings) -> None:
    crops = real_crops(height, width, s)
    rows, cols = gemma3.pan_and_scan_grid(height, width, s)
    assert rows * cols == len(crops), (height, width, s)
    if crops:
        crop_h, crop_w = math.ceil(height / rows), math.ceil(width / cols)
        assert crops[0].shape[1:] == (min(crop_h, height), min(crop_w, width))
        assert (rows == 1) or (cols == 1)


def assert_count_matches_pipeline(processor, height: int, width: int, s: gemma3.Gemma3Settings, **kw) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = gemma3.count(height, width, s)
    assert got.tokens == real["soft"], (height, width)
    assert got.tokens // s.image_seq_length == real["boi"] == real["views"]
    assert (got.resized_height, got.resized_width) == real["shape"]


# -- settings ------------------------------------------------------------------------------------


def test_settings_from_the_fixture_folders():
    plain_model, panscan_model = load_model(str(PLAIN)), load_model(str(PANSCAN))
    assert plain_model.family is gemma3.FAMILY and panscan_model.family is gemma3.FAMILY
    assert plain_model.settings == settings_for(do_pan_and_scan=False)
    assert panscan_model.settings == settings_for(do_pan_and_scan=True)
    assert plain_model.max_position_embeddings == 131072
    assert gemma3.FAMILY.add_special_tokens  # processor(text=...) tokenizes with special tokens


def test_preprocessor_flag_alone_is_ignored_by_the_processor(tmp_path):
    """do_pan_and_scan: true in preprocessor_config.json only: the processor's class default wins."""
    folder = tmp_path / "gemma3-preprocessor-flag"
    shutil.copytree(PLAIN, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["do_pan_and_scan"] = True
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.image_processor.do_pan_and_scan is True  # the image processor has it ...
    assert model.settings.do_pan_and_scan is False  # ... processor(text, images) does not use it
    processor = real_processor(folder)
    assert (
        real_pipeline(processor, 300, 1000)["soft"] == 256 == gemma3.count(300, 1000, model.settings).tokens
    )
    # The bare image processor honours the flag (and needs the crop settings the hub leaves null).
    assert model.image_processor(images=[image(300, 1000)], **HUB_PAS)["num_crops"] == [3]


def test_panscan_fixture_turns_pan_and_scan_on_in_the_pipeline(panscan):
    assert panscan.tokenizer.init_kwargs.get("do_pan_and_scan") is True
    assert real_pipeline(panscan, 300, 1000)["soft"] == 256 * 4


# -- pan-and-scan grid ---------------------------------------------------------------------------

GRID_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (1990, 10),
    (600, 720),  # ratio exactly 1.2: activates
    (600, 719),  # just under 1.2
    (720, 600),
    (719, 600),
    (400, 1000),  # ratio 2.5: half rounds up to 3 crops
    (400, 999),  # 2.4975: 2 crops
    (1000, 400),
    (256, 512),  # crops of exactly the min crop size
    (256, 511),  # ceil(511 / 2) = 256: still fits
    (256, 510),  # 255 < 256: no crops
    (255, 600),  # crop height 255 < 256
    (800, 4000),  # ratio 5 capped at 4 crops
    (4000, 800),
    (3000, 4000),
    (4000, 4000),
    (1080, 1920),
    (300, 1000),
]


@pytest.mark.parametrize("height,width", GRID_EDGES)
def test_grid_edges_match_the_real_method(height, width):
    assert_grid_matches_method(height, width, settings_for())


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    min_crop=st.integers(1, 1024),
    max_crops=st.integers(1, 12),
    ratio=st.one_of(st.sampled_from([1.0, 1.2, 1.5, 2.0, 2.5]), st.floats(0.5, 6.0)),
)
@example(height=2, width=9, min_crop=2, max_crops=4, ratio=1.2)  # last crop starts past the edge
@example(height=100, width=250, min_crop=50, max_crops=4, ratio=1.2)  # 2.5 + 0.5 floors to 3
def test_grid_matches_the_real_method_for_any_settings(height, width, min_crop, max_crops, ratio):
    s = settings_for(
        pan_and_scan_min_crop_size=min_crop,
        pan_and_scan_max_num_crops=max_crops,
        pan_and_scan_min_ratio_to_activate=ratio,
    )
    assert_grid_matches_method(height, width, s)


def test_zero_settings_raise_like_transformers():
    s = settings_for(pan_and_scan_min_crop_size=0)
    with pytest.raises(ZeroDivisionError):
        real_crops(100, 300, s)
    with pytest.raises(CountError):
        gemma3.count(100, 300, s)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (10, 2000),
    (600, 720),
    (600, 719),
    (400, 1000),
    (400, 999),
    (256, 511),
    (256, 510),
    (800, 4000),
    (4000, 800),
    (3000, 4000),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges_with_pan_and_scan(panscan, height, width):
    assert_count_matches_pipeline(panscan, height, width, settings_for(True))


@pytest.mark.parametrize("height,width", [(1, 1), (1, 4000), (300, 1000), (4000, 3000)])
def test_pipeline_edges_without_pan_and_scan(plain, height, width):
    assert_count_matches_pipeline(plain, height, width, settings_for(False))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400),
    width=st.integers(1, 1400),
    min_crop=st.integers(16, 512),
    max_crops=st.integers(1, 6),
    ratio=st.sampled_from([1.0, 1.2, 1.5, 2.0, 3.0]),
)
def test_random_sizes_and_settings_match_the_pipeline(plain, height, width, min_crop, max_crops, ratio):
    pas = dict(
        pan_and_scan_min_crop_size=min_crop,
        pan_and_scan_max_num_crops=max_crops,
        pan_and_scan_min_ratio_to_activate=ratio,
    )
    # call-time kwargs override the processor's defaults, as a user's collator would pass them
    assert_count_matches_pipeline(
        plain, height, width, settings_for(True, **pas), do_pan_and_scan=True, **pas
    )


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (720, 600), (1080, 1920)])
def test_count_exact_matches_count(height, width):
    model = load_model(str(PANSCAN))
    images = [image(height, width), image(width, height)]
    exact = gemma3.count_exact(model.image_processor, images, model.settings)
    assert exact == [gemma3.count(height, width, model.settings), gemma3.count(width, height, model.settings)]


# -- expansion -----------------------------------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


@pytest.mark.parametrize("crops", [0, 1, 2, 3, 4, 7])
def test_expand_is_the_processors_replacement(panscan, crops):
    s = settings_for(True)
    count = gemma3.ImageCount(896, 896, (1, crops) if crops else (1, 1), 256 * (1 + crops))
    assert expanded(gemma3.expand(count, s)) == needs(panscan, "replace_image_token")(
        {"num_crops": [crops]}, 0
    )


@pytest.mark.parametrize(
    "text",
    [
        "<bos><start_of_turn>user\n<start_of_image>Describe it.<end_of_turn>\n",
        "a\n<start_of_image>\nb",  # the "\n\n" around the sequence meets the neighbours' newlines
        "x <start_of_image> y <start_of_image> z",
        "<start_of_image><start_of_image>",
    ],
)
@pytest.mark.parametrize("folder", [PLAIN, PANSCAN])
def test_composed_text_tokenizes_to_the_processors_ids(text, folder):
    processor = real_processor(folder)
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)))
    sizes = [(300, 1000), (1000, 300)][: text.count("<start_of_image>")]
    infos = []
    for height, width in sizes:
        c = gemma3.count(height, width, scanner.model.settings)
        infos.append(
            ImageInfo(
                "x",
                width,
                height,
                resized_width=c.resized_width,
                resized_height=c.resized_height,
                grid=c.grid,
                tokens=c.tokens,
            )
        )
    composed, saved = scanner.compose(text, tuple(infos))
    ids = list(processor(text=[text], images=[image(h, w) for h, w in sizes])["input_ids"][0])
    assert len(scanner.model.tokenizer(composed)["input_ids"]) + saved == len(ids)
    full = composed.replace("<image_soft_token>", "<image_soft_token>" * 256)
    assert scanner.model.tokenizer(full)["input_ids"] == ids


# -- what transformers says about itself ---------------------------------------------------------


def test_get_num_multimodal_tokens_ignores_pan_and_scan(panscan, plain):
    """DISAGREEMENT: the helper returns image_seq_length for every image, crops or not."""
    helper = panscan._get_num_multimodal_tokens(image_sizes=[(300, 1000), (500, 500)])
    assert helper["num_image_tokens"] == [256, 256]
    assert real_pipeline(panscan, 300, 1000)["soft"] == 1024 == gemma3.count(300, 1000, settings_for()).tokens
    assert real_pipeline(panscan, 500, 500)["soft"] == 256  # no crops: they agree
    # without pan-and-scan the helper is right about the <image_soft_token> run
    assert plain._get_num_multimodal_tokens(image_sizes=[(300, 1000)])["num_image_tokens"] == [256]
    assert helper["num_image_patches"] == [1, 1]  # and the pipeline made 4 views of the first image


def test_image_token_id_of_the_processor_is_the_boi_token(plain):
    """processor.image_token_id is <start_of_image> (what the template writes); the model's
    config.image_token_id, matched against image features, is <image_soft_token>: that is what
    ImageCount.tokens counts (processor.image_token_ids says so too)."""
    tokenizer = plain.tokenizer
    # transformers 5.2x (image_token_ids); up to 5.20 the processor's image_token_id was <image_soft_token> (counts unchanged:
    # vlmlint counts the soft tokens either way, and the whole-prompt tests compare input_ids)
    if hasattr(plain, "image_token_ids"):
        assert plain.image_token_id == tokenizer.boi_token_id
        assert plain.image_token_ids == [tokenizer.image_token_id]
    else:
        assert plain.image_token_id == tokenizer.image_token_id
    config = json.loads((PLAIN / "config.json").read_text())
    assert config["image_token_index"] == tokenizer.image_token_id


def test_template_bos_and_tokenizer_bos_double_up(plain):
    """The chat template writes <bos> and processor(text=rendered) adds one: two BOS, as vlmlint counts."""
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    rendered = plain.apply_chat_template(conversation)
    assert rendered.startswith("<bos><start_of_turn>user\n<start_of_image>Hi")
    ids = list(plain(text=[rendered], images=[image(64, 64)])["input_ids"][0])
    bos = plain.tokenizer.bos_token_id
    assert ids[:2] == [bos, bos] and ids[2] != bos
