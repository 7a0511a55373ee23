"""Differential tests: vlmlint's Pixtral / Mistral3 count against the real PixtralProcessor and
PixtralImageProcessorPil.

transformers 5.24 cannot import `processing_pixtral` without torch: its only torch dependency is the
module-level `from .image_processing_pixtral import get_resize_output_image_size` (the torchvision image
processor's module). `real_pixtral_processor_class` imports the real PixtralProcessor with that one
name taken from `image_processing_pil_pixtral`, after checking that the two functions are the same code
(same AST). Everything else (the class, replace_image_token, ProcessorMixin.__call__, the PIL image
processor, the fixture tokenizer and chat templates) is transformers' own. Calls pass
return_tensors=None because PixtralProcessor defaults to "pt".
"""

from __future__ import annotations

import inspect
import io
import json
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.version import Version
from PIL import Image, ImageOps

from tests.conftest import (
    DATASETS,
    FIXTURES,
    PROCESSORS,
    real_pixtral_processor_class,
)
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, compat, load_model, pixtral
from vlmlint.template_cache import conversation_for_template

PIXTRAL = PROCESSORS / "pixtral-12b"
MISTRAL3 = PROCESSORS / "mistral-small-3.1-24b"


@cache
def tokenizer():
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(PIXTRAL)


def real_processor_for(image_kw: dict, **processor_kw):
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    cls = real_pixtral_processor_class()
    return cls(image_processor=PixtralImageProcessorPil(**image_kw), tokenizer=tokenizer(), **processor_kw)


@cache
def folder_processor(folder: Path):
    """The real processor of a fixture folder, built from its files as from_pretrained would."""
    from transformers import AutoImageProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        image_processor = AutoImageProcessor.from_pretrained(folder)
    kwargs = {
        k: v
        for k, v in json.loads((folder / "processor_config.json").read_text()).items()
        if k != "processor_class"
    }
    cls = real_pixtral_processor_class()
    return cls(
        image_processor=image_processor,
        tokenizer=tokenizer(),
        chat_template=(folder / "chat_template.jinja").read_text(),
        **kwargs,
    )


def image(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


def ours(processor) -> pixtral.PixtralSettings:
    config = {
        "patch_size": processor.patch_size,
        "spatial_merge_size": processor.spatial_merge_size,
        "tokenizer_init_kwargs": dict(processor.tokenizer.init_kwargs),
    }
    return pixtral.settings_from(processor.image_processor, config, {})


def assert_same(processor, height: int, width: int) -> None:
    settings_ = ours(processor)
    try:
        output = processor(text=["[IMG]"], images=[image(height, width)], return_tensors=None)
    except (ValueError, IndexError) as exc:
        with pytest.raises(CountError):
            pixtral.count(height, width, settings_)
        with pytest.raises(CountError):
            pixtral.count_exact(processor.image_processor, [image(height, width)], settings_)
        assert "Size must contain" in str(exc) or isinstance(exc, IndexError)
        return
    got = pixtral.count(height, width, settings_)
    ids = list(output["input_ids"][0])
    tok = processor.tokenizer
    rows, cols = got.grid
    assert ids.count(processor.image_token_id) == got.tokens == rows * cols, (height, width)
    assert ids.count(processor.image_break_token_id) == rows - 1
    assert ids.count(processor.image_end_token_id) == 1
    assert ids[0] == tok.bos_token_id and len(ids) == 1 + rows * (cols + 1)
    assert tuple(int(v) for v in output["image_sizes"][0]) == (got.resized_height, got.resized_width)
    # the expansion, tokenized as the engine writes it, is the processor's span id for id
    segments = pixtral.expand(got, settings_)
    span = "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)
    assert tok(span, add_special_tokens=False)["input_ids"] == ids[1:]
    assert pixtral.count_exact(processor.image_processor, [image(height, width)], settings_) == [got]


EDGES = [
    (1, 1),
    (2, 3),
    (15, 15),
    (16, 16),
    (17, 17),
    (27, 29),
    (28, 28),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (1023, 1023),
    (1024, 1024),
    (1025, 1025),
    (1024, 1025),
    (1540, 1540),
    (1541, 1539),
    (1080, 1920),
    (1920, 1080),
    (3000, 4000),
    (4000, 3000),
    (300, 700),
]


@pytest.mark.parametrize("height,width", EDGES)
def test_pixtral_12b_edges_match_real_processor(height, width):
    assert_same(folder_processor(PIXTRAL), height, width)


@pytest.mark.parametrize("height,width", EDGES)
def test_mistral_small_edges_match_real_processor(height, width):
    assert_same(folder_processor(MISTRAL3), height, width)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1600),
    width=st.integers(1, 1600),
    patch=st.sampled_from([14, 16]),
    merge=st.sampled_from([1, 2]),
    longest_edge=st.integers(16, 700),
)
@example(height=1, width=700, patch=16, merge=1, longest_edge=512)  # floors to 0 rows: raises
@example(height=33, width=1600, patch=14, merge=2, longest_edge=100)
def test_random_sizes_and_settings_match_real_processor(height, width, patch, merge, longest_edge):
    processor = real_processor_for(
        {"size": {"longest_edge": longest_edge}, "patch_size": {"height": 99, "width": 99}},
        patch_size=patch,
        spatial_merge_size=merge,
    )
    assert_same(processor, height, width)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 900),
    width=st.integers(1, 900),
    max_height=st.integers(16, 400),
    max_width=st.integers(16, 400),
    patch=st.sampled_from([14, 16]),
)
def test_height_width_size_matches_real_processor(height, width, max_height, max_width, patch):
    processor = real_processor_for({"size": {"height": max_height, "width": max_width}}, patch_size=patch)
    assert_same(processor, height, width)


@pytest.mark.parametrize(
    "height,width", [(1, 1), (15, 40), (16, 40), (17, 33), (100, 7), (300, 700), (2000, 50)]
)
def test_without_resize_matches_real_processor(height, width):
    processor = real_processor_for({"do_resize": False}, patch_size=16)
    assert_same(processor, height, width)


def test_processor_patch_overrides_the_image_processors():
    """Mistral3's image processor says patch 14, the processor passes 14 * spatial_merge_size 2 = 28."""
    processor = folder_processor(MISTRAL3)
    assert processor.image_processor.patch_size == {"height": 14, "width": 14}
    settings_ = load_model(str(MISTRAL3)).settings
    assert settings_.effective_patch == 28
    output = processor(text=["[IMG]"], images=[image(100, 100)], return_tensors=None)
    assert tuple(output["image_sizes"][0]) == (112, 112)
    assert pixtral.count(100, 100, settings_).grid == (4, 4)


def test_defaults_are_the_real_processor_class_defaults():
    parameters = inspect.signature(real_pixtral_processor_class().__init__).parameters
    for key, value in pixtral.DEFAULTS.items():
        assert parameters[key].default == value, key


def test_fixture_folders_settings():
    small = load_model(str(MISTRAL3))
    assert small.family is pixtral.FAMILY
    assert small.settings == pixtral.PixtralSettings(
        patch_size=14, spatial_merge_size=2, max_height=1540, max_width=1540
    )
    assert small.max_position_embeddings == 131072
    big = load_model(str(PIXTRAL))
    assert big.settings == pixtral.PixtralSettings(
        patch_size=16, spatial_merge_size=1, max_height=1024, max_width=1024
    )
    assert big.max_position_embeddings == 1024000


# transformers 5.25 changed PixtralProcessor._get_num_multimodal_tokens (processing_pixtral.py) from the
# whole span, (columns + 1) * rows, to the [IMG] run, columns * rows: the [IMG_BREAK]s and [IMG_END] left it.
HELPER_COUNTS_RUN_ONLY = Version(compat.transformers_version()) >= Version("5.25.0")


def test_num_multimodal_tokens_helper_vs_pipeline():
    """`_get_num_multimodal_tokens` counts the whole span (the [IMG_BREAK]s and [IMG_END] too; from
    transformers 5.25 the [IMG] run only) and disagrees with the pipeline where the pipeline raises or
    does not resize."""
    processor = folder_processor(PIXTRAL)
    for height, width in [(1, 1), (300, 700), (1080, 1920), (3000, 4000)]:
        got = pixtral.count(height, width, ours(processor))
        rows, _ = got.grid
        helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])
        assert helper["num_image_tokens"] == [got.tokens + (0 if HELPER_COUNTS_RUN_ONLY else rows)]
    # The helper builds np.zeros((h, w, 3)) and lets transformers guess the channel axis: a height of 1
    # or 3 reads as channels-first, so it counts a (w x 3) image. 3x500 (1 row of 32 patches: 33 span
    # tokens) becomes 500x3 (32 rows of 1: 64).
    assert pixtral.count(3, 500, ours(processor)).grid == (1, 32)
    helper = processor._get_num_multimodal_tokens(image_sizes=[(3, 500)])["num_image_tokens"]
    assert helper == [32 if HELPER_COUNTS_RUN_ONLY else 64]
    # 1x4000 at longest_edge 1024 floors to 0 rows and the pipeline raises; the helper counts a 4000x3
    # image (64 rows of 0 [IMG] + break/end) and says 64 (5.25: 0).
    helper = processor._get_num_multimodal_tokens(image_sizes=[(1, 4000)])["num_image_tokens"]
    assert helper == [0 if HELPER_COUNTS_RUN_ONLY else 64]
    with pytest.raises(ValueError):
        processor(text=["[IMG]"], images=[image(1, 4000)], return_tensors=None)
    with pytest.raises(CountError):
        pixtral.count(1, 4000, ours(processor))
    # do_resize=False: the pipeline keeps 100x100 (6x6 patches, floor), the helper still rounds up (7x7).
    no_resize = real_processor_for({"do_resize": False}, patch_size=16)
    output = no_resize(text=["[IMG]"], images=[image(100, 100)], return_tensors=None)
    assert list(output["input_ids"][0]).count(no_resize.image_token_id) == 36
    helper = no_resize._get_num_multimodal_tokens(image_sizes=[(100, 100)])["num_image_tokens"]
    assert helper == [7 * 7 if HELPER_COUNTS_RUN_ONLY else 7 * 8]
    # size given as height/width: the helper reads size["longest_edge"] and fails, the pipeline works.
    boxed = real_processor_for({"size": {"height": 64, "width": 128}}, patch_size=16)
    assert_same(boxed, 100, 100)
    with pytest.raises((KeyError, TypeError)):
        boxed._get_num_multimodal_tokens(image_sizes=[(100, 100)])


def test_other_processors_on_pixtral_image_processors_are_refused():
    processor = folder_processor(PIXTRAL)
    with pytest.raises(CountError, match="not PixtralProcessor"):
        pixtral.settings_from(processor.image_processor, {"processor_class": "LightOnOcrProcessor"}, {})
    with pytest.raises(CountError):
        pixtral.settings_from(processor.image_processor, {}, {"model_type": "lighton_ocr"})


# End to end, as tests/test_fixtures.py does for the other families (its real_processor cannot build
# PixtralProcessor without torch, nor pass return_tensors=None): every fixture dataset row vlmlint
# counts equals the real processor's input_ids, with the real chat template.
E2E_DATASETS = ["demo", "llava", "sharegpt", "openai", "broken"]


def _decode(ref):
    source = io.BytesIO(ref.data) if ref.data is not None else ref.path
    with Image.open(source) as img:
        img.load()
        return ImageOps.exif_transpose(img).convert("RGB")


@pytest.mark.parametrize("folder", [PIXTRAL, MISTRAL3], ids=lambda p: p.name)
@pytest.mark.parametrize("name", E2E_DATASETS)
def test_fixture_datasets_equal_the_real_processor(folder, name):
    from vlmlint.readers import iter_samples

    assert (FIXTURES / "expected" / f"{name}.json").is_file()
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)))
    processor = folder_processor(folder)
    checked = 0
    for outcome in scanner.scan_samples(iter_samples(str(DATASETS / name))):
        result = outcome.result
        if result.seq_len is None:
            continue
        text = processor.apply_chat_template(conversation_for_template(result.sample.messages))
        images = [_decode(ref) for ref in result.sample.images] or None
        ids = list(processor(text=[text], images=images, return_tensors=None)["input_ids"][0])
        assert result.seq_len == len(ids), result.sample.location
        assert sum(result.image_tokens) == ids.count(processor.image_token_id), result.sample.location
        assert ids.count(processor.image_end_token_id) == len(result.image_tokens)
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("folder", [PIXTRAL, MISTRAL3], ids=lambda p: p.name)
def test_exact_mode_agrees_with_the_header_path(folder):
    dataset = str(DATASETS / "llava")
    fast = Scanner(ScanConfig(dataset=dataset, model=str(folder)))
    exact = Scanner(ScanConfig(dataset=dataset, model=str(folder), exact=True), model=fast.model)
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        keys = ("resized_width", "resized_height", "grid", "tokens", "error_code")
        assert [[getattr(i, k) for k in keys] for i in a.result.images] == [
            [getattr(i, k) for k in keys] for i in b.result.images
        ], a.result.sample.location
        assert a.result.seq_len == b.result.seq_len
        assert [f.code for f in a.findings] == [f.code for f in b.findings]


@pytest.mark.parametrize("init_kwargs", [{"size": {"longest_edge": 64}}, {"do_resize": False}])
def test_tokenizer_init_kwargs_beat_the_image_processor(init_kwargs):
    """ProcessorMixin._merge_kwargs: image kwargs in the tokenizer's init kwargs (tokenizer_config.json)
    override the image processor's own."""
    from transformers import AutoImageProcessor, AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(PIXTRAL, **init_kwargs)
        image_processor = AutoImageProcessor.from_pretrained(PIXTRAL)
    processor = real_pixtral_processor_class()(image_processor=image_processor, tokenizer=tok, patch_size=16)
    without = pixtral.settings_from(image_processor, {"patch_size": 16}, {})
    for height, width in [(100, 100), (300, 700), (1080, 1920)]:
        assert_same(processor, height, width)
        # _get_num_multimodal_tokens merges kwargs without the tokenizer's init kwargs (and always resizes)
        helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])["num_image_tokens"]
        unaware = pixtral.count(height, width, without)
        assert helper == [unaware.tokens + (0 if HELPER_COUNTS_RUN_ONLY else unaware.grid[0])]
    assert pixtral.count(300, 700, ours(processor)) != pixtral.count(300, 700, without)  # so they disagree
