"""Differential tests: vlmlint's PaliGemma count and composed text against the real PaliGemmaProcessor.

The real side is transformers' own classes: SiglipImageProcessorPil and PaliGemmaProcessor built
from the fixture folder (tests/conftest.py), or from copies of it with the 448 / 896 checkpoints'
image settings. The composed text is compared token id for token id with the processor's input_ids.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import DATASETS, PROCESSORS, real_processor
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, load_model, paligemma
from vlmlint.readers import iter_samples
from vlmlint.records import ImageInfo

FOLDER = PROCESSORS / "paligemma-3b-pt-224"


@pytest.fixture(scope="module")
def processor():
    return real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def checkpoint(tmp_path, size: int, seq: int):
    """The fixture folder with another checkpoint's image settings (paligemma(2)-3b-pt-448 / -896)."""
    folder = tmp_path / f"paligemma-{size}"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config.update(size={"height": size, "width": size}, image_seq_length=seq)
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    return folder


def real_count(proc, height: int, width: int) -> tuple[int, tuple[int, int]]:
    output = proc(text=["<image>caption en"], images=[image(height, width)])
    ids = list(output["input_ids"][0])
    return ids.count(proc.image_token_id), tuple(int(v) for v in output["pixel_values"][0].shape[-2:])


def assert_same(proc, s: paligemma.PaliGemmaSettings, height: int, width: int) -> None:
    tokens, shape = real_count(proc, height, width)
    got = paligemma.count(height, width, s)
    assert got.tokens == tokens
    assert (got.resized_height, got.resized_width) == shape
    assert got.grid == (shape[0] // 14, shape[1] // 14)


# -- settings ------------------------------------------------------------------------------------


def test_settings_from_the_fixture_folder(scanner):
    model = scanner.model
    assert model.family is paligemma.FAMILY
    assert model.settings == paligemma.PaliGemmaSettings(height=224, width=224, image_seq_length=256)
    assert model.chat_template is None and model.max_position_embeddings == 8192
    assert not paligemma.FAMILY.add_special_tokens


def test_processor_turns_the_tokenizers_bos_off(processor, scanner):
    """Why add_special_tokens=False: the processor's tokenizer adds nothing, vlmlint's would add <bos>."""
    assert processor.tokenizer.add_bos_token is False
    bos = scanner.model.tokenizer.bos_token_id
    assert scanner.model.tokenizer("hi")["input_ids"][0] == bos
    assert processor.tokenizer("hi")["input_ids"][0] != bos


# -- counts --------------------------------------------------------------------------------------

EDGES = [(1, 1), (1, 4000), (4000, 1), (1, 199), (1, 200), (1, 201), (223, 225), (224, 224), (3000, 4000)]


@pytest.mark.parametrize("height,width", EDGES)
def test_edges_match_the_real_processor(processor, scanner, height, width):
    assert_same(processor, scanner.model.settings, height, width)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(height=st.integers(1, 2000), width=st.integers(1, 2000))
@example(height=2, width=1999)
def test_random_sizes_match_the_real_processor(processor, scanner, height, width):
    assert_same(processor, scanner.model.settings, height, width)


@pytest.mark.parametrize("size,seq", [(448, 1024), (896, 4096)])
def test_other_checkpoints_match_the_real_processor(tmp_path, size, seq):
    folder = checkpoint(tmp_path, size, seq)
    model = load_model(str(folder))
    assert model.settings.image_seq_length == seq and model.settings.height == size
    proc = real_processor(folder)
    for height, width in [(1, 1), (300, 1000), (size, size), (4000, 30)]:
        assert_same(proc, model.settings, height, width)


def test_count_exact_matches_count(scanner):
    model = scanner.model
    sizes = [(1, 1), (300, 1000), (1000, 300), (224, 224)]
    exact = paligemma.count_exact(model.image_processor, [image(h, w) for h, w in sizes], model.settings)
    assert exact == [paligemma.count(h, w, model.settings) for h, w in sizes]


# -- the text the processor builds ---------------------------------------------------------------

PROMPTS = [
    ("<image>caption en", 1),
    ("<image>\nWhat is shown?\nA red cat.", 1),  # vlmlint's raw rendering of a two-turn row
    ("describe <image> this", 1),  # <bos> goes right after the last <image>, mid-text
    ("<image><image>compare them", 2),
    ("<image>first\n<image>second", 2),
    ("<image>", 1),
    ("caption en", 1),  # no <image>: the processor puts the images first (vlmlint never renders this)
    ("caption en", 2),
]


def composed_ids(scanner, text: str, n_images: int) -> list[int]:
    """The family's composed text with every run written out, tokenized as the engine does."""
    s = scanner.model.settings
    expansions = [paligemma.expand(paligemma.count(300, 400, s), s)] * n_images
    segments = paligemma.compose(text, expansions, s)
    full = "".join(x.token * x.count if isinstance(x, Run) else x for x in segments)
    return scanner.model.tokenizer(full, add_special_tokens=paligemma.FAMILY.add_special_tokens)["input_ids"]


@pytest.mark.parametrize("text,n_images", PROMPTS)
def test_composed_text_is_the_processors_token_for_token(processor, scanner, text, n_images):
    ids = composed_ids(scanner, text, n_images)
    images = [image(300, 400)] * n_images
    if "<image>" not in text:  # the BC branch wants a prompt's images nested: [[a, b]]
        images = [images]
    real = list(processor(text=[text], images=images)["input_ids"][0])
    assert ids == real


@pytest.mark.parametrize("text,n_images", [p for p in PROMPTS if "<image>" in p[0]])
def test_engine_length_with_runs_written_once(scanner, text, n_images):
    s = scanner.model.settings
    info = ImageInfo(
        "x", 400, 300, resized_width=224, resized_height=224, grid=(16, 16), tokens=s.image_seq_length
    )
    short, saved = scanner.compose(text, (info,) * n_images)
    assert saved == (s.image_seq_length - 1) * n_images
    assert scanner._token_lengths([short])[0] + saved == len(composed_ids(scanner, text, n_images))


def test_row_without_an_image_is_refused(processor, scanner):
    with pytest.raises(ValueError, match="images"):
        processor(text=["caption en"], images=None)
    with pytest.raises(CountError):
        paligemma.compose("caption en", [], scanner.model.settings)
    # the engine marks such a row instead of giving it a length (alpaca row 3 is text-only)
    rows = [o.result for o in scanner.scan_samples(iter_samples(str(DATASETS / "alpaca")))]
    text_only = [r for r in rows if not r.sample.images]
    assert text_only and all(r.seq_len is None and r.count_error.startswith("processor:") for r in text_only)
    assert all(r.seq_len is not None for r in rows if r.sample.images)


def test_suffix_is_a_text_pair_ending_in_eos(processor):
    """vlmlint counts a conversation as one text; PaliGemma's `suffix=` training input tokenizes the
    target as a pair: prefix + "\\n", then suffix + <eos>. Documented, not modelled."""
    pair = list(
        processor(text=["<image>caption en"], suffix=["a cat"], images=[image(50, 50)])["input_ids"][0]
    )
    prefix = list(processor(text=["<image>caption en"], images=[image(50, 50)])["input_ids"][0])
    suffix = processor.tokenizer("a cat", add_special_tokens=False)["input_ids"]
    assert pair == prefix + suffix + [processor.tokenizer.eos_token_id]


def test_get_num_multimodal_tokens_agrees(processor, scanner):
    """The helper's count is the <image> run; the <bos> and "\\n" the processor adds are text."""
    sizes = [(1, 1), (300, 1000), (4000, 30)]
    helper = processor._get_num_multimodal_tokens(image_sizes=sizes)
    assert helper["num_image_tokens"] == [
        paligemma.count(h, w, scanner.model.settings).tokens for h, w in sizes
    ]
    assert helper["num_image_patches"] == [1, 1, 1]
