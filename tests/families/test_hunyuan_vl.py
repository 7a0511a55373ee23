"""HunyuanOCR (HunYuanVLProcessor): vlmlint's formula against the real classes.

The fixture folder (fixtures/families/hunyuan_vl.py) holds the hub's image settings (legacy min_pixels
262144 / max_pixels 4194304, patch 16, merge 2) and the checkpoint's chat template, verbatim.
"""

from __future__ import annotations

import inspect
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, ModelError, Run, hunyuan_vl, load_model, qwen_vl
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "hunyuan-ocr"
HUB = hunyuan_vl.HunyuanSettings(min_pixels=262144, max_pixels=4194304)
TOKEN = hunyuan_vl.PLACEHOLDER
WRAPPED = hunyuan_vl.IMAGE_START + TOKEN + hunyuan_vl.IMAGE_END


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: hunyuan_vl.HunyuanSettings) -> tuple[int, int] | str:
    from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import smart_resize

    try:
        return smart_resize(height, width, factor=s.factor, min_pixels=s.min_pixels, max_pixels=s.max_pixels)
    except ValueError as exc:
        return str(exc)


def mine(height: int, width: int, s: hunyuan_vl.HunyuanSettings) -> tuple[int, int] | str:
    try:
        got = hunyuan_vl.count(height, width, s)
    except CountError as exc:
        return str(exc)
    return got.resized_height, got.resized_width


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[WRAPPED], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "tokens": ids.count(processor.tokenizer.convert_tokens_to_ids(TOKEN)),
        "length": len(ids),
        "grid": tuple(int(v) for v in output["image_grid_thw"][0]),
    }


def assert_count_matches_pipeline(
    processor, height: int, width: int, s: hunyuan_vl.HunyuanSettings, **kw
) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = hunyuan_vl.count(height, width, s)
    assert got.tokens == real["tokens"] == real["length"] - 2, (height, width, s)
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == (real["grid"][1] * 16, real["grid"][2] * 16)
    # the formula: N = (h/32)(w/32 + 1) + 2 on the resized image
    if s.merge_size == 2 and s.patch_size == 16 and s.cat_extra_token:
        h, w = got.resized_height, got.resized_width
        assert got.tokens == (h // 32) * (w // 32 + 1) + 2


def copy_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(FOLDER, folder)
    return folder


def edit_json(folder: Path, filename: str, edit) -> None:
    config = json.loads((folder / filename).read_text())
    edit(config)
    (folder / filename).write_text(json.dumps(config))


# -- settings ------------------------------------------------------------------------------------


def test_load_model_reads_the_hub_files():
    model = load_model(str(FOLDER))
    assert model.family is hunyuan_vl.FAMILY is family_for_class("HunYuanVLProcessor")
    assert model.counted_by() == "formula (family hunyuan_vl)"
    assert model.settings == HUB
    assert model.family.placeholder == TOKEN and model.family.raw_image_prompt == WRAPPED
    assert model.family.add_special_tokens is False  # HunYuanVLProcessor.text_kwargs
    assert model.family.position_span is None  # XD-RoPE keeps 1D text positions
    assert model.max_position_embeddings == 32768


def test_class_defaults_where_the_files_say_nothing(tmp_path):
    folder = copy_folder(tmp_path, "hy-defaults")
    edit_json(folder, "preprocessor_config.json", lambda c: (c.pop("min_pixels"), c.pop("max_pixels")))
    model = load_model(str(folder))
    assert (model.settings.min_pixels, model.settings.max_pixels) == (512 * 512, 2048 * 2048)
    processor = harness.real_processor(folder)
    assert (
        real_pipeline(processor, 1500, 2000)["tokens"] == hunyuan_vl.count(1500, 2000, model.settings).tokens
    )


def test_a_changed_preprocessor_config_changes_the_count(tmp_path):
    folder = copy_folder(tmp_path, "hy-small")
    edit_json(
        folder, "preprocessor_config.json", lambda c: c.update(max_pixels=32 * 32 * 64, min_pixels=1024)
    )
    model = load_model(str(folder))
    assert model.settings.max_pixels == 65536
    processor = harness.real_processor(folder)
    small = real_pipeline(processor, 1080, 1920)["tokens"]
    assert small == hunyuan_vl.count(1080, 1920, model.settings).tokens < 100
    assert hunyuan_vl.count(1080, 1920, HUB).tokens == 34 * 61 + 2  # 1088 x 1920


def test_cat_extra_token_off_drops_the_two_extra_tokens(tmp_path):
    folder = copy_folder(tmp_path, "hy-no-extra")
    edit_json(folder, "processor_config.json", lambda c: c.update(cat_extra_token=False))
    model = load_model(str(folder))
    assert model.settings.cat_extra_token is False
    processor = harness.real_processor(folder)
    for height, width in [(480, 640), (1, 1)]:
        real = real_pipeline(processor, height, width)["tokens"]
        assert real == hunyuan_vl.count(height, width, model.settings).tokens
        assert real == hunyuan_vl.count(height, width, HUB).tokens - 2


@pytest.mark.parametrize(
    "extra",
    [
        {"min_pixels": 1000000},
        {"max_pixels": 100000},
        {"size": {"shortest_edge": 3136, "longest_edge": 78400}},
        {"merge_size": 1},
    ],
)
def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path, extra):
    folder = copy_folder(tmp_path, "hy-tokenizer")
    edit_json(folder, "tokenizer_config.json", lambda c: c.update(extra))
    model = load_model(str(folder))
    processor = harness.real_processor(folder)
    if set(extra) <= {"min_pixels", "max_pixels"} and not hunyuan_vl._one_bound_applies(
        processor.image_processor
    ):
        assert model.settings == HUB  # 5.16.1: one bound alone changes nothing (the class wants both)
    else:
        assert model.settings != HUB
    for height, width in [(600, 800), (20, 20), (1000, 3000), (1200, 1600)]:
        assert (
            real_pipeline(processor, height, width)["tokens"]
            == hunyuan_vl.count(height, width, model.settings).tokens
        )


@pytest.mark.parametrize("missing", ["image_token", "image_start_token", "image_end_token"])
def test_a_tokenizer_without_its_image_tokens_is_refused_as_the_processor_refuses(tmp_path, missing):
    folder = copy_folder(tmp_path, "hy-no-token")
    edit_json(folder, "tokenizer_config.json", lambda c: c["extra_special_tokens"].pop(missing))
    with pytest.raises(ValueError, match=f"missing required attribute '{missing}'"):
        harness.real_processor(folder)
    with pytest.raises(ModelError, match=f"missing required attribute '{missing}'"):
        load_model(str(folder))


# -- the resize ----------------------------------------------------------------------------------

SIZE_EDGES = [
    (1, 1),  # enlarged to 512 x 512
    (1, 200),  # ratio 200: allowed
    (1, 201),  # refused
    (48, 48),  # round(1.5) = 2, then enlarged
    (80, 80),  # round(2.5) = 2
    (512, 512),  # exactly min_pixels
    (496, 512),  # rounds to 512 x 512: exactly min_pixels
    (480, 512),  # under: enlarged
    (2048, 2048),  # exactly max_pixels
    (2048, 2080),  # over: shrunk
    (3000, 4000),
    (20000, 100),
    (8000, 8000),
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
def test_size_edges_match_the_real_function(height, width):
    assert mine(height, width, HUB) == real_size(height, width, HUB)
    assert mine(width, height, HUB) == real_size(width, height, HUB)


def test_the_resize_is_qwen2_vls_function():
    """The module's claim that lets it reuse qwen_vl.smart_resize: the same source, PIL and torchvision."""
    from transformers.models.hunyuan_vl import image_processing_pil_hunyuan_vl as pil
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as qwen

    def body(function) -> str:
        source = inspect.getsource(function)
        return source[source.index("    if max(height, width) / min(height, width) > 200:") :]

    assert body(pil.smart_resize) == body(qwen.smart_resize)
    torchvision_source = (Path(pil.__file__).parent / "image_processing_hunyuan_vl.py").read_text()
    assert body(pil.smart_resize) in torchvision_source


def test_the_edges_reach_each_branch():
    assert hunyuan_vl.count(1, 1, HUB) == hunyuan_vl.ImageCount(512, 512, (1, 32, 32), 16 * 17 + 2)
    assert mine(2048, 2048, HUB) == (2048, 2048)
    assert mine(2048, 2080, HUB) == (2016, 2048)
    assert mine(496, 512, HUB) == (512, 512)  # round(15.5) = 16: exactly min_pixels
    assert mine(480, 512, HUB) == (512, 544)  # under min_pixels: enlarged, ceil
    with pytest.raises(CountError, match="absolute aspect ratio must be smaller than 200, got 201.0"):
        hunyuan_vl.count(1, 201, HUB)


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    merge_size=st.integers(1, 3),
    min_pixels=st.integers(1, 600_000),
    max_pixels=st.integers(1, 20_000_000),
)
@example(height=1, width=1, merge_size=2, min_pixels=262144, max_pixels=4194304)
def test_size_matches_the_real_function_for_any_settings(height, width, merge_size, min_pixels, max_pixels):
    s = hunyuan_vl.HunyuanSettings(merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels)
    assert mine(height, width, s) == real_size(height, width, s)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [(1, 1), (1, 200), (48, 48), (80, 80), (480, 512), (480, 640), (20000, 100), (2048, 2080)]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)
    assert_count_matches_pipeline(processor, width, height, HUB)


@pytest.mark.parametrize("height,width", [(1, 4000), (4000, 1), (1, 201)])
def test_extreme_aspect_ratios_are_refused_with_the_processors_message(processor, height, width):
    with pytest.raises(ValueError, match="absolute aspect ratio") as real:
        real_pipeline(processor, height, width)
    with pytest.raises(CountError) as got:
        hunyuan_vl.count(height, width, HUB)
    assert str(got.value) == str(real.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400), width=st.integers(1, 1400), longest=st.sampled_from([65536, 501760, 4194304])
)
def test_random_sizes_match_the_pipeline(processor, height, width, longest):
    s = hunyuan_vl.HunyuanSettings(min_pixels=1024, max_pixels=longest)
    if isinstance(mine(height, width, s), str):
        return
    assert_count_matches_pipeline(
        processor, height, width, s, size={"shortest_edge": 1024, "longest_edge": longest}
    )


@pytest.mark.parametrize("height,width", [(64, 96), (32, 32), (64, 128)])
def test_without_resize_whole_blocks_are_counted(processor, height, width):
    assert_count_matches_pipeline(
        processor, height, width, hunyuan_vl.HunyuanSettings(do_resize=False), do_resize=False
    )


@pytest.mark.parametrize("height,width", [(48, 64), (16, 32), (1, 1)])
def test_without_resize_partial_blocks_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        real_pipeline(processor, height, width, do_resize=False)
    with pytest.raises(CountError, match="do_resize is off"):
        hunyuan_vl.count(height, width, hunyuan_vl.HunyuanSettings(do_resize=False))


def test_count_exact_matches_count():
    model = load_model(str(FOLDER))
    sizes = [(1, 1), (8, 3), (300, 1000), (2048, 2080), (20, 4000)]
    exact = hunyuan_vl.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [hunyuan_vl.count(h, w, model.settings) for h, w in sizes]
    with pytest.raises(CountError, match="absolute aspect ratio"):
        hunyuan_vl.count_exact(model.image_processor, [image(1, 4000)], model.settings)


def test_transformers_helper_agrees(processor):
    sizes = [(1, 1), (480, 640), (8, 3), (3000, 4000), (20, 4000)]
    got = processor._get_num_multimodal_tokens(image_sizes=sizes)["num_image_tokens"]
    assert got == [hunyuan_vl.count(h, w, HUB).tokens for h, w in sizes]


# -- expansion, refusals, positions and whole prompts ------------------------------------------------


@pytest.mark.parametrize("grid", [(1, 32, 32), (1, 30, 40), (1, 2, 2)])
def test_expand_is_the_processors_replacement(processor, grid):
    count = hunyuan_vl.ImageCount(
        grid[1] * 16, grid[2] * 16, grid, hunyuan_vl.tokens_for_grid(grid[1], grid[2], HUB)
    )
    assert hunyuan_vl.expand(count, HUB) == (Run(TOKEN, count.tokens),)
    assert TOKEN * count.tokens == processor.replace_image_token({"image_grid_thw": np.array([grid])}, 0)


@pytest.mark.parametrize(
    "text", [TOKEN, hunyuan_vl.IMAGE_START + TOKEN, TOKEN + hunyuan_vl.IMAGE_END, "a" + TOKEN + "b"]
)
def test_an_unwrapped_image_token_is_refused_as_the_processor_refuses(processor, text):
    with pytest.raises(ValueError, match="must be formatted as"):
        processor(text=[text], images=[image(64, 64)])
    count = hunyuan_vl.count(64, 64, HUB)
    with pytest.raises(CountError, match="must be formatted as"):
        hunyuan_vl.compose(text, [hunyuan_vl.expand(count, HUB)], HUB)
    assert hunyuan_vl.compose(WRAPPED, [hunyuan_vl.expand(count, HUB)], HUB)[1] == Run(TOKEN, count.tokens)


@pytest.mark.parametrize("sizes", [[(1080, 1920)], [(1, 200), (600, 400)]])
def test_no_position_span_get_rope_index_keeps_sequence_positions(processor, sizes):
    """HunYuanVLModel.get_rope_index (where torch is: the reference venv): the first axis is the token's
    sequence index, so the largest position is the length minus one, as for a text model."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

    output = processor(
        text=["x" + WRAPPED * len(sizes) + "y"], images=[image(h, w) for h, w in sizes], return_tensors="pt"
    )
    config = SimpleNamespace(
        text_config=SimpleNamespace(rope_parameters={"mrope_section": [16, 16, 16, 16]}),
        vision_config=SimpleNamespace(spatial_merge_size=2),
    )
    stub = SimpleNamespace(config=config)
    stub.get_vision_position_ids = lambda *a, **k: HunYuanVLModel.get_vision_position_ids(stub, *a, **k)
    positions, deltas = HunYuanVLModel.get_rope_index(
        stub, output["input_ids"], output["mm_token_type_ids"], image_grid_thw=output["image_grid_thw"]
    )
    assert int(positions[0].max()) == output["input_ids"].shape[1] - 1
    assert int(deltas.max()) == 0 and hunyuan_vl.FAMILY.position_span is None


def conversation(n_images: int, text: str, system: str | None) -> list:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Some text."}]})
    return messages


@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1, 1)], [(1000, 300), (8, 3)], [(640, 480)] * 3])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes):
    """The checkpoint's template rendered by vlmlint and by the processor, then composed and tokenized
    without special tokens (the template writes the BOS): the same input_ids as processor(text, images)."""
    text = "Extract the text."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = (Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="Some text."),)))
    rendered = scanner.render(messages)
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text, None), tokenize=False)
    assert rendered.count(WRAPPED) == len(sizes)
    counts = [hunyuan_vl.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine_ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine_ids["input_ids"]) + saved == len(ids)
    tokenizer = processor.tokenizer
    assert ids.count(tokenizer.convert_tokens_to_ids(TOKEN)) == sum(c.tokens for c in counts)
    assert ids.count(tokenizer.convert_tokens_to_ids(hunyuan_vl.IMAGE_START)) == len(sizes)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<｜hy_begin▁of▁sentence｜>")
    assert ids.count(ids[0]) == 1  # no second BOS: add_special_tokens=False


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    built = harness.Built("hunyuan_vl", FOLDER, "HunYuanVLProcessor", WRAPPED, TOKEN, 0)
    processor = harness.real_processor(FOLDER)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids(TOKEN)
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob and the shrink hint -------------------------------------------------------------


def test_size_knob_is_qwen_vls():
    knob = knob_for("hunyuan_vl", HUB)
    assert isinstance(knob, Knob)
    assert (knob.name, knob.current, knob.step) == ("max_pixels", 4194304, 1024)
    saturation = qwen_vl.max_pixels_saturation(1080, 1920, 32)
    assert knob.shape(1080, 1920) == ((saturation,), saturation)


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    steps=st.lists(st.integers(1, 4000), min_size=2, max_size=6),
)
def test_size_knob_counts_never_drop_below_the_saturation_and_stay_above(height, width, steps):
    knob = hunyuan_vl.size_knob(HUB)
    if isinstance(mine(height, width, HUB), str):
        return
    drops, saturation = knob.shape(height, width)
    values = sorted({max(knob.low, v * knob.step) for v in steps})
    tokens = [hunyuan_vl.count(height, width, knob.settings_at(v)).tokens for v in values if v < min(drops)]
    assert tokens == sorted(tokens)
    at = hunyuan_vl.count(height, width, knob.settings_at(saturation)).tokens
    for v in (saturation + knob.step, saturation * 4):
        assert hunyuan_vl.count(height, width, knob.settings_at(v)).tokens == at


@pytest.mark.parametrize("height,width,limit", [(3000, 4000, 2.0), (8000, 8000, 4.0), (20000, 200, 2.0)])
def test_shrink_hint_names_a_bound_that_keeps_the_shrink_within_the_limit(height, width, limit):
    hint = hunyuan_vl.shrink_hint(height, width, limit, HUB)
    assert hint is not None and hint.startswith("set max_pixels >= ")
    value = int(hint.split(">= ")[1].split(" ")[0])
    s = hunyuan_vl.HunyuanSettings(min_pixels=262144, max_pixels=value)
    h, w = mine(height, width, s)
    assert h * w * limit >= height * width
    assert f"({hunyuan_vl.count(height, width, s).tokens} image tokens" in hint
