"""GLM-4.1V / GLM-4.6V (Glm4vProcessor, Glm46VProcessor): vlmlint's formula against the real classes.

The fixture folders (fixtures/families/glm4v.py) hold the hub's image settings: size 12544..9633792,
patch 14, temporal patch 2, merge 2 (factor 28; the pixel bounds are on 2 x the image's pixels).
"""

from __future__ import annotations

import json
import math
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
from vlmlint.models import CountError, ModelError, Run, glm4v, load_model
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "glm-4.1v-9b-thinking"
FOLDER_46V = PROCESSORS / "glm-4.6v"
HUB = glm4v.GlmSettings(shortest_edge=12544, longest_edge=9633792)


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def processor_46v():
    return harness.real_processor(FOLDER_46V)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_size(height: int, width: int, s: glm4v.GlmSettings) -> tuple[int, int] | str:
    from transformers.models.glm4v.image_processing_pil_glm4v import smart_resize

    try:
        return smart_resize(
            num_frames=s.temporal_patch_size,
            height=height,
            width=width,
            temporal_factor=s.temporal_patch_size,
            factor=s.resize_factor,
            min_pixels=s.shortest_edge,
            max_pixels=s.longest_edge,
        )
    except ValueError as exc:
        return str(exc)


def mine_size(height: int, width: int, s: glm4v.GlmSettings) -> tuple[int, int] | str:
    try:
        return glm4v.resized(height, width, s)
    except CountError as exc:
        return str(exc)


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    """What processor(text, images) gives for a one-image prompt as the template writes it."""
    tokenizer = processor.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(
            text=["<|begin_of_image|><|image|><|end_of_image|>"], images=[image(height, width)], **call_kwargs
        )
    ids = list(output["input_ids"][0])
    return {
        "tokens": ids.count(tokenizer.convert_tokens_to_ids("<|image|>")),
        "begin": ids.count(tokenizer.convert_tokens_to_ids("<|begin_of_image|>")),
        "end": ids.count(tokenizer.convert_tokens_to_ids("<|end_of_image|>")),
        "length": len(ids),
        "grid": tuple(int(v) for v in output["image_grid_thw"][0]),
    }


def assert_count_matches_pipeline(processor, height: int, width: int, s: glm4v.GlmSettings, **kw) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = glm4v.count(height, width, s)
    assert got.tokens == real["tokens"], (height, width, s)
    assert real["begin"] == real["end"] == 1
    assert real["length"] == got.tokens + 2
    assert got.grid == real["grid"]
    assert (got.resized_height, got.resized_width) == (real["grid"][1] * 14, real["grid"][2] * 14)


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "folder,processor_class,limit",
    [(FOLDER, "Glm4vProcessor", 65536), (FOLDER_46V, "Glm46VProcessor", 131072)],
)
def test_load_model_picks_glm4v_and_reads_the_hub_settings(folder, processor_class, limit):
    model = load_model(str(folder))
    assert model.family is glm4v.FAMILY
    assert family_for_class(processor_class) is glm4v.FAMILY
    assert model.processor_class == processor_class
    assert model.counted_by() == "formula (family glm4v)"
    assert model.settings == HUB
    assert model.family.placeholder == "<|image|>"
    assert model.family.raw_image_prompt == "<|begin_of_image|><|image|><|end_of_image|>"
    assert model.max_position_embeddings == limit


def test_class_defaults_where_the_files_say_nothing(tmp_path):
    """Without size in preprocessor_config.json, the class default 12544..11760000 (not the hub's)."""
    folder = tmp_path / "glm-defaults"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    del config["size"]
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings == glm4v.GlmSettings()
    assert model.settings.longest_edge == 28 * 28 * 15000


def test_a_changed_preprocessor_config_changes_the_count(tmp_path):
    folder = tmp_path / "glm-small"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["size"]["longest_edge"] = 2 * 28 * 28 * 64  # 64 merged patches at most
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings.longest_edge == 100352
    processor = harness.real_processor(folder)
    real = real_pipeline(processor, 1080, 1920)["tokens"]
    assert real == glm4v.count(1080, 1920, model.settings).tokens == 60
    assert glm4v.count(1080, 1920, HUB).tokens == 2691


def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path):
    """size in tokenizer_config.json wins over the image processor's (_merge_kwargs step 5)."""
    folder = tmp_path / "glm-tokenizer-size"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["size"] = {"shortest_edge": 3136, "longest_edge": 2 * 28 * 28 * 100}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.image_processor.size.longest_edge == 9633792
    assert (model.settings.shortest_edge, model.settings.longest_edge) == (3136, 156800)
    processor = harness.real_processor(folder)
    for height, width in [(600, 800), (20, 20), (1000, 3000)]:
        assert (
            real_pipeline(processor, height, width)["tokens"]
            == glm4v.count(height, width, model.settings).tokens
        )


@records(
    "5.24.0",
    "5.5.0's and 5.8.0's image processor accepts a size with only longest_edge, which vlmlint refuses on every release (not yet followed)",
)
def test_a_size_without_both_bounds_is_refused_as_the_image_processor_refuses(tmp_path):
    folder = tmp_path / "glm-no-edge"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config["size"] = {"longest_edge": 9633792}
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    processor = harness.real_processor(folder)
    with pytest.raises(ValueError, match="must contain 'shortest_edge' and 'longest_edge'"):
        real_pipeline(processor, 100, 100)
    with pytest.raises(ModelError, match="must contain 'shortest_edge' and 'longest_edge'"):
        load_model(str(folder))


# -- the resize --------------------------------------------------------------------------------

SIZE_EDGES = [
    (1, 1),  # lifted to 28 x 28, then enlarged to the 6272-pixel floor (84 x 84 after ceil)
    (1, 4000),  # lifted to 28 x 112000: ratio 4000, refused
    (4000, 1),
    (1, 200),  # lifted to 28 x 5600: ratio exactly 200, allowed
    (1, 201),
    (2, 401),  # lifted by 14 to 28 x 5614: ratio 200.5, refused
    (3, 7),  # scale 28/3: 3 * 9.333.. lifts to 28
    (27, 5000),
    (28, 5600),
    (28, 5601),
    (10, 10),
    (56, 56),  # 2 * 56 * 56 = 6272 < 12544: enlarged
    (79, 79),  # 2 * 84^2 = 14112 >= 12544: rounded only
    (42, 42),  # round(1.5) = 2: 56, then 2 * 56^2 < 12544: enlarged
    (70, 70),  # round(2.5) = 2 (half to even): 56, enlarged
    (126, 1000),  # round(4.5) = 4: 112
    (154, 1000),  # round(5.5) = 6: 168
    (1568, 1540),  # exactly 2 * h_bar * w_bar = 4829440 <= 9633792
    (2184, 2212),  # 2 * 2184 * 2212 = 9662016 > 9633792: shrunk
    (2184, 2184),
    (2185, 2185),
    (480, 640),
    (1080, 1920),
    (3000, 4000),
    (8000, 8000),
    (50, 10000),  # ratio 200
    (49, 10000),  # ratio above 200
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
def test_size_edges_match_the_real_function(height, width):
    assert mine_size(height, width, HUB) == real_size(height, width, HUB)
    assert mine_size(width, height, HUB) == real_size(width, height, HUB)


def test_the_edges_reach_each_branch():
    """Lifted, refused, enlarged, rounded half to even, and shrunk."""
    assert glm4v.resized(1, 1, HUB) == (84, 84)
    assert glm4v.resized(1, 200, HUB) == (28, 5600)
    with pytest.raises(CountError, match="absolute aspect ratio must be smaller than 200, got 4000.0"):
        glm4v.resized(1, 4000, HUB)
    assert glm4v.resized(42, 42, HUB) == (84, 84)  # 1.5 -> 2, then 2 * 56^2 < 12544: enlarged
    assert glm4v.resized(126, 1000, HUB) == (112, 1008)  # 4.5 -> 4 (half to even)
    assert glm4v.resized(154, 1000, HUB) == (168, 1008)  # 5.5 -> 6
    assert glm4v.resized(1568, 1540, HUB) == (1568, 1540)
    assert glm4v.resized(2184, 2212, HUB) == (2156, 2184)  # shrunk: 2 * h * w over the bound
    assert glm4v.count(1, 1, HUB) == glm4v.ImageCount(84, 84, (1, 6, 6), 9)


@settings(max_examples=150, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    patch_size=st.sampled_from([7, 14, 16]),
    merge_size=st.integers(1, 3),
    temporal=st.integers(1, 3),
    shortest=st.integers(1, 200_000),
    longest=st.integers(1, 20_000_000),
)
@example(height=3, width=7, patch_size=14, merge_size=2, temporal=2, shortest=12544, longest=9633792)
@example(height=1, width=200, patch_size=14, merge_size=2, temporal=2, shortest=12544, longest=9633792)
@example(height=2185, width=2185, patch_size=14, merge_size=2, temporal=2, shortest=12544, longest=9633791)
@example(height=1, width=1, patch_size=16, merge_size=1, temporal=3, shortest=1, longest=1)
def test_size_matches_the_real_function_for_any_settings(
    height, width, patch_size, merge_size, temporal, shortest, longest
):
    s = glm4v.GlmSettings(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=temporal,
        shortest_edge=shortest,
        longest_edge=longest,
    )
    assert mine_size(height, width, s) == real_size(height, width, s)


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 400), width=st.integers(1, 400))
def test_small_and_lifted_sides_match_the_real_function(height, width):
    """Sides under factor: the lift's truncated float scale, exactly."""
    assert mine_size(height, width, HUB) == real_size(height, width, HUB)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 200),
    (3, 7),
    (27, 28),
    (42, 42),
    (70, 70),
    (79, 79),
    (126, 1000),
    (154, 1000),
    (480, 640),
    (1568, 1540),
    (2184, 2212),
    (1080, 1920),
    (50, 10000),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, processor_46v, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)
    assert_count_matches_pipeline(processor_46v, width, height, HUB)


@pytest.mark.parametrize("height,width", [(1, 4000), (4000, 1), (49, 10000), (2, 401)])
def test_extreme_aspect_ratios_are_refused_with_the_processors_message(processor, height, width):
    with pytest.raises(ValueError, match="absolute aspect ratio") as real:
        real_pipeline(processor, height, width)
    with pytest.raises(CountError) as mine:
        glm4v.count(height, width, HUB)
    assert str(mine.value) == str(real.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1400),
    width=st.integers(1, 1400),
    longest=st.sampled_from([100352, 1003520, 9633792]),
)
def test_random_sizes_match_the_pipeline(processor, height, width, longest):
    s = glm4v.GlmSettings(shortest_edge=12544, longest_edge=longest)
    if isinstance(mine_size(height, width, s), str):
        return  # refused: test_extreme_aspect_ratios_... pins those
    size = {"shortest_edge": 12544, "longest_edge": longest}
    # call-time kwargs override the processor's defaults, as a user's collator would pass them
    assert_count_matches_pipeline(processor, height, width, s, size=size)


@pytest.mark.parametrize("height,width", [(56, 84), (28, 28), (560, 1120)])
def test_without_resize_whole_blocks_are_counted_as_they_are(processor, height, width):
    s = glm4v.GlmSettings(shortest_edge=12544, longest_edge=9633792, do_resize=False)
    assert_count_matches_pipeline(processor, height, width, s, do_resize=False)


@pytest.mark.parametrize("height,width", [(42, 56), (56, 30), (1, 1)])
def test_without_resize_partial_blocks_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        real_pipeline(processor, height, width, do_resize=False)
    with pytest.raises(CountError, match="not whole blocks"):
        glm4v.count(height, width, glm4v.GlmSettings(do_resize=False))


@pytest.mark.parametrize("folder", [FOLDER, FOLDER_46V])
def test_count_exact_matches_count(folder):
    model = load_model(str(folder))
    sizes = [(1, 1), (300, 1000), (1000, 300), (2184, 2212), (42, 42)]
    exact = glm4v.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [glm4v.count(h, w, model.settings) for h, w in sizes]


def test_count_exact_refuses_what_the_image_processor_refuses():
    model = load_model(str(FOLDER))
    with pytest.raises(CountError, match="absolute aspect ratio"):
        glm4v.count_exact(model.image_processor, [image(1, 4000)], model.settings)


@records(
    "5.24.0",
    "5.5.0's and 5.8.0's _get_num_multimodal_tokens disagrees with their own __call__ for large images (the whole-prompt tests, which pass there, compare __call__)",
)
def test_transformers_helper_agrees(processor):
    sizes = [(1, 1), (480, 640), (2184, 2212), (3000, 4000), (42, 42)]
    helper = processor._get_num_multimodal_tokens(image_sizes=sizes)
    assert helper["num_image_tokens"] == [glm4v.count(h, w, HUB).tokens for h, w in sizes]


# -- expansion, positions and whole prompts -------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


@pytest.mark.parametrize("grid", [(1, 4, 4), (1, 34, 46), (1, 2, 400)])
def test_expand_is_the_processors_replacement(processor, grid):
    count = glm4v.ImageCount(grid[1] * 14, grid[2] * 14, grid, grid[1] * grid[2] // 4)
    assert glm4v.expand(count, HUB) == (Run("<|image|>", count.tokens),)
    assert expanded(glm4v.expand(count, HUB)) == needs(processor, "replace_image_token")(
        {"image_grid_thw": np.array([grid])}, 0
    )


def test_position_span_is_the_longest_merged_side():
    assert glm4v.position_span(glm4v.count(1080, 1920, HUB), HUB) == 69
    assert glm4v.position_span(glm4v.count(1, 200, HUB), HUB) == 200
    wide = glm4v.GlmSettings(rope_merge_size=1)
    assert glm4v.position_span(glm4v.count(1080, 1920, wide), wide) == 138


@pytest.mark.parametrize("sizes", [[(1080, 1920)], [(1, 200), (600, 400)], [(42, 42)]])
def test_position_span_matches_get_rope_index(processor, sizes):
    """Glm4vModel.get_rope_index on the processor's own input_ids (runs where torch is, e.g. the
    reference venv): the last position equals the scanner's seq_len - tokens + spans - 1."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.glm4v.modeling_glm4v import Glm4vModel

    text = (
        "[gMASK]<sop><|user|>\n"
        + "<|begin_of_image|><|image|><|end_of_image|>x" * len(sizes)
        + "<|assistant|>\n"
    )
    output = processor(text=[text], images=[image(h, w) for h, w in sizes], return_tensors="pt")
    stub = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2)))
    stub.get_vision_position_ids = lambda *a, **k: Glm4vModel.get_vision_position_ids(stub, *a, **k)
    positions, _ = Glm4vModel.get_rope_index(
        stub, output["input_ids"], output["mm_token_type_ids"], image_grid_thw=output["image_grid_thw"]
    )
    counts = [glm4v.count(h, w, HUB) for h, w in sizes]
    seq_len = output["input_ids"].shape[1]
    spans = sum(glm4v.position_span(c, HUB) for c in counts)
    assert int(positions.max()) == seq_len - sum(c.tokens for c in counts) + spans - 1


def conversation(
    n_images: int, text: str, answer: str = "It is a picture.", system: str | None = None
) -> list:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


@pytest.mark.parametrize(
    "sizes",
    [[(300, 1000)], [(1, 1)], [(1000, 300), (42, 42)], [(2184, 2212), (1, 200)], [(640, 480)] * 3],
)
@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, sizes, system):
    """The fixture's chat template rendered by vlmlint and by the processor, then composed and
    tokenized by vlmlint: the same input_ids length and ids as processor(text, images)."""
    text = "Describe this image."
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    messages = [Message(Role.USER, parts), Message(Role.ASSISTANT, (Part(text="It is a picture."),))]
    if system is not None:
        messages.insert(0, Message(Role.SYSTEM, (Part(text=system),)))
    rendered = scanner.render(tuple(messages))
    assert rendered == processor.apply_chat_template(
        conversation(len(sizes), text, system=system), tokenize=False
    )
    assert rendered.count("<|begin_of_image|><|image|><|end_of_image|>") == len(sizes)
    counts = [glm4v.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    tokenizer = processor.tokenizer
    assert ids.count(tokenizer.convert_tokens_to_ids("<|image|>")) == sum(c.tokens for c in counts)
    for marker in ("<|begin_of_image|>", "<|end_of_image|>"):
        assert ids.count(tokenizer.convert_tokens_to_ids(marker)) == len(sizes)
    full = composed
    for count in counts:  # each run is written once: write it out in full to compare the ids
        full = full.replace(
            "<|begin_of_image|><|image|><|end_of_image|>",
            f"<|begin_of_image|>{chr(0) * count.tokens}<|end_of_image|>",
            1,
        )
    assert scanner.model.tokenizer(full.replace("\0", "<|image|>"))["input_ids"] == ids
    assert ids[:2] == [tokenizer.convert_tokens_to_ids("[gMASK]"), tokenizer.convert_tokens_to_ids("<sop>")]


@pytest.mark.parametrize(
    "folder,processor_class", [(FOLDER, "Glm4vProcessor"), (FOLDER_46V, "Glm46VProcessor")]
)
def test_scan_of_a_dataset_matches_the_processor(tmp_path, folder, processor_class):
    """vlmlint scan --model <fixture> against the real processor, row by row (one- and two-image rows)."""
    built = harness.Built("glm4v", folder, processor_class, "<|image|>", "<|image|>", 0)
    processor = harness.real_processor(folder)
    built.image_token_id = processor.tokenizer.convert_tokens_to_ids("<|image|>")
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)


# -- the size knob and the shrink hint ------------------------------------------------------------


def test_size_knob_is_longest_edge_on_the_t_factor_grid():
    knob = knob_for("glm4v", HUB)
    assert isinstance(knob, Knob)
    assert (knob.name, knob.current, knob.step, knob.low) == ("size.longest_edge", 9633792, 1568, 12544)
    assert knob.settings_at(1568 * 100).longest_edge == 156800
    assert "do_resize is false" in glm4v.size_knob(glm4v.GlmSettings(do_resize=False))


@settings(max_examples=100, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    steps=st.lists(st.integers(8, 6000), min_size=2, max_size=6),
)
def test_size_knob_counts_never_drop_below_the_saturation_and_stay_above(height, width, steps):
    """Between drops the count never decreases as the bound grows; from the saturation it stays."""
    knob = glm4v.size_knob(HUB)
    if isinstance(mine_size(height, width, HUB), str):
        return
    drops, saturation = knob.shape(height, width)
    values = sorted({max(knob.low, v * knob.step) for v in steps})
    below = [v for v in values if v < min(drops)]
    tokens = [glm4v.count(height, width, knob.settings_at(v)).tokens for v in below]
    assert tokens == sorted(tokens)
    at = glm4v.count(height, width, knob.settings_at(saturation)).tokens
    for v in (saturation, saturation + knob.step, saturation * 4):
        assert glm4v.count(height, width, knob.settings_at(v)).tokens == at


@pytest.mark.parametrize("height,width,limit", [(3000, 4000, 2.0), (8000, 8000, 4.0), (2184, 2212, 1.0)])
def test_shrink_hint_names_a_bound_that_keeps_the_shrink_within_the_limit(height, width, limit):
    hint = glm4v.shrink_hint(height, width, limit, HUB)
    assert hint is not None and hint.startswith("set size.longest_edge >= ")
    value = int(hint.split(">= ")[1].split(" ")[0])
    assert value % 1568 == 0
    h, w = glm4v.resized(height, width, glm4v.GlmSettings(longest_edge=value))
    assert h * w * limit >= height * width
    h, w = glm4v.resized(height, width, glm4v.GlmSettings(longest_edge=value - 1568))
    assert h * w * limit < height * width or value - 1568 < 1568
    assert math.isfinite(limit)
