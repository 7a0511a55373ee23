"""ERNIE 4.5 VL (Ernie4_5_VLMoeProcessor): vlmlint's formula against the real classes.

The fixture folder (fixtures/families/ernie_vl.py) holds the settings transformers' converter writes for
baidu/ERNIE-4.5-VL-28B-A3B-PT: the image processor's class defaults, size 3136..4842768 (28*28*6177),
patch 14, merge 2, and its chat template ("Picture N:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>").
"""

from __future__ import annotations

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
from tests.families._releases import needs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, ernie_vl, load_model, qwen_vl
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "ernie-4.5-vl-28b-a3b"
HUB = ernie_vl.ErnieSettings()  # the converter saves the class defaults
IMAGE = "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: ernie_vl.ErnieSettings) -> tuple[int, int] | str:
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import smart_resize

    try:
        return smart_resize(height, width, factor=s.factor, min_pixels=s.min_pixels, max_pixels=s.max_pixels)
    except ValueError as exc:
        return str(exc)


def mine(height: int, width: int, s: ernie_vl.ErnieSettings) -> tuple[int, int] | str:
    try:
        got = ernie_vl.count(height, width, s)
    except CountError as exc:
        return str(exc)
    return got.resized_height, got.resized_width


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    tokenizer = processor.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[IMAGE], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "tokens": ids.count(tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>")),
        "start": ids.count(tokenizer.convert_tokens_to_ids("<|IMAGE_START|>")),
        "end": ids.count(tokenizer.convert_tokens_to_ids("<|IMAGE_END|>")),
        "length": len(ids),
        "grid": tuple(int(v) for v in output["image_grid_thw"][0]),
    }


def assert_count_matches_pipeline(
    processor, height: int, width: int, s: ernie_vl.ErnieSettings, **kw
) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = ernie_vl.count(height, width, s)
    assert got.tokens == real["tokens"], (height, width, s)
    assert real["start"] == real["end"] == 1 and real["length"] == got.tokens + 2
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == (real["grid"][1] * 14, real["grid"][2] * 14)


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_ernie_vl_and_reads_the_settings():
    model = load_model(str(FOLDER))
    assert model.family is ernie_vl.FAMILY is family_for_class("Ernie4_5_VLMoeProcessor")
    assert model.counted_by() == "formula (family ernie_vl)"
    assert model.settings == HUB
    assert model.family.placeholder == "<|IMAGE_PLACEHOLDER|>"
    assert model.family.raw_image_prompt == IMAGE
    assert model.max_position_embeddings == 131072


def test_a_changed_preprocessor_config_changes_the_count(tmp_path):
    folder = tmp_path / "ernie-small"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["size"]["longest_edge"] = 28 * 28 * 64
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings.max_pixels == 50176
    processor = harness.real_processor(folder)
    assert (
        real_pipeline(processor, 1080, 1920)["tokens"]
        == ernie_vl.count(1080, 1920, model.settings).tokens
        == 60
    )
    assert ernie_vl.count(1080, 1920, HUB).tokens == 2691


def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path):
    folder = tmp_path / "ernie-tokenizer-size"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["size"] = {"shortest_edge": 28 * 28 * 16, "longest_edge": 28 * 28 * 100}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.image_processor.size.longest_edge == 4842768
    assert (model.settings.min_pixels, model.settings.max_pixels) == (12544, 78400)
    processor = harness.real_processor(folder)
    for height, width in [(600, 800), (20, 20), (1000, 3000)]:
        assert (
            real_pipeline(processor, height, width)["tokens"]
            == ernie_vl.count(height, width, model.settings).tokens
        )


def test_a_tokenizer_without_image_token_is_refused_as_the_processor_refuses(tmp_path):
    folder = tmp_path / "ernie-no-token"
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
    (1, 1),  # rounds to 0 x 0, enlarged to 56 x 56
    (1, 7),
    (1, 200),  # ratio 200: allowed
    (1, 201),
    (1, 4000),
    (20, 4000),
    (19, 4000),
    (14, 14),
    (42, 42),  # round(1.5) = 2
    (70, 70),  # round(2.5) = 2 (half to even)
    (126, 1000),  # round(4.5) = 4
    (154, 1000),  # round(5.5) = 6
    (1988, 2436),  # exactly max_pixels = 28*28*6177: kept
    (1988, 2450),  # over: shrunk
    (2184, 2212),
    (3000, 4000),
    (8000, 8000),
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
def test_size_edges_match_the_real_function(height, width):
    assert mine(height, width, HUB) == real_size(height, width, HUB)
    assert mine(width, height, HUB) == real_size(width, height, HUB)


def test_the_resize_is_qwen_vls_function():
    """The module's claim that lets it reuse qwen_vl.smart_resize: the sources are the same, in the
    PIL and the torchvision image processor (read as text: the latter needs torchvision to import)."""
    import inspect
    from pathlib import Path

    from transformers.models.ernie4_5_vl_moe import image_processing_pil_ernie4_5_vl_moe as pil
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as qwen

    body = inspect.getsource(qwen.smart_resize)
    assert inspect.getsource(pil.smart_resize) == body
    assert body in (Path(pil.__file__).parent / "image_processing_ernie4_5_vl_moe.py").read_text()


def test_the_edges_reach_each_branch():
    assert ernie_vl.count(1, 1, HUB) == ernie_vl.ImageCount(56, 56, (1, 4, 4), 4)  # enlarged
    assert mine(1988, 2436, HUB) == (1988, 2436)  # exact fit
    assert mine(1988, 2450, HUB) == (1960, 2436)  # shrunk
    assert mine(126, 1000, HUB) == (112, 1008) and mine(154, 1000, HUB) == (168, 1008)
    with pytest.raises(CountError, match="absolute aspect ratio must be smaller than 200, got 201.0"):
        ernie_vl.count(1, 201, HUB)


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    patch_size=st.sampled_from([7, 14, 16]),
    merge_size=st.integers(1, 3),
    min_pixels=st.integers(1, 200_000),
    max_pixels=st.integers(1, 20_000_000),
)
@example(height=1, width=1, patch_size=14, merge_size=2, min_pixels=3136, max_pixels=4842768)
@example(height=1988, width=2436, patch_size=14, merge_size=2, min_pixels=3136, max_pixels=4842768)
def test_size_matches_the_real_function_for_any_settings(
    height, width, patch_size, merge_size, min_pixels, max_pixels
):
    s = ernie_vl.ErnieSettings(
        patch_size=patch_size, merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels
    )
    assert mine(height, width, s) == real_size(height, width, s)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 200),
    (20, 4000),
    (42, 42),
    (70, 70),
    (126, 1000),
    (1988, 2436),
    (1988, 2450),
    (480, 640),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)
    assert_count_matches_pipeline(processor, width, height, HUB)


@pytest.mark.parametrize("height,width", [(1, 4000), (4000, 1), (19, 4000), (1, 201)])
def test_extreme_aspect_ratios_are_refused_with_the_processors_message(processor, height, width):
    with pytest.raises(ValueError, match="absolute aspect ratio") as real:
        real_pipeline(processor, height, width)
    with pytest.raises(CountError) as got:
        ernie_vl.count(height, width, HUB)
    assert str(got.value) == str(real.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400), width=st.integers(1, 1400), longest=st.sampled_from([50176, 501760, 4842768])
)
def test_random_sizes_match_the_pipeline(processor, height, width, longest):
    s = ernie_vl.ErnieSettings(max_pixels=longest)
    if isinstance(mine(height, width, s), str):
        return
    assert_count_matches_pipeline(
        processor, height, width, s, size={"shortest_edge": 3136, "longest_edge": longest}
    )


@pytest.mark.parametrize("height,width", [(56, 84), (28, 28), (560, 1120)])
def test_without_resize_whole_blocks_are_counted_as_they_are(processor, height, width):
    assert_count_matches_pipeline(
        processor, height, width, ernie_vl.ErnieSettings(do_resize=False), do_resize=False
    )


@pytest.mark.parametrize("height,width", [(42, 56), (56, 30), (1, 1)])
def test_without_resize_partial_blocks_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        real_pipeline(processor, height, width, do_resize=False)
    with pytest.raises(CountError, match="not whole blocks"):
        ernie_vl.count(height, width, ernie_vl.ErnieSettings(do_resize=False))


def test_count_exact_matches_count():
    model = load_model(str(FOLDER))
    sizes = [(1, 1), (300, 1000), (1000, 300), (1988, 2450), (42, 42)]
    exact = ernie_vl.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [ernie_vl.count(h, w, model.settings) for h, w in sizes]
    with pytest.raises(CountError, match="absolute aspect ratio"):
        ernie_vl.count_exact(model.image_processor, [image(1, 4000)], model.settings)


def test_transformers_helper_agrees(processor):
    sizes = [(1, 1), (480, 640), (1988, 2450), (3000, 4000)]
    helper = processor._get_num_multimodal_tokens(image_sizes=sizes)
    assert helper["num_image_tokens"] == [ernie_vl.count(h, w, HUB).tokens for h, w in sizes]


# -- expansion, positions and whole prompts -------------------------------------------------------


@pytest.mark.parametrize("grid", [(1, 4, 4), (1, 34, 46), (1, 2, 286)])
def test_expand_is_the_processors_replacement(processor, grid):
    count = ernie_vl.ImageCount(grid[1] * 14, grid[2] * 14, grid, grid[1] * grid[2] // 4)
    assert ernie_vl.expand(count, HUB) == (Run("<|IMAGE_PLACEHOLDER|>", count.tokens),)
    assert "<|IMAGE_PLACEHOLDER|>" * count.tokens == needs(processor, "replace_image_token")(
        {"image_grid_thw": np.array([grid])}, 0
    )


@pytest.mark.parametrize("sizes", [[(1080, 1920)], [(1, 200), (600, 400)]])
def test_position_span_matches_get_rope_index(processor, sizes):
    """Ernie4_5_VLMoeModel.get_rope_index on the processor's own ids (where torch is: the reference venv)."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import Ernie4_5_VLMoeModel

    text = "<|begin_of_sentence|>User: " + ("Picture:" + IMAGE) * len(sizes) + "x\nAssistant: "
    output = processor(text=[text], images=[image(h, w) for h, w in sizes], return_tensors="pt")
    vision = SimpleNamespace(spatial_merge_size=2, temporal_merge_size=2)
    stub = SimpleNamespace(config=SimpleNamespace(vision_config=vision))
    stub.get_vision_position_ids = lambda *a, **k: Ernie4_5_VLMoeModel.get_vision_position_ids(stub, *a, **k)
    positions, _ = Ernie4_5_VLMoeModel.get_rope_index(
        stub, output["input_ids"], output["mm_token_type_ids"], image_grid_thw=output["image_grid_thw"]
    )
    counts = [ernie_vl.count(h, w, HUB) for h, w in sizes]
    spans = sum(ernie_vl.position_span(c, HUB) for c in counts)
    assert int(positions.max()) == output["input_ids"].shape[1] - sum(c.tokens for c in counts) + spans - 1


def conversation(n_images: int, text: str, system: str | None) -> list:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "It is a picture."}]})
    return messages


@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (42, 42)], [(640, 480)] * 3])
@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes, system):
    """The converter's chat template rendered by vlmlint and by the processor ("Picture N:" numbering
    included), then composed and tokenized: the same input_ids length and ids as processor(text, images)."""
    text = "Describe this image."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = [Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="It is a picture."),))]
    if system is not None:
        messages.insert(0, Message(Role.SYSTEM, (Part(text=system),)))
    rendered = scanner.render(tuple(messages))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text, system), tokenize=False)
    assert f"Picture {len(sizes)}:{IMAGE}" in rendered
    counts = [ernie_vl.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    tokenizer = processor.tokenizer
    assert ids.count(tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>")) == sum(
        c.tokens for c in counts
    )
    full = composed
    for count in counts:
        full = full.replace(IMAGE, "<|IMAGE_START|>" + "\0" * count.tokens + "<|IMAGE_END|>", 1)
    assert scanner.model.tokenizer(full.replace("\0", "<|IMAGE_PLACEHOLDER|>"))["input_ids"] == ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|begin_of_sentence|>")


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built(
        "ernie4_5_vl_moe",
        FOLDER,
        "Ernie4_5_VLMoeProcessor",
        "<|IMAGE_PLACEHOLDER|>",
        "<|IMAGE_PLACEHOLDER|>",
        0,
    )
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>")
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob and the shrink hint: Qwen-VL's --------------------------------------------------


def test_size_knob_and_shrink_hint_are_qwen_vls():
    knob = knob_for("ernie_vl", HUB)
    assert isinstance(knob, Knob)
    assert (knob.name, knob.current, knob.step, knob.low) == ("max_pixels", 4842768, 784, 3136)
    assert knob.settings_at(78400).max_pixels == 78400
    assert knob.shape(1080, 1920) == qwen_vl.size_knob(HUB).shape(1080, 1920)
    hint = ernie_vl.shrink_hint(8000, 8000, 4.0, HUB)
    assert hint is not None and hint.startswith("set max_pixels >= ")
    value = int(hint.split(">= ")[1].split(" ")[0])
    h, w = mine(8000, 8000, ernie_vl.ErnieSettings(max_pixels=value))
    assert h * w * 4.0 >= 8000 * 8000
