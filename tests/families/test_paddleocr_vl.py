"""PaddleOCR-VL (PaddleOCRVLProcessor): vlmlint's formula against the real classes.

The fixture folder (fixtures/families/paddleocr_vl.py) holds the hub's image settings (legacy
min_pixels 147384 / max_pixels 2822400, patch 14, merge 2) and the checkpoint's chat template.
"""

from __future__ import annotations

import inspect
import json
import shutil
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from tests.families._releases import needs, records
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, load_model, paddleocr_vl, qwen_vl
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "paddleocr-vl"
HUB = paddleocr_vl.PaddleSettings(min_pixels=147384, max_pixels=2822400)
TOKEN = "<|IMAGE_PLACEHOLDER|>"


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: paddleocr_vl.PaddleSettings) -> tuple[int, int] | str:
    from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import smart_resize

    try:
        return smart_resize(height, width, factor=s.factor, min_pixels=s.min_pixels, max_pixels=s.max_pixels)
    except ValueError as exc:
        return str(exc)


def mine(height: int, width: int, s: paddleocr_vl.PaddleSettings) -> tuple[int, int] | str:
    try:
        got = paddleocr_vl.count(height, width, s)
    except CountError as exc:
        return str(exc)
    return got.resized_height, got.resized_width


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    tokenizer = processor.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[TOKEN], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "tokens": ids.count(tokenizer.convert_tokens_to_ids(TOKEN)),
        "length": len(ids),
        "grid": tuple(int(v) for v in output["image_grid_thw"][0]),
    }


def assert_count_matches_pipeline(
    processor, height: int, width: int, s: paddleocr_vl.PaddleSettings, **kw
) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = paddleocr_vl.count(height, width, s)
    assert got.tokens == real["tokens"] == real["length"], (height, width, s)
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == (real["grid"][1] * 14, real["grid"][2] * 14)


# -- settings ------------------------------------------------------------------------------------


def test_load_model_reads_the_legacy_pixel_keys_as_the_image_processor_folds_them():
    model = load_model(str(FOLDER))
    assert model.family is paddleocr_vl.FAMILY is family_for_class("PaddleOCRVLProcessor")
    assert model.counted_by() == "formula (family paddleocr_vl)"
    assert model.image_processor.size.shortest_edge == 147384
    assert model.settings == HUB
    assert model.family.placeholder == TOKEN
    assert model.family.raw_image_prompt == "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
    assert model.max_position_embeddings == 131072


@records(
    "5.24.0",
    "up to 5.8.0 PaddleOCRVLImageProcessorPil.__init__ writes min_pixels / max_pixels into the class's own size dict, so an earlier load in the process changes the 'class default' (5.2x copies it)",
)
def test_class_defaults_where_the_files_say_nothing(tmp_path):
    folder = tmp_path / "paddle-defaults"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    del config["min_pixels"], config["max_pixels"]
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert (model.settings.min_pixels, model.settings.max_pixels) == (384 * 384, 1536 * 1536)
    processor = harness.real_processor(folder)
    assert (
        real_pipeline(processor, 3000, 4000)["tokens"]
        == paddleocr_vl.count(3000, 4000, model.settings).tokens
    )


def test_a_changed_preprocessor_config_changes_the_count(tmp_path):
    folder = tmp_path / "paddle-small"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["max_pixels"] = 28 * 28 * 64
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings.max_pixels == 50176
    processor = harness.real_processor(folder)
    assert (
        real_pipeline(processor, 1080, 1920)["tokens"]
        == paddleocr_vl.count(1080, 1920, model.settings).tokens
        == 60
    )
    assert paddleocr_vl.count(1080, 1920, HUB).tokens == 2691


@records(
    "5.24.0",
    "up to 5.8.0 PaddleOCRVLImageProcessorPil writes min_pixels / max_pixels into the class's own size dict, so the real side depends on what the process loaded before (5.2x copies it)",
)
@pytest.mark.parametrize(
    "extra",
    [
        {"min_pixels": 500000},
        {"max_pixels": 100000},
        {"size": {"shortest_edge": 3136, "longest_edge": 78400}},
    ],
)
def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path, extra):
    folder = tmp_path / "paddle-tokenizer"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(extra)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings != HUB
    processor = harness.real_processor(folder)
    for height, width in [(600, 800), (20, 20), (1000, 3000), (3000, 4000)]:
        assert (
            real_pipeline(processor, height, width)["tokens"]
            == paddleocr_vl.count(height, width, model.settings).tokens
        )


def test_a_tokenizer_without_image_token_is_refused_as_the_processor_refuses(tmp_path):
    folder = tmp_path / "paddle-no-token"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["extra_special_tokens"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(AttributeError):
        harness.real_processor(folder)
    with pytest.raises(ModelError, match="no image_token"):
        load_model(str(folder))


# -- the resize ----------------------------------------------------------------------------------

SIZE_EDGES = [
    (1, 1),  # lifted to 28 x 28, enlarged to 392 x 392
    (1, 200),  # lifted to 28 x 5600: ratio 200, allowed
    (1, 201),  # 28 x 5628: refused
    (1, 4000),
    (20, 20),
    (8, 1),  # width 3.5 -> 4 (half to even), then under 28: height round(28 * 28 / 4)
    (8, 3),  # width 10.5 -> 10, then height round(78.4) = 78
    (3, 8),
    (27, 10),  # both lifted, the second from the first's result
    (10, 27),
    (27, 1000),
    (20, 4000),  # lifted to 28 x 5600
    (21, 4000),  # 28 x 5333
    (42, 42),  # no lift; round(1.5) = 2, enlarged
    (70, 70),  # round(2.5) = 2
    (1680, 1680),  # exactly 2822400: kept
    (1680, 1700),  # over: shrunk
    (3000, 4000),
    (8000, 8000),
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
def test_size_edges_match_the_real_function(height, width):
    assert mine(height, width, HUB) == real_size(height, width, HUB)
    assert mine(width, height, HUB) == real_size(width, height, HUB)


def test_after_the_lift_the_resize_is_qwen_vls_function():
    """The module's claim that lets it reuse qwen_vl.smart_resize: past the lift, the same source, in the
    PIL and the torchvision image processor."""
    from pathlib import Path

    from transformers.models.paddleocr_vl import image_processing_pil_paddleocr_vl as pil
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as qwen

    def body_from_the_ratio_check(function) -> str:
        source = inspect.getsource(function)
        return source[source.index("    if max(height, width) / min(height, width) > 200:") :]

    assert body_from_the_ratio_check(pil.smart_resize) == body_from_the_ratio_check(qwen.smart_resize)
    # the torchvision module needs torchvision to import: its text holds the same function
    torchvision_source = (Path(pil.__file__).parent / "image_processing_paddleocr_vl.py").read_text()
    assert inspect.getsource(pil.smart_resize) in torchvision_source


def test_the_edges_reach_each_branch():
    assert paddleocr_vl.count(1, 1, HUB) == paddleocr_vl.ImageCount(392, 392, (1, 28, 28), 196)
    assert paddleocr_vl.lift(8, 1, 28) == (196, 28)
    assert paddleocr_vl.lift(27, 10, 28) == (78, 28)
    assert mine(1680, 1680, HUB) == (1680, 1680)
    assert mine(1680, 1700, HUB) == (1652, 1680)
    with pytest.raises(CountError, match="absolute aspect ratio must be smaller than 200, got 201.0"):
        paddleocr_vl.count(1, 201, HUB)


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    patch_size=st.sampled_from([7, 14, 16]),
    merge_size=st.integers(1, 3),
    min_pixels=st.integers(1, 400_000),
    max_pixels=st.integers(1, 20_000_000),
)
@example(height=8, width=1, patch_size=14, merge_size=2, min_pixels=147384, max_pixels=2822400)
@example(height=27, width=10, patch_size=14, merge_size=2, min_pixels=147384, max_pixels=2822400)
def test_size_matches_the_real_function_for_any_settings(
    height, width, patch_size, merge_size, min_pixels, max_pixels
):
    s = paddleocr_vl.PaddleSettings(
        patch_size=patch_size, merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels
    )
    assert mine(height, width, s) == real_size(height, width, s)


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 60), width=st.integers(1, 6000))
def test_lifted_sides_match_the_real_function(height, width):
    assert mine(height, width, HUB) == real_size(height, width, HUB)
    assert mine(width, height, HUB) == real_size(width, height, HUB)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 200),
    (8, 1),
    (8, 3),
    (27, 10),
    (20, 4000),
    (42, 42),
    (1680, 1680),
    (1680, 1700),
    (480, 640),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)
    assert_count_matches_pipeline(processor, width, height, HUB)


@pytest.mark.parametrize("height,width", [(1, 4000), (4000, 1), (1, 201), (21, 4300)])
def test_extreme_aspect_ratios_are_refused_with_the_processors_message(processor, height, width):
    with pytest.raises(ValueError, match="absolute aspect ratio") as real:
        real_pipeline(processor, height, width)
    with pytest.raises(CountError) as got:
        paddleocr_vl.count(height, width, HUB)
    assert str(got.value) == str(real.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400), width=st.integers(1, 1400), longest=st.sampled_from([50176, 501760, 2822400])
)
def test_random_sizes_match_the_pipeline(processor, height, width, longest):
    s = paddleocr_vl.PaddleSettings(min_pixels=147384, max_pixels=longest)
    if isinstance(mine(height, width, s), str):
        return
    assert_count_matches_pipeline(
        processor, height, width, s, size={"shortest_edge": 147384, "longest_edge": longest}
    )


@pytest.mark.parametrize("height,width", [(56, 84), (42, 42), (14, 14), (28, 70)])
def test_without_resize_whole_patches_are_counted_rounding_down(processor, height, width):
    """patchify cuts whole patches only; replace_image_token floors grid_h * grid_w / merge^2."""
    assert_count_matches_pipeline(
        processor, height, width, paddleocr_vl.PaddleSettings(do_resize=False), do_resize=False
    )


@pytest.mark.parametrize("height,width", [(42, 50), (15, 28), (1, 1)])
def test_without_resize_partial_patches_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        real_pipeline(processor, height, width, do_resize=False)
    with pytest.raises(CountError, match="not whole 14-px patches"):
        paddleocr_vl.count(height, width, paddleocr_vl.PaddleSettings(do_resize=False))


def test_count_exact_matches_count():
    model = load_model(str(FOLDER))
    sizes = [(1, 1), (8, 3), (300, 1000), (1680, 1700), (20, 4000)]
    exact = paddleocr_vl.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [paddleocr_vl.count(h, w, model.settings) for h, w in sizes]
    with pytest.raises(CountError, match="absolute aspect ratio"):
        paddleocr_vl.count_exact(model.image_processor, [image(1, 4000)], model.settings)


@records(
    "5.24.0",
    "5.5.0's and 5.8.0's get_number_of_image_patches(height, width) reads images_kwargs=None: TypeError",
)
def test_transformers_helper_agrees(processor):
    sizes = [(1, 1), (480, 640), (8, 3), (3000, 4000), (20, 4000)]
    helper = processor.image_processor.get_number_of_image_patches
    assert [helper(h, w) // 4 for h, w in sizes] == [paddleocr_vl.count(h, w, HUB).tokens for h, w in sizes]


# -- expansion, positions and whole prompts -------------------------------------------------------


@pytest.mark.parametrize("grid", [(1, 28, 28), (1, 34, 46), (1, 3, 3)])
def test_expand_is_the_processors_replacement(processor, grid):
    count = paddleocr_vl.ImageCount(grid[1] * 14, grid[2] * 14, grid, grid[1] * grid[2] // 4)
    assert paddleocr_vl.expand(count, HUB) == (Run(TOKEN, count.tokens),)
    assert TOKEN * count.tokens == needs(processor, "replace_image_token")(
        {"image_grid_thw": np.array([grid])}, 0
    )


@pytest.mark.parametrize("sizes", [[(1080, 1920)], [(1, 200), (600, 400)]])
def test_position_span_matches_get_rope_index(processor, sizes):
    """PaddleOCRVLModel.get_rope_index on the processor's own ids (where torch is: the reference venv)."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.paddleocr_vl.modeling_paddleocr_vl import PaddleOCRVLModel

    text = (
        "<|begin_of_sentence|>User: "
        + ("<|IMAGE_START|>" + TOKEN + "<|IMAGE_END|>") * len(sizes)
        + "OCR:\nAssistant: "
    )
    output = processor(text=[text], images=[image(h, w) for h, w in sizes], return_tensors="pt")
    stub = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2)))
    stub.get_vision_position_ids = lambda *a, **k: PaddleOCRVLModel.get_vision_position_ids(stub, *a, **k)
    positions, _ = PaddleOCRVLModel.get_rope_index(
        stub, output["input_ids"], output["mm_token_type_ids"], image_grid_thw=output["image_grid_thw"]
    )
    counts = [paddleocr_vl.count(h, w, HUB) for h, w in sizes]
    spans = sum(paddleocr_vl.position_span(c, HUB) for c in counts)
    assert int(positions.max()) == output["input_ids"].shape[1] - sum(c.tokens for c in counts) + spans - 1


def conversation(n_images: int, text: str, system: str | None) -> list:
    content = [{"type": "text", "text": text}] + [{"type": "image"} for _ in range(n_images)]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Some text."}]})
    return messages


@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (8, 3)], [(640, 480)] * 3])
@pytest.mark.parametrize("system", [None, "Read it."])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes, system):
    """The checkpoint's template (images before texts, the tokenizer's image_token in place of its
    default start/placeholder/end) rendered by vlmlint and by the processor, then composed and
    tokenized: the same input_ids length and ids as processor(text, images)."""
    text = "OCR:"
    parts = (Part(text=text),) + tuple(Part(is_image=True) for _ in sizes)
    messages = [Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="Some text."),))]
    if system is not None:
        messages.insert(0, Message(Role.SYSTEM, (Part(text=system),)))
    rendered = scanner.render(tuple(messages))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text, system), tokenize=False)
    assert rendered.count(TOKEN) == len(sizes) and "User: " + TOKEN * len(sizes) + "OCR:\n" in rendered
    counts = [paddleocr_vl.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    tokenizer = processor.tokenizer
    assert ids.count(tokenizer.convert_tokens_to_ids(TOKEN)) == sum(c.tokens for c in counts)
    full = rendered
    for count in counts:
        full = full.replace(TOKEN, "\0" * count.tokens, 1)
    assert scanner.model.tokenizer(full.replace("\0", TOKEN))["input_ids"] == ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|begin_of_sentence|>")


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built("paddleocr_vl", FOLDER, "PaddleOCRVLProcessor", TOKEN, TOKEN, 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids(TOKEN)
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob and the shrink hint -------------------------------------------------------------


def test_size_knob_is_qwen_vls_after_the_lift():
    knob = knob_for("paddleocr_vl", HUB)
    assert isinstance(knob, Knob)
    assert (knob.name, knob.current, knob.step) == ("max_pixels", 2822400, 784)
    assert knob.shape(1080, 1920) == qwen_vl.size_knob(HUB).shape(1080, 1920)
    assert knob.shape(20, 4000) == ((28 * 5600,), 28 * 5600)  # lifted to 28 x 5600 first


@settings(max_examples=80, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    steps=st.lists(st.integers(1, 4000), min_size=2, max_size=6),
)
def test_size_knob_counts_never_drop_below_the_saturation_and_stay_above(height, width, steps):
    knob = paddleocr_vl.size_knob(HUB)
    if isinstance(mine(height, width, HUB), str):
        return
    drops, saturation = knob.shape(height, width)
    values = sorted({max(knob.low, v * knob.step) for v in steps})
    tokens = [paddleocr_vl.count(height, width, knob.settings_at(v)).tokens for v in values if v < min(drops)]
    assert tokens == sorted(tokens)
    at = paddleocr_vl.count(height, width, knob.settings_at(saturation)).tokens
    for v in (saturation + knob.step, saturation * 4):
        assert paddleocr_vl.count(height, width, knob.settings_at(v)).tokens == at


@pytest.mark.parametrize("height,width,limit", [(3000, 4000, 2.0), (8000, 8000, 4.0), (20, 4000, 1.0)])
def test_shrink_hint_names_a_bound_that_keeps_the_shrink_within_the_limit(height, width, limit):
    hint = paddleocr_vl.shrink_hint(height, width, limit, HUB)
    assert hint is not None and hint.startswith("set max_pixels >= ")
    value = int(hint.split(">= ")[1].split(" ")[0])
    h, w = mine(height, width, paddleocr_vl.PaddleSettings(min_pixels=147384, max_pixels=value))
    assert h * w * limit >= height * width
