"""Granite 4 Vision (Granite4VisionProcessor): vlmlint's formula against the real classes.

The fixture folder (fixtures/families/granite4_vision.py) holds the checkpoint's pinpoints, patch size 16
and downsample_rate "4/8" on LLaVA-NeXT's image processor (384-px base patch).
"""

from __future__ import annotations

import inspect
import json
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, granite4_vision, llava_next, load_model
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "granite-vision-4.1-4b"
TOKEN = "<image>"


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_tokens(processor, height: int, width: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[TOKEN], images=[image(height, width)])
    ids = list(output["input_ids"][0])
    assert len(ids) == ids.count(processor.image_token_id)
    return len(ids)


def copy_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(FOLDER, folder)
    return folder


def edit_json(folder: Path, filename: str, edit) -> None:
    config = json.loads((folder / filename).read_text())
    edit(config)
    (folder / filename).write_text(json.dumps(config))


# -- settings ------------------------------------------------------------------------------------


def test_load_model_reads_the_processor_files(model):
    assert model.family is granite4_vision.FAMILY is family_for_class("Granite4VisionProcessor")
    assert model.counted_by() == "formula (family granite4_vision)"
    s = model.settings
    assert (s.patch_size, s.downsample_rate, s.vision_feature_select_strategy) == (16, "4/8", "full")
    assert len(s.image_grid_pinpoints) == 27 and s.crop_size.height == 384
    assert model.max_position_embeddings == 131072
    # LLaVA-NeXT's image processor is shared: the processor class decides, never the image processor type
    assert family_for_class("LlavaNextProcessor") is llava_next.FAMILY
    assert isinstance(knob_for("granite4_vision", s), str)


@pytest.mark.parametrize(
    "change",
    [
        {"downsample_rate": "1/2"},  # the same rate written otherwise
        {"downsample_rate": "3/8"},
        {"downsample_rate": None},
        {"vision_feature_select_strategy": "default"},
        {"num_additional_image_tokens": 1},
    ],
)
def test_processor_config_settings_change_the_count_as_the_processor(tmp_path, change):
    folder = copy_folder(tmp_path, "granite-changed")
    edit_json(folder, "processor_config.json", lambda c: c.update(change))
    model = load_model(str(folder))
    processor = harness.real_processor(folder)
    for height, width in [(480, 640), (1, 1), (100, 3000), (1500, 900)]:
        assert (
            real_tokens(processor, height, width)
            == granite4_vision.count(height, width, model.settings).tokens
        )


def test_the_downsample_rate_scales_the_grid_before_the_unpadding(model):
    plain = granite4_vision.dataclasses.replace(model.settings, downsample_rate=None)
    assert granite4_vision.count(1, 1, plain).tokens == 24 * 24 + 24 + 24 * 24  # 384 px / 16: 24 x 24
    assert granite4_vision.count(1, 1, model.settings).tokens == 12 * 12 + 12 + 12 * 12  # x 4/8


def test_a_processor_without_patch_size_is_refused(tmp_path):
    folder = copy_folder(tmp_path, "granite-no-patch")
    edit_json(folder, "processor_config.json", lambda c: c.pop("patch_size"))
    with pytest.raises(ModelError, match="no patch_size"):
        load_model(str(folder))


def test_a_downsample_rate_that_is_no_fraction_is_refused(tmp_path):
    folder = copy_folder(tmp_path, "granite-bad-rate")
    edit_json(folder, "processor_config.json", lambda c: c.update(downsample_rate="half"))
    with pytest.raises(ModelError, match="downsample_rate must be a fraction"):
        load_model(str(folder))
    processor = harness.real_processor(folder)
    with pytest.raises(ValueError):
        real_tokens(processor, 64, 64)


# -- the count -----------------------------------------------------------------------------------


def test_the_shared_arithmetic_is_llava_nexts():
    """The module reuses llava_next's unpadding because the two processors' sources are the same."""
    from transformers.models.granite4_vision.processing_granite4_vision import Granite4VisionProcessor
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    def source(cls) -> str:
        return inspect.getsource(cls._get_unpadded_features)

    assert source(Granite4VisionProcessor) == source(LlavaNextProcessor)


EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (384, 384),  # one pinpoint exactly
    (384, 385),
    (383, 3840),  # the longest pinpoint
    (100, 3000),
    (1152, 1152),
    (1153, 1152),
    (768, 1920),
    (480, 640),
    (2, 3),
    (3000, 4000),  # capped at the largest pinpoints
]


@pytest.mark.parametrize("height,width", EDGES)
def test_edges_match_the_pipeline(processor, model, height, width):
    assert (
        real_tokens(processor, height, width) == granite4_vision.count(height, width, model.settings).tokens
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(height=st.integers(1, 2000), width=st.integers(1, 2000))
@example(height=1, width=2000)
@example(height=2000, width=1)
def test_random_sizes_match_the_pipeline(processor, model, height, width):
    assert (
        real_tokens(processor, height, width) == granite4_vision.count(height, width, model.settings).tokens
    )


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    rate=st.sampled_from([None, "4/8", "3/8", "1/3", "2/3"]),
)
def test_features_match_the_processors_arithmetic_for_any_size(processor, model, height, width, rate):
    """_get_number_of_features on the 384-px base patch (no pixels: any size, any rate)."""
    s = granite4_vision.dataclasses.replace(model.settings, downsample_rate=rate)
    processor.downsample_rate = rate
    try:
        real = processor._get_number_of_features(height, width, 384, 384)
    finally:
        processor.downsample_rate = model.settings.downsample_rate
    assert granite4_vision.features(height, width, 384, 384, s).tokens == real


def test_transformers_helper_agrees(processor, model):
    sizes = [(1, 1), (480, 640), (8, 3), (3000, 4000), (20, 4000)]
    got = processor._get_num_multimodal_tokens(image_sizes=sizes)["num_image_tokens"]
    assert got == [granite4_vision.count(h, w, model.settings).tokens for h, w in sizes]


def test_count_exact_matches_count(model):
    sizes = [(1, 1), (8, 3), (300, 1000), (1200, 700), (20, 4000)]
    images = [image(h, w) for h, w in sizes]
    exact = granite4_vision.count_exact(model.image_processor, images, model.settings)
    assert exact == [granite4_vision.count(h, w, model.settings) for h, w in sizes]


def test_a_zero_side_is_refused(model):
    with pytest.raises(CountError):
        granite4_vision.count(0, 10, model.settings)


# -- expansion and whole prompts -------------------------------------------------------------------


def test_expand_is_the_image_token_only(model):
    count = granite4_vision.count(480, 640, model.settings)
    assert granite4_vision.expand(count, model.settings) == (Run(TOKEN, count.tokens),)


@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (8, 3)]])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes):
    text = "Convert the table."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = (Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="Some text."),)))
    rendered = scanner.render(messages)
    conversation = [
        {"role": "user", "content": [{"type": "image"} for _ in sizes] + [{"type": "text", "text": text}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Some text."}]},
    ]
    assert rendered == processor.apply_chat_template(conversation, tokenize=False)
    counts = [granite4_vision.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    assert ids.count(processor.image_token_id) == sum(c.tokens for c in counts)


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built("granite4_vision", FOLDER, "Granite4VisionProcessor", TOKEN, TOKEN, 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.image_token_id
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)
