"""Qwen2.5-Omni (Qwen2_5OmniProcessor) and Qwen3-Omni (Qwen3OmniMoeProcessor) images: vlmlint's formula
against the real classes.

The fixture folders (fixtures/families/qwen_omni.py) hold the hubs' image settings (legacy min_pixels
3136 / max_pixels 12845056, patch 14 / 16, merge 2) and the checkpoints' chat templates.
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
from tests.families._releases import needs, records
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, load_model, qwen_omni, qwen_vl
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

# Before 5.2x the Omni processors' __call__ builds its video processor's inputs, which needs torch:
# without it there is no real side to compare (the formula is the 5.24.0 one, see the module).
pytestmark = records(
    "5.24.0", "Qwen2.5-Omni / Qwen3-Omni __call__ reads a video processor (torch) on 5.5.0 and 5.8.0"
)

QWEN25 = PROCESSORS / "qwen2.5-omni-7b"
QWEN3 = PROCESSORS / "qwen3-omni-30b-a3b-instruct"
HUB25 = qwen_omni.OmniSettings(min_pixels=3136, max_pixels=12845056)
HUB3 = qwen_omni.OmniSettings(
    patch_size=16,
    min_pixels=3136,
    max_pixels=12845056,
    placeholder="<|image_pad|>",
    vision_bos="<|vision_start|>",
    vision_eos="<|vision_end|>",
)
CASES = {"qwen2.5": (QWEN25, HUB25), "qwen3": (QWEN3, HUB3)}
BOTH = pytest.mark.parametrize("which", list(CASES))


@pytest.fixture(scope="module")
def processors():
    return {name: harness.real_processor(folder) for name, (folder, _) in CASES.items()}


@pytest.fixture(scope="module")
def scanners():
    return {name: Scanner(ScanConfig(dataset="", model=str(folder))) for name, (folder, _) in CASES.items()}


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: qwen_omni.OmniSettings) -> tuple[int, int] | str:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    try:
        return smart_resize(height, width, factor=s.factor, min_pixels=s.min_pixels, max_pixels=s.max_pixels)
    except ValueError as exc:
        return str(exc)


def mine(height: int, width: int, s: qwen_omni.OmniSettings) -> tuple[int, int] | str:
    try:
        got = qwen_omni.count(height, width, s)
    except CountError as exc:
        return str(exc)
    return got.resized_height, got.resized_width


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    token = processor.image_token
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[token], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "tokens": ids.count(processor.tokenizer.convert_tokens_to_ids(token)),
        "length": len(ids),
        "grid": tuple(int(v) for v in output["image_grid_thw"][0]),
    }


def assert_count_matches_pipeline(
    processor, height: int, width: int, s: qwen_omni.OmniSettings, **kw
) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = qwen_omni.count(height, width, s)
    assert got.tokens == real["tokens"] == real["length"], (height, width, s)
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == (
        real["grid"][1] * s.patch_size,
        real["grid"][2] * s.patch_size,
    )


# -- settings ------------------------------------------------------------------------------------


@BOTH
def test_load_model_reads_the_hub_files(which):
    folder, hub = CASES[which]
    model = load_model(str(folder))
    assert model.family == family_for_class(model.processor_class).bound(model.settings)
    assert model.family.name == "qwen_omni"
    assert model.counted_by() == "formula (family qwen_omni)"
    assert model.settings == hub
    assert model.family.placeholder == hub.placeholder
    assert model.family.raw_image_prompt == hub.raw_image_prompt
    # the text model's limit sits in thinker_config.text_config
    assert model.max_position_embeddings == (32768 if which == "qwen2.5" else 65536)


def test_both_processor_classes_are_this_familys():
    assert family_for_class("Qwen2_5OmniProcessor") is qwen_omni.FAMILY
    assert family_for_class("Qwen3OmniMoeProcessor") is qwen_omni.FAMILY
    assert qwen_omni.FAMILY.position_span is not None  # M-RoPE


def test_class_defaults_where_the_files_say_nothing(tmp_path):
    folder = tmp_path / "omni-defaults"
    shutil.copytree(QWEN25, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    del config["min_pixels"], config["max_pixels"]
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert (model.settings.min_pixels, model.settings.max_pixels) == (56 * 56, 28 * 28 * 1280)
    processor = harness.real_processor(folder)
    assert (
        real_pipeline(processor, 1500, 2000)["tokens"] == qwen_omni.count(1500, 2000, model.settings).tokens
    )


@BOTH
def test_a_changed_preprocessor_config_changes_the_count(tmp_path, which):
    folder, hub = CASES[which]
    copy = tmp_path / "omni-small"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "preprocessor_config.json").read_text())
    config["max_pixels"] = hub.factor**2 * 64
    (copy / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(copy))
    assert model.settings.max_pixels == hub.factor**2 * 64
    processor = harness.real_processor(copy)
    small = real_pipeline(processor, 1080, 1920)["tokens"]
    assert small == qwen_omni.count(1080, 1920, model.settings).tokens <= 64
    assert qwen_omni.count(1080, 1920, hub).tokens > 1000


@pytest.mark.parametrize(
    "extra",
    [
        {"min_pixels": 500000},
        {"max_pixels": 100000},
        {"size": {"shortest_edge": 3136, "longest_edge": 78400}},
        {"patch_size": 16},
    ],
)
def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path, extra):
    folder = tmp_path / "omni-tokenizer"
    shutil.copytree(QWEN25, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(extra)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings != HUB25
    processor = harness.real_processor(folder)
    for height, width in [(600, 800), (20, 20), (1000, 3000), (1200, 1600)]:
        assert (
            real_pipeline(processor, height, width)["tokens"]
            == qwen_omni.count(height, width, model.settings).tokens
        )


def test_a_tokenizer_without_image_token_is_refused_as_the_processor_refuses(tmp_path):
    folder = tmp_path / "omni-no-token"
    shutil.copytree(QWEN25, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["extra_special_tokens"]["image_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(AttributeError):
        harness.real_processor(folder)
    with pytest.raises(ModelError, match="no image_token"):
        load_model(str(folder))


# -- the resize ----------------------------------------------------------------------------------

SIZE_EDGES = [
    (1, 1),  # enlarged to min_pixels' grid
    (1, 200),  # ratio 200: allowed
    (1, 201),  # refused
    (1, 4000),
    (14, 14),
    (27, 28),
    (42, 42),  # round(1.5) = 2 (half to even)
    (70, 70),  # round(2.5) = 2
    (48, 48),  # Qwen3: 48 / 32 = 1.5 -> 2
    (80, 80),  # Qwen3: 2.5 -> 2
    (3584, 3584),  # 12845056 exactly at factor 28: kept
    (3584, 3612),  # over: shrunk
    (3000, 4000),
    (20000, 100),
    (8000, 8000),
]


@BOTH
@pytest.mark.parametrize("height,width", SIZE_EDGES)
def test_size_edges_match_the_real_function(which, height, width):
    _, hub = CASES[which]
    assert mine(height, width, hub) == real_size(height, width, hub)
    assert mine(width, height, hub) == real_size(width, height, hub)


def test_the_resize_is_qwen2_vls_function():
    """Both Omni processors name Qwen2VLImageProcessor: the resize vlmlint calls is that module's."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    for model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
        assert IMAGE_PROCESSOR_MAPPING_NAMES[model_type]["pil"] == "Qwen2VLImageProcessorPil"
    assert qwen_omni.count(1, 1, HUB25) == qwen_vl.count(1, 1, HUB25)


def test_the_edges_reach_each_branch():
    assert qwen_omni.count(1, 1, HUB25).grid == (1, 4, 4)  # enlarged to 56 x 56: 4 tokens
    assert mine(42, 42, HUB25) == (56, 56)
    assert mine(70, 70, HUB25) == (56, 56)
    assert mine(3584, 3584, HUB25) == (3584, 3584)
    assert mine(3584, 3612, HUB25) == (3556, 3584)
    assert mine(48, 48, HUB3) == (64, 64)
    with pytest.raises(CountError, match="absolute aspect ratio must be smaller than 200, got 201.0"):
        qwen_omni.count(1, 201, HUB25)


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    patch_size=st.sampled_from([14, 16]),
    merge_size=st.integers(1, 3),
    min_pixels=st.integers(1, 400_000),
    max_pixels=st.integers(1, 20_000_000),
)
@example(height=1, width=1, patch_size=16, merge_size=2, min_pixels=3136, max_pixels=12845056)
@example(height=48, width=80, patch_size=16, merge_size=2, min_pixels=3136, max_pixels=12845056)
def test_size_matches_the_real_function_for_any_settings(
    height, width, patch_size, merge_size, min_pixels, max_pixels
):
    s = qwen_omni.OmniSettings(
        patch_size=patch_size, merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels
    )
    assert mine(height, width, s) == real_size(height, width, s)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [(1, 1), (1, 200), (27, 28), (42, 42), (48, 80), (480, 640), (20000, 100)]


@BOTH
@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processors, which, height, width):
    _, hub = CASES[which]
    assert_count_matches_pipeline(processors[which], height, width, hub)
    assert_count_matches_pipeline(processors[which], width, height, hub)


@BOTH
@pytest.mark.parametrize("height,width", [(1, 4000), (4000, 1), (1, 201)])
def test_extreme_aspect_ratios_are_refused_with_the_processors_message(processors, which, height, width):
    _, hub = CASES[which]
    with pytest.raises(ValueError, match="absolute aspect ratio") as real:
        real_pipeline(processors[which], height, width)
    with pytest.raises(CountError) as got:
        qwen_omni.count(height, width, hub)
    assert str(got.value) == str(real.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(list(CASES)),
    height=st.integers(1, 1400),
    width=st.integers(1, 1400),
    longest=st.sampled_from([50176, 501760, 12845056]),
)
def test_random_sizes_match_the_pipeline(processors, which, height, width, longest):
    _, hub = CASES[which]
    s = qwen_omni.dataclasses.replace(hub, max_pixels=longest)
    if isinstance(mine(height, width, s), str):
        return
    assert_count_matches_pipeline(
        processors[which], height, width, s, size={"shortest_edge": 3136, "longest_edge": longest}
    )


@pytest.mark.parametrize("height,width", [(56, 84), (28, 28), (56, 112)])
def test_without_resize_whole_blocks_are_counted(processors, height, width):
    assert_count_matches_pipeline(
        processors["qwen2.5"], height, width, qwen_omni.OmniSettings(do_resize=False), do_resize=False
    )


@pytest.mark.parametrize("height,width", [(42, 56), (14, 28), (1, 1)])
def test_without_resize_partial_blocks_are_refused(processors, height, width):
    with pytest.raises(ValueError):
        real_pipeline(processors["qwen2.5"], height, width, do_resize=False)
    with pytest.raises(CountError, match="do_resize is off"):
        qwen_omni.count(height, width, qwen_omni.OmniSettings(do_resize=False))


@BOTH
def test_count_exact_matches_count(which):
    folder, _ = CASES[which]
    model = load_model(str(folder))
    sizes = [(1, 1), (8, 3), (300, 1000), (2000, 1000), (20, 4000)]
    exact = qwen_omni.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [qwen_omni.count(h, w, model.settings) for h, w in sizes]
    with pytest.raises(CountError, match="absolute aspect ratio"):
        qwen_omni.count_exact(model.image_processor, [image(1, 4000)], model.settings)


@BOTH
def test_transformers_helper_agrees(processors, which):
    _, hub = CASES[which]
    sizes = [(1, 1), (480, 640), (8, 3), (3000, 4000), (20, 4000)]
    got = needs(processors[which], "_get_num_multimodal_tokens")(image_sizes=sizes)["num_image_tokens"]
    assert got == [qwen_omni.count(h, w, hub).tokens for h, w in sizes]


# -- expansion, positions and whole prompts -------------------------------------------------------


@BOTH
@pytest.mark.parametrize("grid", [(1, 28, 28), (1, 34, 46), (1, 2, 2)])
def test_expand_is_the_processors_replacement(processors, which, grid):
    _, hub = CASES[which]
    count = qwen_omni.ImageCount(grid[1] * 14, grid[2] * 14, grid, grid[1] * grid[2] // 4)
    assert qwen_omni.expand(count, hub) == (Run(hub.placeholder, count.tokens),)
    replaced = needs(processors[which], "replace_image_token")({"image_grid_thw": np.array([grid])}, 0)
    assert replaced == hub.placeholder * count.tokens


@BOTH
@pytest.mark.parametrize("sizes", [[(1080, 1920)], [(1, 200), (600, 400)]])
def test_position_span_matches_get_rope_index(processors, which, sizes):
    """The thinker's get_rope_index on the processor's own ids (where torch is: the reference venv)."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    if which == "qwen2.5":
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            Qwen2_5OmniPreTrainedModelForConditionalGeneration as Thinker,
        )
    else:
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
            Qwen3OmniMoePreTrainedModelForConditionalGeneration as Thinker,
        )
    folder, hub = CASES[which]
    processor = processors[which]
    thinker = json.loads((folder / "config.json").read_text())["thinker_config"]
    suffix = "token_index" if which == "qwen2.5" else "token_id"
    config = SimpleNamespace(
        image_token_id=thinker[f"image_{suffix}"],
        video_token_id=thinker[f"video_{suffix}"],
        audio_token_id=thinker[f"audio_{suffix}"],
        vision_start_token_id=thinker["vision_start_token_id"],
        audio_start_token_id=thinker["audio_start_token_id"],
        position_id_per_seconds=thinker["position_id_per_seconds"],
        seconds_per_chunk=2,
    )
    stub = SimpleNamespace(config=config, spatial_merge_size=2)
    stub.get_llm_pos_ids_for_vision = lambda *a, **k: Thinker.get_llm_pos_ids_for_vision(stub, *a, **k)
    text = "<|im_start|>user\n" + hub.raw_image_prompt * len(sizes) + "Read it.<|im_end|>\n"
    output = processor(text=[text], images=[image(h, w) for h, w in sizes], return_tensors="pt")
    positions, _ = Thinker.get_rope_index(
        stub,
        output["input_ids"],
        image_grid_thw=output["image_grid_thw"],
        attention_mask=output["attention_mask"],  # Qwen3-Omni's copy indexes it unconditionally
    )
    counts = [qwen_omni.count(h, w, hub) for h, w in sizes]
    spans = sum(qwen_omni.position_span(c, hub) for c in counts)
    assert int(positions.max()) == output["input_ids"].shape[1] - sum(c.tokens for c in counts) + spans - 1


def conversation(n_images: int, text: str, system: str | None) -> list:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Some text."}]})
    return messages


@BOTH
@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (8, 3)], [(640, 480)] * 3])
@pytest.mark.parametrize("system", [None, "Read it."])
def test_whole_prompt_input_ids_match_the_processor(processors, scanners, which, sizes, system):
    """The checkpoint's template (the vision markers around each image token) rendered by vlmlint and by
    the processor, then composed and tokenized: the same input_ids as processor(text, images)."""
    processor, scanner = processors[which], scanners[which]
    token = processor.image_token
    text = "Describe."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = [Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="Some text."),))]
    if system is not None:
        messages.insert(0, Message(Role.SYSTEM, (Part(text=system),)))
    rendered = scanner.render(tuple(messages))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text, system), tokenize=False)
    assert rendered.count(scanner.model.settings.raw_image_prompt) == len(sizes)
    counts = [qwen_omni.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    tokenizer = processor.tokenizer
    assert ids.count(tokenizer.convert_tokens_to_ids(token)) == sum(c.tokens for c in counts)
    for marker in (processor.vision_bos_token, processor.vision_eos_token):
        assert ids.count(tokenizer.convert_tokens_to_ids(marker)) == len(sizes)
    full = rendered
    for count in counts:
        full = full.replace(token, "\0" * count.tokens, 1)
    assert scanner.model.tokenizer(full.replace("\0", token))["input_ids"] == ids


@BOTH
def test_scan_of_a_dataset_matches_the_processor(tmp_path, which):
    folder, hub = CASES[which]
    processor = harness.real_processor(folder)
    built = harness.Built(
        "qwen_omni", folder, load_model(str(folder)).processor_class, hub.placeholder, hub.placeholder, 0
    )
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids(hub.placeholder)
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob and the shrink hint -------------------------------------------------------------


@BOTH
def test_size_knob_is_qwen_vls(which):
    _, hub = CASES[which]
    knob = knob_for("qwen_omni", hub)
    assert isinstance(knob, Knob)
    assert (knob.name, knob.current, knob.step) == ("max_pixels", 12845056, hub.factor**2)
    saturation = qwen_vl.max_pixels_saturation(1080, 1920, hub.factor)
    assert knob.shape(1080, 1920) == ((saturation,), saturation)


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    steps=st.lists(st.integers(1, 4000), min_size=2, max_size=6),
)
def test_size_knob_counts_never_drop_below_the_saturation_and_stay_above(height, width, steps):
    knob = qwen_omni.size_knob(HUB3)
    if isinstance(mine(height, width, HUB3), str):
        return
    drops, saturation = knob.shape(height, width)
    values = sorted({max(knob.low, v * knob.step) for v in steps})
    tokens = [qwen_omni.count(height, width, knob.settings_at(v)).tokens for v in values if v < min(drops)]
    assert tokens == sorted(tokens)
    at = qwen_omni.count(height, width, knob.settings_at(saturation)).tokens
    for v in (saturation + knob.step, saturation * 4):
        assert qwen_omni.count(height, width, knob.settings_at(v)).tokens == at


@pytest.mark.parametrize("height,width,limit", [(8000, 6000, 1.5), (8000, 8000, 4.0), (20000, 200, 2.0)])
def test_shrink_hint_names_a_bound_that_keeps_the_shrink_within_the_limit(height, width, limit):
    hint = qwen_omni.shrink_hint(height, width, limit, HUB25)
    assert hint is not None and hint.startswith("set max_pixels >= ")
    value = int(hint.split(">= ")[1].split(" ")[0])
    h, w = mine(height, width, qwen_omni.dataclasses.replace(HUB25, max_pixels=value))
    assert h * w * limit >= height * width
