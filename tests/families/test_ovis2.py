"""Differential tests: vlmlint's Ovis2 count and expansion against the real Ovis2Processor.

The real side is transformers' own code: get_min_tile_covering_grid and get_optimal_tiled_canvas of
image_processing_pil_ovis2, Ovis2ImageProcessorPil's preprocess (its grids) and Ovis2Processor built from
the fixture folder (fixtures/support.py's real_processor). Counts are <IMG_ATOM> ids in input_ids (the
model's image_token_id) and the <IMG_START> / <IMG_GRID> / <IMG_COL> / <IMG_ROW> / <IMG_END> ids.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from tests.families._releases import needs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import Run, load_model, ovis2
from vlmlint.models.base import Knob
from vlmlint.models.registry import knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "ovis2-2b-hf"
HUB = ovis2.Ovis2Settings()  # the converter's settings (fixtures/families/ovis2.py)
MARKERS = (ovis2.START, ovis2.GRID, ovis2.COL, ovis2.ROW, ovis2.END)


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def image_processor(processor):
    return processor.image_processor


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def call(processor, text: str, images: list, **kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return processor(text=[text], images=images, return_tensors="np", **kwargs)


def real_grid(height: int, width: int, s: ovis2.Ovis2Settings) -> tuple[int, int]:
    """(rows, cols) as crop_image_to_patches derives them, from transformers' own grid functions."""
    from transformers.models.ovis2 import image_processing_pil_ovis2 as real

    if not (s.crop_to_patches and s.max_patches > 1):
        return (1, 1)
    if s.use_covering_area_grid:
        columns, rows = real.get_min_tile_covering_grid((height, width), s.tile_height, s.max_patches)
    else:
        columns, rows = real.get_optimal_tiled_canvas(
            (height, width), (s.tile_height, s.tile_width), s.min_patches, s.max_patches
        )
    return (rows, columns)


def real_pipeline(processor, height: int, width: int, **kwargs) -> dict:
    output = call(processor, "<image>\nhi", [image(height, width)], **kwargs)
    ids = list(output["input_ids"][0])
    tokenizer = processor.tokenizer
    grids = processor.image_processor([image(height, width)], **kwargs)["grids"]
    return {
        "atoms": ids.count(tokenizer.convert_tokens_to_ids(ovis2.ATOM)),
        "markers": {m: ids.count(tokenizer.convert_tokens_to_ids(m)) for m in MARKERS},
        "grid": tuple(int(v) for v in grids[0]),
    }


def assert_count_matches_pipeline(processor, height: int, width: int, s, **kwargs) -> None:
    real = real_pipeline(processor, height, width, **kwargs)
    got = ovis2.count(height, width, s)
    assert got.tokens == real["atoms"], (height, width, s)
    assert got.grid == real["grid"]
    rows, cols = got.grid
    tiled = rows * cols > 1
    assert real["markers"] == {
        ovis2.START: 1,
        ovis2.GRID: 1,
        ovis2.COL: rows * (cols - 1) if tiled else 0,
        ovis2.ROW: rows - 1 if tiled else 0,
        ovis2.END: 1,
    }


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_ovis2_and_reads_the_settings():
    model = load_model(str(FOLDER))
    assert model.family is ovis2.FAMILY
    assert model.counted_by() == "formula (family ovis2)"
    assert model.settings == HUB
    assert model.family.placeholder == "<image>"
    assert model.max_position_embeddings == 32768
    assert model.family.position_span is None


def _copy(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(FOLDER, folder)
    return folder


def _edit(path, **values):
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def test_the_files_settings_change_the_count(tmp_path):
    folder = _copy(tmp_path, "ovis2-small")
    _edit(folder / "preprocessor_config.json", max_patches=4, size={"height": 384, "width": 384})
    _edit(folder / "processor_config.json", image_seq_length=64)
    model = load_model(str(folder))
    assert (model.settings.max_patches, model.settings.tile_height, model.settings.image_seq_length) == (
        4,
        384,
        64,
    )
    processor = harness.real_processor(folder)
    mine = ovis2.count(1080, 1920, model.settings)
    assert real_pipeline(processor, 1080, 1920)["atoms"] == mine.tokens != ovis2.count(1080, 1920, HUB).tokens


def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path):
    folder = _copy(tmp_path, "ovis2-kwargs")
    _edit(folder / "tokenizer_config.json", max_patches=3, use_covering_area_grid=False)
    model = load_model(str(folder))
    assert model.image_processor.max_patches == 12
    assert (model.settings.max_patches, model.settings.use_covering_area_grid) == (3, False)
    processor = harness.real_processor(folder)
    for height, width in [(1080, 1920), (300, 1000), (1000, 1000)]:
        assert (
            real_pipeline(processor, height, width)["atoms"]
            == ovis2.count(height, width, model.settings).tokens
        )


# -- the grid ------------------------------------------------------------------------------------

GRID_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 100000),
    (3, 7),
    (448, 448),
    (449, 448),
    (448, 897),
    (500, 1000),
    (1000, 500),
    (896, 896),
    (1080, 1920),
    (3000, 4000),
    (8000, 8000),
    (100, 5000),
    (403, 1),  # under 0.9 of the tile: one tile covers it
    (410, 1000),
]


@pytest.mark.parametrize("height,width", GRID_EDGES)
@pytest.mark.parametrize("covering", [True, False])
@pytest.mark.parametrize("max_patches", [1, 2, 6, 12, 36])
def test_grid_edges_match_the_real_functions(height, width, covering, max_patches):
    s = dataclasses.replace(HUB, use_covering_area_grid=covering, max_patches=max_patches)
    assert ovis2.tile_grid(height, width, s) == real_grid(height, width, s)


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 12000),
    width=st.integers(1, 12000),
    max_patches=st.integers(1, 30),
    min_patches=st.integers(1, 4),
    side=st.sampled_from([224, 384, 448]),
    covering=st.booleans(),
)
@example(height=1, width=12000, max_patches=12, min_patches=1, side=448, covering=True)
def test_grids_match_the_real_functions_for_any_settings(
    height, width, max_patches, min_patches, side, covering
):
    s = ovis2.Ovis2Settings(
        tile_height=side, tile_width=side, max_patches=max_patches,
        min_patches=min(min_patches, max_patches), use_covering_area_grid=covering,
    )  # fmt: skip
    assert ovis2.tile_grid(height, width, s) == real_grid(height, width, s)


def test_the_edges_reach_each_branch():
    """One tile (no thumbnail, 256), tiled (thumbnail + tiles), the uncovered fallback, the swapped pair."""
    assert ovis2.count(1, 1, HUB) == ovis2.ImageCount(448, 448, (1, 1), 256)
    assert ovis2.count(1080, 1920, HUB) == ovis2.ImageCount(1792, 1344, (4, 3), 256 * 13)
    # a wide image gets more rows than columns: get_min_tile_covering_grid's (rows, cols) pair is
    # read back as (columns, rows) by crop_image_to_patches
    assert ovis2.count(500, 1000, HUB).grid == (3, 2)
    assert ovis2.count(1, 100000, HUB).grid[0] * ovis2.count(1, 100000, HUB).grid[1] <= 12
    assert ovis2.count(1000, 1000, dataclasses.replace(HUB, crop_to_patches=False)).tokens == 256


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [(1, 1), (1, 4000), (4000, 1), (3, 7), (448, 448), (449, 448), (500, 1000), (1000, 500),
                  (1080, 1920), (100, 5000), (410, 1000)]  # fmt: skip


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"crop_to_patches": False},
        {"max_patches": 1},
        {"max_patches": 4},
        {"use_covering_area_grid": False},
        {"use_covering_area_grid": False, "min_patches": 3, "max_patches": 9},
        {"size": {"height": 224, "width": 224}},
    ],
)
@pytest.mark.parametrize("height,width", [(1, 1), (700, 1300), (1080, 1920), (2000, 300)])
def test_pipeline_with_call_kwargs(processor, height, width, kwargs):
    changes = dict(kwargs)
    if "size" in changes:
        size = changes.pop("size")
        changes.update(tile_height=size["height"], tile_width=size["width"])
    assert_count_matches_pipeline(processor, height, width, dataclasses.replace(HUB, **changes), **kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400),
    width=st.integers(1, 1400),
    max_patches=st.integers(1, 12),
    covering=st.booleans(),
)
def test_random_sizes_match_the_pipeline(processor, height, width, max_patches, covering):
    s = dataclasses.replace(HUB, max_patches=max_patches, use_covering_area_grid=covering)
    assert_count_matches_pipeline(
        processor, height, width, s, max_patches=max_patches, use_covering_area_grid=covering
    )


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (1080, 1920), (1, 4000)])
def test_count_exact_matches_count(height, width):
    model = load_model(str(FOLDER))
    images = [image(height, width), image(width, height)]
    exact = ovis2.count_exact(model.image_processor, images, model.settings)
    assert exact == [ovis2.count(height, width, model.settings), ovis2.count(width, height, model.settings)]


# -- expansion and whole prompts -----------------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


@pytest.mark.parametrize("grid", [(1, 1), (1, 2), (2, 1), (3, 2), (4, 3)])
def test_expand_is_the_processors_replacement(processor, grid):
    import numpy as np

    count = ovis2.ImageCount(448, 448, grid, 0)
    assert expanded(ovis2.expand(count, HUB)) == needs(processor, "replace_image_token")(
        {"grids": np.array([grid])}, 0
    )


def conversation(n_images: int, text: str, answer: str = "It is a picture.") -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    return [
        {"role": "user", "content": content},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


@pytest.mark.parametrize(
    "sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (448, 448)], [(1080, 1920), (1, 4000)], [(640, 480)] * 3]
)
@pytest.mark.parametrize("text", ["Describe this image.", "  What is here?\n"])
def test_whole_prompt_input_ids_match_the_processor(processor, sizes, text):
    scanner = Scanner(ScanConfig(dataset="", model=str(FOLDER)))
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    answer = Message(Role.ASSISTANT, (Part(text="It is a picture."),))
    rendered = scanner.render((Message(Role.USER, parts), answer))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text), tokenize=False)
    counts = [ovis2.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    ids = list(call(processor, rendered, [image(h, w) for h, w in sizes])["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    full = rendered
    for count in counts:
        full = full.replace("<image>", expanded(ovis2.expand(count, scanner.model.settings)), 1)
    assert scanner.model.tokenizer(full)["input_ids"] == ids


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built("ovis2", FOLDER, "Ovis2Processor", "<image>", ovis2.ATOM, 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids(ovis2.ATOM)
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob -------------------------------------------------------------------------------


def test_the_knob_is_max_patches():
    knob = knob_for(ovis2.FAMILY, HUB)
    assert isinstance(knob, Knob) and knob.name == "max_patches" and knob.current == 12
    assert knob.shape(1, 1) == ((), 1)
    assert "crop_to_patches is off" in knob_for(ovis2.FAMILY, dataclasses.replace(HUB, crop_to_patches=False))
    assert "use_covering_area_grid is off" in knob_for(
        ovis2.FAMILY, dataclasses.replace(HUB, use_covering_area_grid=False)
    )


@settings(max_examples=100, deadline=None)
@given(height=st.integers(1, 3000), width=st.integers(1, 3000))
@example(height=1, width=3000)
def test_tokens_never_drop_as_max_patches_grows_and_settle_at_the_saturation(height, width):
    _, saturation = knob_for(ovis2.FAMILY, HUB).shape(height, width)
    tokens = [
        ovis2.count(height, width, dataclasses.replace(HUB, max_patches=v)).tokens
        for v in range(1, saturation + 4)
    ]
    assert tokens == sorted(tokens)
    assert len(set(tokens[saturation - 1 :])) == 1
