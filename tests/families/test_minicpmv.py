"""Differential tests: vlmlint's MiniCPM-V 4.6 / 4.7 count and expansion against the real processors.

The real side is transformers' own code: MiniCPMV4_6ImageProcessorPil's get_sliced_grid,
find_best_resize and get_refine_size, its preprocess (target_sizes, grids), and MiniCPMV4_6Processor /
MiniCPMV4_7Processor built from the fixture folders (fixtures/support.py's real_processor: the video
processor, which needs torch, is a stub). Counts are <|image_pad|> ids in input_ids and the marker ids.
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
from vlmlint.models import CountError, Run, compat, load_model, minicpmv
from vlmlint.models.base import Knob
from vlmlint.models.registry import family_for_class, knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "minicpm-v-4.6"
FOLDER_4_7 = PROCESSORS / "minicpm-v-4.7"
# The fixture's settings are the class defaults; whether find_best_resize's rounding follows
# downsample_mode is the installed release's (5.23+; up to 5.20.2 it is patch_size * 4 in "4x" too).
_CLASS = compat.image_processor_class("MiniCPMV4_6ImageProcessor")  # None before 5.7.0: the tests skip
FOLLOWS = minicpmv.merge_follows_mode(_CLASS()) if _CLASS else True
HUB = minicpmv.MiniCPMVSettings(merge_follows_mode=FOLLOWS)
MARKERS = ("<image>", "</image>", "<slice>", "</slice>", "<image_id>", "</image_id>")


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def processor_4_7():
    if compat.missing_processor("MiniCPMV4_7Processor"):
        pytest.skip(compat.missing_processor("MiniCPMV4_7Processor"))
    return harness.real_processor(FOLDER_4_7)


@pytest.fixture(scope="module")
def image_processor(processor):
    return processor.image_processor


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def call(processor, text: str, images: list, **kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return processor(text=[text], images=images, return_tensors="np", **kwargs)


def real_plan(ip, height: int, width: int, s: minicpmv.MiniCPMVSettings):
    """The sizes _preprocess computes, from the real image processor's own methods (no pixels)."""
    grid = ip.get_sliced_grid((height, width), s.max_slice_nums, s.scale_resolution) if s.slice_mode else None
    # up to 5.20.2 the methods take no downsample_mode (the installed class's signature says which)
    mode = {"downsample_mode": s.downsample_mode} if minicpmv.merge_follows_mode(ip) else {}
    source = ip.find_best_resize(
        (height, width), s.scale_resolution, s.patch_size, allow_upscale=grid is None, **mode
    )
    refine = None
    if grid is not None:
        refine = ip.get_refine_size(
            (height, width), grid, s.scale_resolution, s.patch_size, allow_upscale=True, **mode
        )
    return (tuple(grid) if grid else None), tuple(source), (tuple(refine) if refine else None)


def mine_plan(height: int, width: int, s: minicpmv.MiniCPMVSettings):
    grid = minicpmv.sliced_grid(height, width, s) if s.slice_mode else None
    source = minicpmv.find_best_resize(height, width, s, allow_upscale=grid is None)
    refine = minicpmv.refine_size(height, width, grid, s) if grid else None
    return grid, source, refine


def real_pipeline(processor, height: int, width: int, **kwargs) -> dict:
    """What processor(text, images) gives for a one-image prompt: the token ids and the target sizes."""
    output = call(processor, "<|image_pad|>\nhi", [image(height, width)], **kwargs)
    ids = list(output["input_ids"][0])
    tokenizer = processor.tokenizer
    return {
        "tokens": ids.count(processor.image_token_id),
        "markers": {m: ids.count(tokenizer.convert_tokens_to_ids(m)) for m in MARKERS},
        "target_sizes": [tuple(int(v) for v in t) for t in output["target_sizes"]],
        "length": len(ids),
    }


def assert_count_matches_pipeline(processor, height: int, width: int, s, **kwargs) -> None:
    real = real_pipeline(processor, height, width, **kwargs)
    got = minicpmv.count(height, width, s)
    rows, cols, source_tokens, slice_tokens = got.grid
    assert got.tokens == real["tokens"], (height, width, s)
    n = rows * cols
    assert real["markers"]["<image>"] == real["markers"]["</image>"] == 1
    assert real["markers"]["<slice>"] == real["markers"]["</slice>"] == n
    assert real["markers"]["<image_id>"] == (1 if s.use_image_id else 0)
    divisor = s.token_divisor
    assert [h * w // divisor for h, w in real["target_sizes"]] == [source_tokens] + [slice_tokens] * n


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_each_family_and_reads_the_settings():
    model = load_model(str(FOLDER))
    assert model.family is minicpmv.FAMILY
    assert model.counted_by() == "formula (family minicpmv)"
    assert model.settings == HUB
    assert model.family.placeholder == "<|image_pad|>"
    assert model.max_position_embeddings == 32768
    assert model.family.position_span is None  # 4.6 passes no position ids: 1-D
    assert family_for_class("MiniCPMV4_6Processor").name == "minicpmv"
    assert family_for_class("MiniCPMV4_7Processor").name == "minicpmv4_7"
    if compat.missing_processor("MiniCPMV4_7Processor"):
        return  # 4.7 came in transformers 5.18.0: load_model refuses it (tests/test_transformers_versions.py)
    model = load_model(str(FOLDER_4_7))
    assert model.family is minicpmv.FAMILY_4_7
    assert model.settings == HUB
    assert model.family.position_span is minicpmv.canvas_position_span


def _copy(tmp_path, name: str):
    folder = tmp_path / name
    shutil.copytree(FOLDER, folder)
    return folder


def _edit(path, **values) -> None:
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def test_preprocessor_config_values_change_the_count(tmp_path):
    folder = _copy(tmp_path, "minicpmv-small")
    _edit(folder / "preprocessor_config.json", scale_resolution=224, max_slice_nums=4, use_image_id=False)
    model = load_model(str(folder))
    assert (model.settings.scale_resolution, model.settings.max_slice_nums) == (224, 4)
    assert not model.settings.use_image_id
    processor = harness.real_processor(folder)
    real = real_pipeline(processor, 1080, 1920)
    assert (
        real["tokens"]
        == minicpmv.count(1080, 1920, model.settings).tokens
        != minicpmv.count(1080, 1920, HUB).tokens
    )
    assert real["markers"]["<image_id>"] == 0


def test_tokenizer_init_kwargs_override_the_image_processor(tmp_path):
    """max_slice_nums / downsample_mode in tokenizer_config.json win (_merge_kwargs step 5)."""
    folder = _copy(tmp_path, "minicpmv-kwargs")
    _edit(folder / "tokenizer_config.json", max_slice_nums=2, downsample_mode="4x", use_image_id=False)
    model = load_model(str(folder))
    assert model.image_processor.max_slice_nums == 9
    assert (model.settings.max_slice_nums, model.settings.downsample_mode) == (2, "4x")
    assert not model.settings.use_image_id
    processor = harness.real_processor(folder)
    real = real_pipeline(processor, 1080, 1920)
    mine = minicpmv.count(1080, 1920, model.settings)
    assert real["tokens"] == mine.tokens and mine.grid[:2] == (1, 2)
    assert real["markers"]["<image_id>"] == 0


def test_a_tokenizer_without_slice_markers_is_refused_like_the_processor(tmp_path):
    folder = _copy(tmp_path, "minicpmv-no-slice")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["extra_special_tokens"]["slice_start_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(AttributeError):
        harness.real_processor(folder)
    from vlmlint.models import ModelError

    with pytest.raises(ModelError, match="slice_start_token"):
        load_model(str(folder))


# -- the sizes -----------------------------------------------------------------------------------

SIZE_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 100000),
    (100000, 1),
    (3, 7),
    (14, 14),
    (448, 448),  # exactly scale_resolution^2: no slices, not shrunk
    (448, 449),  # just above: two slices
    (447, 448),
    (500, 1000),
    (1000, 500),
    (896, 896),  # ratio 4: 2x2
    (1344, 1344),  # ratio 9: 3x3
    (1345, 1344),  # ratio just above 9: still at most 9 slices
    (1080, 1920),
    (3000, 4000),
    (8000, 8000),
    (100, 5000),
    (27, 28),  # a 56-px multiple at half: round half to even
    (84, 84),
    (140, 140),
]


@pytest.mark.parametrize("height,width", SIZE_EDGES)
@pytest.mark.parametrize("mode", ["16x", "4x"])
@pytest.mark.parametrize("max_slice_nums", [1, 2, 9, 36])
def test_size_edges_match_the_real_functions(image_processor, height, width, mode, max_slice_nums):
    s = dataclasses.replace(HUB, downsample_mode=mode, max_slice_nums=max_slice_nums)
    assert mine_plan(height, width, s) == real_plan(image_processor, height, width, s)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 20000),
    width=st.integers(1, 20000),
    max_slice_nums=st.integers(1, 40),
    scale=st.sampled_from([224, 336, 448, 450, 980]),
    patch=st.sampled_from([14, 16]),
    mode=st.sampled_from(["16x", "4x"]),
)
@example(height=1, width=20000, max_slice_nums=9, scale=448, patch=14, mode="16x")
@example(height=20000, width=20000, max_slice_nums=40, scale=448, patch=14, mode="4x")
def test_sizes_match_the_real_functions_for_any_settings(
    image_processor, height, width, max_slice_nums, scale, patch, mode
):
    s = dataclasses.replace(
        HUB, max_slice_nums=max_slice_nums, scale_resolution=scale, patch_size=patch, downsample_mode=mode
    )
    assert mine_plan(height, width, s) == real_plan(image_processor, height, width, s)


def test_the_edges_reach_each_branch():
    """Upscaled without slices, shrunk without slices, sliced (1x2, 2x4, 3x3), the 9-slice cap."""
    assert minicpmv.count(1, 1, HUB) == minicpmv.ImageCount(448, 448, (0, 0, 64, 0), 64)
    assert minicpmv.count(448, 448, HUB).grid == (0, 0, 64, 0)
    assert minicpmv.count(448, 449, HUB).grid[:2] == (1, 2)
    assert minicpmv.count(1080, 1920, HUB).grid == (2, 4, 66, 64)
    assert minicpmv.count(1344, 1344, HUB).grid[:2] == (3, 3)
    assert minicpmv.count(8000, 8000, HUB).grid[:2] == (3, 3)
    assert minicpmv.count(1, 4000, HUB) == minicpmv.ImageCount(56, 28000, (0, 0, 500, 0), 500)


# -- the whole pipeline --------------------------------------------------------------------------

PIPELINE_EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (3, 7),
    (448, 448),
    (448, 449),
    (500, 1000),
    (1000, 500),
    (896, 896),
    (1344, 1344),
    (1080, 1920),
    (100, 5000),
    (27, 28),
]


@pytest.mark.parametrize("height,width", PIPELINE_EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)


@pytest.mark.parametrize("height,width", [(1, 1), (500, 1000), (1080, 1920), (1, 4000)])
def test_pipeline_edges_4_7(processor_4_7, height, width):
    assert_count_matches_pipeline(processor_4_7, height, width, HUB)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"downsample_mode": "4x"},
        {"max_slice_nums": 1},
        {"max_slice_nums": 2, "downsample_mode": "4x"},
        {"max_slice_nums": 20},
        {"scale_resolution": 224},
        {"slice_mode": False},
        {"use_image_id": False},
    ],
)
@pytest.mark.parametrize("height,width", [(1, 1), (700, 1300), (1080, 1920), (2000, 300)])
def test_pipeline_with_call_kwargs(processor, height, width, kwargs):
    s = dataclasses.replace(HUB, **kwargs)
    assert_count_matches_pipeline(processor, height, width, s, **kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1500),
    width=st.integers(1, 1500),
    max_slice_nums=st.integers(1, 12),
    mode=st.sampled_from(["16x", "4x"]),
)
def test_random_sizes_match_the_pipeline(processor, height, width, max_slice_nums, mode):
    s = dataclasses.replace(HUB, max_slice_nums=max_slice_nums, downsample_mode=mode)
    assert_count_matches_pipeline(
        processor, height, width, s, max_slice_nums=max_slice_nums, downsample_mode=mode
    )


@pytest.mark.parametrize("height,width", [(448, 448), (56, 112), (14, 28), (448, 896), (896, 896)])
def test_without_resize_whole_slices_are_counted_as_they_are(processor, height, width):
    s = dataclasses.replace(HUB, do_resize=False)
    assert_count_matches_pipeline(processor, height, width, s, do_resize=False)


@pytest.mark.parametrize("height,width", [(50, 64), (1, 1), (449, 448), (462, 910)])
def test_without_resize_ragged_images_are_refused(processor, height, width):
    with pytest.raises(ValueError):
        call(processor, "<|image_pad|>", [image(height, width)], do_resize=False)
    with pytest.raises(CountError, match="do_resize off"):
        minicpmv.count(height, width, dataclasses.replace(HUB, do_resize=False))


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (1080, 1920), (1, 4000)])
def test_count_exact_matches_count(height, width):
    model = load_model(str(FOLDER))
    images = [image(height, width), image(width, height)]
    exact = minicpmv.count_exact(model.image_processor, images, model.settings)
    assert exact == [
        minicpmv.count(height, width, model.settings),
        minicpmv.count(width, height, model.settings),
    ]


def test_a_placeholder_without_its_image_is_refused(processor, processor_4_7):
    for real in (processor, processor_4_7):
        with pytest.raises(ValueError, match="number of"):
            call(real, "<|image_pad|><|image_pad|>", [image(10, 10)])
    with pytest.raises(CountError, match="2 image placeholders in the text for 1 images"):
        minicpmv.compose(
            "<|image_pad|><|image_pad|>", [minicpmv.expand(minicpmv.count(10, 10, HUB), HUB)], HUB
        )


# -- expansion and whole prompts -----------------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


@pytest.mark.parametrize("height,width", [(1, 1), (500, 1000), (1080, 1920), (1344, 1344), (2000, 300)])
def test_expand_is_the_processors_replacement(processor, height, width):
    count = minicpmv.count(height, width, HUB)
    processed = processor.image_processor([image(height, width)])
    assert expanded(minicpmv.expand(count, HUB)) == needs(processor, "replace_image_token")(
        processed, 0, image_token_divisor=16
    )
    rows, cols, _, _ = count.grid
    if rows:
        assert expanded(minicpmv.expand(count, HUB)).count("\n") == rows - 1


def test_image_ids_count_the_images_of_one_sample(processor):
    expansions = [minicpmv.expand(minicpmv.count(h, w, HUB), HUB) for h, w in [(10, 10), (600, 900)]]
    text = expanded(minicpmv.compose("a<|image_pad|>b<|image_pad|>c", expansions, HUB))
    assert text.startswith("a<image_id>0</image_id><image>") and "b<image_id>1</image_id><image>" in text
    real = call(processor, "a<|image_pad|>b<|image_pad|>c", [image(10, 10), image(600, 900)])
    assert processor.tokenizer(text)["input_ids"] == list(real["input_ids"][0])
    plain = dataclasses.replace(HUB, use_image_id=False)
    assert "<image_id>" not in expanded(minicpmv.compose("<|image_pad|>", expansions[:1], plain))


def conversation(n_images: int, text: str, answer: str | None = "It is a picture.") -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


# folder names, not paths: tests/conftest.py skips the 4.7 cases where its processor is missing
@pytest.mark.parametrize("folder", [FOLDER.name, FOLDER_4_7.name], ids=["4.6", "4.7"])
@pytest.mark.parametrize(
    "sizes",
    [[(300, 1000)], [(1, 1)], [(1000, 300), (448, 448)], [(1080, 1920), (1, 4000)], [(640, 480)] * 3],
)
@pytest.mark.parametrize("text", ["Describe this image.", "  What is here?\n"])
def test_whole_prompt_input_ids_match_the_processor(folder, sizes, text):
    """The fixture's chat template rendered by vlmlint and by the processor, then composed and
    tokenized by vlmlint: the same input_ids length and ids as processor(text, images)."""
    folder = PROCESSORS / folder
    processor = harness.real_processor(folder)
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)))
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    answer = Message(Role.ASSISTANT, (Part(text="It is a picture."),))
    rendered = scanner.render((Message(Role.USER, parts), answer))
    assert rendered == processor.apply_chat_template(conversation(len(sizes), text), tokenize=False)
    counts = [minicpmv.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    output = call(processor, rendered, [image(h, w) for h, w in sizes])
    ids = list(output["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    segments = minicpmv.compose(
        rendered, [minicpmv.expand(c, scanner.model.settings) for c in counts], scanner.model.settings
    )
    assert scanner.model.tokenizer(expanded(segments))["input_ids"] == ids


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    """vlmlint scan --model <fixture> against the real processor, row by row (one- and two-image rows)."""
    for folder, cls in ((FOLDER, "MiniCPMV4_6Processor"), (FOLDER_4_7, "MiniCPMV4_7Processor")):
        if compat.missing_processor(cls):
            continue  # 4.7 came in transformers 5.18.0
        built = harness.Built("minicpmv", folder, cls, "<|image_pad|>", "<|image_pad|>", 0)
        processor = harness.real_processor(folder)
        built.image_token_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        dataset = harness.build_dataset(tmp_path / folder.name)
        reference = harness.reference_counts(built, dataset)
        _, counted = harness.vlmlint_counts(built, dataset)
        assert [(r.seq_len, r.image_tokens) for r in counted] == [
            (r.seq_len, r.image_tokens) for r in reference
        ]
        assert all(r.seq_len for r in reference)


# -- the size knob -------------------------------------------------------------------------------


def test_the_knob_is_max_slice_nums():
    knob = knob_for(minicpmv.FAMILY, HUB)
    assert isinstance(knob, Knob) and knob.name == "max_slice_nums" and knob.current == 9
    assert (knob.step, knob.low, knob.open_ended, knob.text_unchanged) == (1, 1, True, False)
    assert knob.shape(448, 448) == ((), 1)
    assert knob.shape(1080, 1920)[1] == 12  # ratio 10.3: ceil 11, + 1
    assert "slice_mode is off" in knob_for(minicpmv.FAMILY, dataclasses.replace(HUB, slice_mode=False))


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 3000), width=st.integers(1, 3000), mode=st.sampled_from(["16x", "4x"]))
@example(height=100, width=5000, mode="16x")
def test_between_drops_the_expansion_never_shrinks(height, width, mode):
    s = dataclasses.replace(HUB, downsample_mode=mode)
    drops, saturation = knob_for(minicpmv.FAMILY, s).shape(height, width)
    lengths = {}
    for value in range(1, saturation + 4):
        at = dataclasses.replace(s, max_slice_nums=value)
        lengths[value] = minicpmv.expansion_length(minicpmv.count(height, width, at), at)
    for value in range(2, saturation + 4):
        if value not in drops:
            assert lengths[value] >= lengths[value - 1], (value, lengths)
    assert all(lengths[v] == lengths[saturation] for v in range(saturation, saturation + 4))


# -- MiniCPM-V 4.7's canvas positions ------------------------------------------------------------


@pytest.mark.parametrize("use_image_id", [True, False])
@pytest.mark.parametrize(
    "sizes", [[(1080, 1920)], [(1, 1)], [(500, 1000), (600, 400)], [(1344, 1344)], [(100, 5000)]]
)
def test_position_span_matches_get_rope_index(processor_4_7, sizes, use_image_id):
    """MiniCPMV4_7Model.get_rope_index on the processor's own input_ids (runs where torch is, e.g. the
    reference venv): the last position equals the scanner's seq_len - tokens + spans - 1 (text after
    each image that is no marker, as here, keeps its own positions)."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import MiniCPMV4_7Model

    config = json.loads((FOLDER_4_7 / "config.json").read_text())
    text = "<|im_start|>user\n" + "<|image_pad|>x" * len(sizes) + "<|im_end|>\n"
    output = processor_4_7(
        text=[text], images=[image(h, w) for h, w in sizes], return_tensors="pt", use_image_id=use_image_id
    )
    stub = SimpleNamespace(config=SimpleNamespace(downsample_mode="16x", **{
        k: config[k] for k in ("image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id")
    }))  # fmt: skip
    for name in ("_group_visual_frames", "get_vision_position_ids"):
        setattr(stub, name, getattr(MiniCPMV4_7Model, name).__get__(stub))
    stub._frame_end_idx = MiniCPMV4_7Model._frame_end_idx
    positions, _ = MiniCPMV4_7Model.get_rope_index(
        stub, output["input_ids"], output["mm_token_type_ids"], target_sizes=output["target_sizes"]
    )
    s = dataclasses.replace(HUB, use_image_id=use_image_id)
    counts = [minicpmv.count(h, w, s) for h, w in sizes]
    seq_len = output["input_ids"].shape[1]
    spans = sum(minicpmv.canvas_position_span(c, s) for c in counts)
    assert int(positions.max()) == seq_len - sum(c.tokens for c in counts) + spans - 1
