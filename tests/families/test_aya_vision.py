"""Aya Vision (AyaVisionProcessor): vlmlint's formula and expansion against the real classes.

The fixture folder (fixtures/families/aya_vision.py): GotOcr2 364-px tiles (1..12), 169 <|IMG_PATCH|> per
tile (img_size 364, patch 14 x downsample 2), Cohere's turn format.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from tests.families._releases import needs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import Run, aya_vision, load_model
from vlmlint.models.registry import family_for_class
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "aya-vision-8b"


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


def real_patch_tokens(processor, height: int, width: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=["<image>"], images=[image(height, width)])
    return list(output["input_ids"][0]).count(processor.image_token_id)


def copy_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(FOLDER, folder)
    return folder


def edit_json(folder: Path, filename: str, edit) -> None:
    config = json.loads((folder / filename).read_text())
    edit(config)
    (folder / filename).write_text(json.dumps(config))


def test_load_model_reads_the_processor_files(model):
    assert model.family is aya_vision.FAMILY is family_for_class("AyaVisionProcessor")
    assert model.counted_by() == "formula (family aya_vision)"
    s = model.settings
    assert (s.tile_height, s.min_patches, s.max_patches, s.crop_to_patches, s.patches_per_tile) == (
        364, 1, 12, True, 169
    )  # fmt: skip
    assert model.max_position_embeddings == 16384


@pytest.mark.parametrize(
    "where,change",
    [
        ("preprocessor_config.json", {"max_patches": 4}),
        ("preprocessor_config.json", {"max_patches": 1}),
        ("preprocessor_config.json", {"min_patches": 3}),
        ("processor_config.json", {"downsample_factor": 1}),
        ("processor_config.json", {"img_size": 392}),
        ("tokenizer_config.json", {"crop_to_patches": False}),
        ("tokenizer_config.json", {"max_patches": 6}),
    ],
)
def test_settings_from_the_files_change_the_count_as_the_processor(tmp_path, where, change):
    folder = copy_folder(tmp_path, "aya-changed")
    edit_json(folder, where, lambda c: c.update(change))
    model = load_model(str(folder))
    processor = harness.real_processor(folder)
    for height, width in [(480, 640), (1, 1), (100, 3000), (1500, 900)]:
        assert (
            real_patch_tokens(processor, height, width)
            == aya_vision.count(height, width, model.settings).tokens
        )


EDGES = [(1, 1), (1, 4000), (4000, 1), (364, 364), (364, 728), (365, 728), (364, 4368), (2, 3), (3000, 4000)]


@pytest.mark.parametrize("height,width", EDGES)
def test_edges_match_the_pipeline(processor, model, height, width):
    assert (
        real_patch_tokens(processor, height, width) == aya_vision.count(height, width, model.settings).tokens
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(height=st.integers(1, 2000), width=st.integers(1, 2000))
@example(height=1, width=2000)
def test_random_sizes_match_the_pipeline(processor, model, height, width):
    assert (
        real_patch_tokens(processor, height, width) == aya_vision.count(height, width, model.settings).tokens
    )


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 20000), width=st.integers(1, 20000), max_patches=st.integers(1, 16))
def test_num_patches_match_the_image_processor_for_any_size(processor, model, height, width, max_patches):
    s = replace(model.settings, max_patches=max_patches)
    real = processor.image_processor.get_number_of_image_patches(
        height, width, {"max_patches": max_patches, "crop_to_patches": True}
    )
    assert aya_vision.count(height, width, s).tokens == 169 * real


def _helper_counts_run_only() -> bool:
    """transformers 5.25 changed AyaVisionProcessor._get_num_multimodal_tokens (processing_aya_vision.py)
    from the whole span to the image-token run: 169 * tiles + 3 + (tiles - 1) became 169 * tiles, the
    <|IMG_PATCH|> ids vlmlint counts."""
    from packaging.version import Version

    from vlmlint.models import compat

    return Version(compat.transformers_version()) >= Version("5.25.0")


def test_transformers_helper_agrees(processor, model):
    sizes = [(1, 1), (480, 640), (8, 3), (3000, 4000), (20, 4000)]
    got = processor._get_num_multimodal_tokens(image_sizes=sizes)["num_image_tokens"]
    # the helper counts every image token (+3 start/global/end, +1 per tile tag; from 5.25 <|IMG_PATCH|>
    # only); vlmlint counts <|IMG_PATCH|>
    tiles = [aya_vision.count(h, w, model.settings).tokens // 169 for h, w in sizes]
    if _helper_counts_run_only():
        assert got == [169 * n for n in tiles]
    else:
        assert got == [169 * n + 3 + (n - 1) for n in tiles]


def test_count_exact_matches_count(model):
    sizes = [(1, 1), (8, 3), (300, 1000), (1200, 700), (20, 4000)]
    exact = aya_vision.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [aya_vision.count(h, w, model.settings) for h, w in sizes]


@pytest.mark.parametrize("num_patches", [1, 2, 5, 13])
def test_expand_is_the_processors_replacement(processor, model, num_patches):
    count = aya_vision.ImageCount(364, 364, (1, 1), 169 * num_patches)
    segments = aya_vision.expand(count, model.settings)
    text = "".join(s if isinstance(s, str) else s.token * s.count for s in segments)
    assert text == needs(processor, "replace_image_token")({"num_patches": np.array([num_patches])}, 0)
    assert sum(s.count for s in segments if isinstance(s, Run)) == count.tokens


@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (8, 3)]])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes):
    text = "Describe."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = (Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="Some text."),)))
    rendered = scanner.render(messages)
    conversation = [
        {"role": "user", "content": [{"type": "image"} for _ in sizes] + [{"type": "text", "text": text}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Some text."}]},
    ]
    assert rendered == processor.apply_chat_template(conversation, tokenize=False)
    counts = [aya_vision.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    assert ids.count(processor.image_token_id) == sum(c.tokens for c in counts)


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built("aya_vision", FOLDER, "AyaVisionProcessor", "<image>", "<|IMG_PATCH|>", 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.image_token_id
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)
