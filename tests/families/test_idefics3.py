"""Differential tests: vlmlint's Idefics3 / SmolVLM formula against the real transformers classes.

The image processors compared are the real `Idefics3ImageProcessorPil` / `SmolVLMImageProcessorPil`;
the text is compared with the real `Idefics3Processor` / `SmolVLMProcessor` input_ids, token for token.
Geometry-only checks turn off rescale/normalize and use nearest resampling: neither changes a size.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import FIXTURES, PROCESSORS
from tests.families._releases import needs, records
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, idefics3, load_model
from vlmlint.models.base import compose_default
from vlmlint.records import ImageInfo

# name -> (size.longest_edge, max_image_size, image_seq_len) of the hub checkpoints
HUB = {
    "idefics3-8b-llama3": (1456, 364, 169),
    "smolvlm-instruct": (1536, 384, 81),
    "smolvlm-256m-instruct": (2048, 512, 64),
}
FOLDERS = sorted(HUB)


def _fixture_module():
    spec = importlib.util.spec_from_file_location(
        "fixture_family_idefics3", FIXTURES / "families" / "idefics3.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def image_processor_class(smolvlm: bool = False):
    if smolvlm:
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

        return SmolVLMImageProcessorPil
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    return Idefics3ImageProcessorPil


def geometry_processor(longest_edge, tile, split=True, do_resize=True, smolvlm=False, size=None):
    return image_processor_class(smolvlm)(
        size=size or {"longest_edge": longest_edge},
        max_image_size={"longest_edge": tile},
        do_image_splitting=split,
        do_resize=do_resize,
        do_rescale=False,
        do_normalize=False,
        resample=0,
    )


def blank(height: int, width: int) -> Image.Image:
    return Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))


def real_geometry(processor, height: int, width: int):
    """(rows, cols), the size the real processor splits (or M x M without splitting), frames returned."""
    seen = []
    split_images = processor.split_images

    def spy(image, **kwargs):
        seen.append(tuple(image.shape[-2:]))
        return split_images(image, **kwargs)

    processor.split_images = spy
    try:
        output = processor(images=[blank(height, width)], return_row_col_info=True)
    finally:
        del processor.split_images
    frames = np.asarray(output["pixel_values"]).shape
    size = seen[0] if seen else tuple(frames[-2:])
    return (int(output["rows"][0][0]), int(output["cols"][0][0])), size, frames[1]


def settings_for(longest_edge, tile, seq=1, split=True, do_resize=True, size=None):
    size = size or {}
    return idefics3.Idefics3Settings(
        image_seq_len=seq,
        max_image_size=tile,
        longest_edge=None if size else longest_edge,
        do_resize=do_resize,
        do_image_splitting=split,
        size_height=size.get("height"),
        size_width=size.get("width"),
    )


def assert_geometry(height, width, longest_edge, tile, split=True, do_resize=True, smolvlm=False, size=None):
    processor = geometry_processor(longest_edge, tile, split, do_resize, smolvlm, size)
    grid, resized, frames = real_geometry(processor, height, width)
    got = idefics3.count(height, width, settings_for(longest_edge, tile, 7, split, do_resize, size))
    assert got.grid == grid
    assert (got.resized_height, got.resized_width) == resized
    assert got.tokens == 7 * frames  # image_seq_len per frame: tiles + global image
    return got


# -- the formula against the real image processors ------------------------------------------------

# For L = 1456, M = 364: 1456 x 364 stays, 1456 x 365 -> short side 366 (even) -> 2 rows; 2912 x 729
# -> int(364.5) = 364 -> 1 row; 2912 x 730 -> 365 -> 366 -> 2 rows; squares take the width branch.
EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (199, 1),
    (200, 1),
    (201, 1),
    (2, 3),
    (16, 16),
    (363, 1456),
    (364, 1456),
    (365, 1456),
    (1456, 365),
    (728, 2912),
    (729, 2912),
    (730, 2912),
    (364, 364),
    (364, 365),
    (365, 364),
    (1456, 1456),
    (1455, 1456),
    (1457, 1456),
    (1080, 1920),
    (4000, 3000),
]


@pytest.mark.parametrize("height,width", EDGES)
def test_idefics3_hub_geometry_matches_real_image_processor(height, width):
    assert_geometry(height, width, 1456, 364)


@pytest.mark.parametrize(
    "height,width", [(1, 1), (1, 4000), (384, 1536), (385, 1536), (1536, 385), (1080, 1920), (767, 3072)]
)
def test_smolvlm_instruct_geometry_matches_real_image_processor(height, width):
    assert_geometry(height, width, 1536, 384)


@pytest.mark.parametrize(
    "height,width", [(1, 1), (4000, 1), (512, 2048), (513, 2048), (2048, 513), (1080, 1920), (3000, 4000)]
)
def test_smolvlm2_processor_class_geometry_matches(height, width):
    assert_geometry(height, width, 2048, 512, smolvlm=True)


@pytest.mark.parametrize("height,width", [(1, 1), (300, 700), (700, 300), (364, 364)])
def test_without_splitting_every_image_is_one_tile(height, width):
    got = assert_geometry(height, width, 1456, 364, split=False)
    assert got.grid == (0, 0) and (got.resized_height, got.resized_width) == (364, 364)


@pytest.mark.parametrize("height,width", [(1, 1), (100, 37), (365, 364), (900, 1300)])
def test_without_resize_the_original_size_is_split(height, width):
    assert_geometry(height, width, 1456, 364, do_resize=False)


def test_fixed_height_width_size():
    assert_geometry(123, 456, None, 100, size={"height": 250, "width": 180})


def test_the_4096_cap_on_huge_resizes():
    # longest_edge 5000 > 4096: the resized long side is capped at 4096 (then 4 tiles of 1024).
    got = assert_geometry(10, 4000, 5000, 1024)
    assert (got.resized_height, got.resized_width) == (1024, 4096)
    assert idefics3.resized_size(10, 4000, settings_for(5000, 1024)) == (9, 4096)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 700),
    width=st.integers(1, 700),
    tile=st.integers(24, 160),
    edge_tiles=st.floats(0.5, 4.5),
    split=st.booleans(),
    do_resize=st.booleans(),
    smolvlm=st.booleans(),
)
@example(height=100, width=37, tile=30, edge_tiles=3.4, split=True, do_resize=True, smolvlm=False)
@example(height=7, width=1, tile=31, edge_tiles=1.0, split=True, do_resize=True, smolvlm=True)
def test_random_sizes_and_settings_match_real_image_processor(
    height, width, tile, edge_tiles, split, do_resize, smolvlm
):
    longest_edge = max(1, round(tile * edge_tiles))  # often not a multiple of the tile
    assert_geometry(height, width, longest_edge, tile, split, do_resize, smolvlm)


def test_empty_image_is_refused():
    with pytest.raises(CountError):
        idefics3.count(0, 10, settings_for(1456, 364))


# -- the fixture processors: settings, expansion, input_ids ---------------------------------------


@pytest.fixture(scope="module")
def smolvlm2_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("smolvlm2") / "smolvlm2-500m-video-instruct"
    _fixture_module().smolvlm2_files(folder)
    return folder


def real_processor(folder: Path):
    """The real processor class from the folder's files (SmolVLM2 without its video half)."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    config = json.loads((folder / "processor_config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        image_processor = AutoImageProcessor.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    kwargs = dict(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=config["image_seq_len"],
        chat_template=(folder / "chat_template.jinja").read_text(),
    )
    if config["processor_class"] == "Idefics3Processor":
        return transformers.Idefics3Processor(**kwargs)
    from transformers.models.smolvlm import processing_smolvlm

    if processing_smolvlm.num2words is None:  # only video prompts spell numbers; images never do
        processing_smolvlm.num2words = str

    class WithoutVideo(transformers.SmolVLMProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return WithoutVideo(video_processor=None, **kwargs)


def all_folders(smolvlm2_folder) -> list[Path]:
    return [PROCESSORS / name for name in FOLDERS] + [smolvlm2_folder]


def test_fixture_settings_are_the_hub_settings(smolvlm2_folder):
    for folder in all_folders(smolvlm2_folder):
        model = load_model(str(folder))
        assert model.family is idefics3.FAMILY
        longest_edge, tile, seq = HUB.get(folder.name, (2048, 512, 64))
        s = model.settings
        assert (s.longest_edge, s.max_image_size, s.image_seq_len) == (longest_edge, tile, seq)
        assert s.do_resize and s.do_image_splitting
        # config.json's vision geometry gives the same per-tile feature count as the processor writes
        assert s.model_image_seq_len == seq
        processor = real_processor(folder)
        assert processor.image_seq_len == seq and processor.image_token == idefics3.PLACEHOLDER


SIZES = [(1, 1), (300, 700), (700, 300), (364, 1456), (365, 1456), (1080, 1920), (27, 5400), (512, 512)]
PROMPT = (
    "<|im_start|>User:<image>What is in the picture?<end_of_utterance>\nAssistant: A cat.<end_of_utterance>\n"
)


def vlmlint_ids(model, text: str, counts) -> list[int]:
    """The processor's text as vlmlint composes it (runs written out), tokenized as the engine does."""
    segments = compose_default(
        text, model.family.placeholder, [model.family.expand(c, model.settings) for c in counts]
    )
    full = "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)
    return model.tokenizer(full, add_special_tokens=model.family.add_special_tokens)["input_ids"]


@pytest.mark.parametrize("name", FOLDERS + ["smolvlm2"])
def test_input_ids_equal_the_real_processor(name, smolvlm2_folder):
    folder = smolvlm2_folder if name == "smolvlm2" else PROCESSORS / name
    model = load_model(str(folder))
    processor = real_processor(folder)
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)), model=model)
    for height, width in SIZES:
        image = blank(height, width)
        count = idefics3.count(height, width, model.settings)
        assert idefics3.count_exact(model.image_processor, [image], model.settings) == [count]
        ids = list(processor(text=[PROMPT], images=[image])["input_ids"][0])
        assert vlmlint_ids(model, PROMPT, [count]) == ids, (name, height, width)
        assert count.tokens == ids.count(processor.image_token_id)
        # the engine's compose: one token per run, the rest counted
        info = ImageInfo("x", width, height, None, None, None, None, *_sizes(count))
        text, saved = scanner.compose(PROMPT, (info,))
        assert len(model.tokenizer(text)["input_ids"]) + saved == len(ids)


def _sizes(count):
    return count.resized_width, count.resized_height, count.grid, count.tokens


def test_two_images_in_one_row(smolvlm2_folder):
    folder = PROCESSORS / "smolvlm-256m-instruct"
    model = load_model(str(folder))
    processor = real_processor(folder)
    text = "<|im_start|>User:<image>and<image>?<end_of_utterance>\n"
    images = [blank(600, 900), blank(40, 30)]
    counts = [idefics3.count(600, 900, model.settings, 2), idefics3.count(40, 30, model.settings, 2)]
    assert idefics3.count_exact(model.image_processor, images, model.settings) == counts
    ids = list(processor(text=[text], images=images)["input_ids"][0])
    assert vlmlint_ids(model, text, counts) == ids


def test_chat_template_writes_the_placeholder_and_bos_is_doubled_for_idefics3():
    """Idefics3's template starts with <|begin_of_text|> and the Llama 3 tokenizer adds another one:
    processor(text=apply_chat_template(...)) really gives two BOS ids; vlmlint counts both."""
    folder = PROCESSORS / "idefics3-8b-llama3"
    processor = real_processor(folder)
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True)
    assert text == "<|begin_of_text|>User:<image>Hi<end_of_utterance>\nAssistant:"
    ids = list(processor(text=[text], images=[blank(50, 50)])["input_ids"][0])
    bos = processor.tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    assert ids[:2] == [bos, bos] and ids.count(bos) == 2
    smol = real_processor(PROCESSORS / "smolvlm-instruct")
    text = smol.apply_chat_template(conversation, add_generation_prompt=True)
    assert text == "<|im_start|>User:<image>Hi<end_of_utterance>\nAssistant:"
    ids = list(smol(text=[text], images=[blank(50, 50)])["input_ids"][0])
    assert ids.count(smol.tokenizer.convert_tokens_to_ids("<|im_start|>")) == 1  # SmolLM2 adds no BOS


def test_expansion_text_matches_replace_image_token():
    model = load_model(str(PROCESSORS / "smolvlm-instruct"))
    processor = real_processor(PROCESSORS / "smolvlm-instruct")
    for rows, cols in [(0, 0), (1, 2), (3, 4), (4, 1)]:
        count = idefics3.ImageCount(0, 0, (rows, cols), 81 * (rows * cols + 1))
        text = "".join(
            s.token * s.count if isinstance(s, Run) else s for s in idefics3.expand(count, model.settings)
        )
        assert text == needs(processor, "replace_image_token")({"rows": [[rows]], "cols": [[cols]]}, 0)


# -- transformers' own helpers: where they disagree with the pipeline ------------------------------


def real_span(processor, height: int, width: int) -> int:
    """Tokens one image's expansion really takes: the input_ids of "<image>" alone, no BOS."""
    output = processor(text=["<image>"], images=[blank(height, width)], add_special_tokens=False)
    return len(output["input_ids"][0])


def _helper_counts_run_only() -> bool:
    """transformers 5.25 changed Idefics3Processor._get_num_multimodal_tokens (processing_idefics3.py)
    from the whole span to the image-token run: image_seq_len * (rows * cols + 1), the <image> ids, and
    rows * cols + 1 patches (1, not 0, for one tile)."""
    from packaging.version import Version

    from vlmlint.models import compat

    return Version(compat.transformers_version()) >= Version("5.25.0")


@records(
    "5.24.0",
    "5.5.0's and 5.8.0's _get_num_multimodal_tokens is one token off their own __call__ (the whole-prompt tests compare __call__)",
)
@pytest.mark.parametrize("height,width", [(50, 50), (300, 700), (1080, 1920)])
def test_get_num_multimodal_tokens_matches_when_markers_are_single_tokens(height, width):
    """SmolVLM-256M's tokenizer has <global-img> and <row_i_col_j>: the helper counts the whole span."""
    processor = real_processor(PROCESSORS / "smolvlm-256m-instruct")
    helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])
    count = idefics3.count(height, width, load_model(str(PROCESSORS / "smolvlm-256m-instruct")).settings)
    rows, cols = count.grid
    if _helper_counts_run_only():
        assert helper["num_image_tokens"] == [count.tokens]  # the <image> ids, short of the span
        assert count.tokens < real_span(processor, height, width)
        assert helper["num_image_patches"] == [rows * cols + 1]
        return
    assert helper["num_image_tokens"] == [real_span(processor, height, width)]
    assert helper["num_image_tokens"][0] > count.tokens  # the span, not the <image> ids
    assert helper["num_image_patches"] == [rows * cols + 1 if rows else 0]  # 0, not 1, for one tile


@pytest.mark.parametrize("name", ["idefics3-8b-llama3", "smolvlm-instruct"])
def test_get_num_multimodal_tokens_undercounts_text_markers(name):
    """Idefics3-8B and SmolVLM-Instruct have no <global-img> / <row_i_col_j> tokens: the markers are
    tokenized as text, but the helper counts each as one token, so it is short of the real span."""
    processor = real_processor(PROCESSORS / name)
    for height, width in [(50, 50), (1080, 1920)]:
        helper = processor._get_num_multimodal_tokens(image_sizes=[(height, width)])["num_image_tokens"][0]
        assert helper < real_span(processor, height, width)


def test_get_number_of_image_patches_disagrees_when_longest_edge_is_not_a_tile_multiple():
    """The helper ceils the short side without scaling it with the long side (`resized_height` is
    overwritten by ceil(height / M) * M), so with size.longest_edge not a multiple of max_image_size it
    gives fewer tiles than the pipeline. With the hub settings (L = 4 M) both agree."""
    processor = geometry_processor(1000, 300)
    grid, _, _ = real_geometry(processor, 850, 223)
    assert grid == (4, 2) == idefics3.count(850, 223, settings_for(1000, 300)).grid
    assert processor.get_number_of_image_patches(850, 223, {}) == (5, 4, 1)
    hub = geometry_processor(1456, 364)
    for height, width in [(850, 223), (1080, 1920), (365, 1456), (1, 4000)]:
        _, rows, cols = hub.get_number_of_image_patches(height, width, {})
        assert (rows, cols) == idefics3.count(height, width, settings_for(1456, 364)).grid


def test_get_number_of_image_patches_ignores_do_resize():
    processor = geometry_processor(1456, 364, do_resize=False)
    grid, _, _ = real_geometry(processor, 100, 37)
    assert grid == (0, 0) == idefics3.count(100, 37, settings_for(1456, 364, do_resize=False)).grid
    assert processor.get_number_of_image_patches(100, 37, {})[1:] == (4, 2)  # as if resized to 1456
