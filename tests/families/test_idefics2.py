"""Differential tests: vlmlint's Idefics2 count and expansion against the real Idefics2Processor.

The real side is transformers' own code: Idefics2Processor built from the fixture folder
(fixtures/support.py's real_processor) and its Idefics2ImageProcessorPil. Counts are <image> ids
(config.json's image_token_id) and <fake_token_around_image> ids in input_ids; whole prompts compare
every id, so the processor's fake-token merging and the space it inserts after a closing fake token are
checked too.
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
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, idefics2, load_model
from vlmlint.models.registry import knob_for
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "idefics2-8b"
HUB = idefics2.Idefics2Settings()  # the hub's settings (fixtures/families/idefics2.py)
SPLIT = dataclasses.replace(HUB, do_image_splitting=True, split_images=True)


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def split_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("idefics2") / "idefics2-split"
    shutil.copytree(FOLDER, folder)
    _edit(folder / "preprocessor_config.json", do_image_splitting=True)
    return folder


@pytest.fixture(scope="module")
def split_processor(split_folder):
    return harness.real_processor(split_folder)


def _edit(path, **values):
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def call(processor, text: str, images: list, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return processor(text=[text], images=[images], return_tensors="np", **kwargs)


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_idefics2_and_reads_the_settings(split_folder):
    model = load_model(str(FOLDER))
    assert model.family is idefics2.FAMILY
    assert model.counted_by() == "formula (family idefics2)"
    assert model.settings == HUB
    assert model.max_position_embeddings == 32768
    assert load_model(str(split_folder)).settings == SPLIT


def test_the_files_settings_change_the_count(tmp_path):
    folder = tmp_path / "idefics2-32"
    shutil.copytree(FOLDER, folder)
    _edit(folder / "processor_config.json", image_seq_len=32)
    _edit(folder / "preprocessor_config.json", do_image_splitting=True)
    model = load_model(str(folder))
    processor = harness.real_processor(folder)
    ids = list(call(processor, "<image>", [image(100, 100)])["input_ids"][0])
    assert ids.count(processor.image_token_id) == idefics2.count(100, 100, model.settings).tokens == 5 * 32


def test_the_text_follows_the_image_processors_attribute_not_the_call(processor, tmp_path):
    """do_image_splitting in tokenizer_config.json splits the pixels, but the text keeps the attribute's."""
    folder = tmp_path / "idefics2-kwargs"
    shutil.copytree(FOLDER, folder)
    _edit(folder / "tokenizer_config.json", do_image_splitting=True)
    model = load_model(str(folder))
    assert (model.settings.do_image_splitting, model.settings.split_images) == (False, True)
    real = harness.real_processor(folder)
    output = call(real, "<image>", [image(300, 300)])
    assert (
        list(output["input_ids"][0]).count(real.image_token_id)
        == 64
        == idefics2.count(300, 300, model.settings).tokens
    )
    assert output["pixel_values"].shape[1] == 5  # five views reach the model
    with pytest.raises(ZeroDivisionError):
        call(real, "<image>", [image(1, 300)])
    with pytest.raises(CountError, match="0-px-tall crops"):
        idefics2.count(1, 300, model.settings)


# -- counts --------------------------------------------------------------------------------------

EDGES = [(1, 1), (1, 4000), (4000, 1), (2, 2), (2, 3), (377, 377), (378, 378), (980, 980), (981, 980),
         (1080, 1920), (1920, 1080), (100, 5000), (5000, 100)]  # fmt: skip


def real_counts(processor, sizes, **kwargs) -> tuple[int, int, list]:
    text = "User:" + "<image>" * len(sizes) + "x<end_of_utterance>"
    output = call(processor, text, [image(h, w) for h, w in sizes], **kwargs)
    ids = list(output["input_ids"][0])
    fake = processor.tokenizer.convert_tokens_to_ids(idefics2.FAKE_IMAGE_TOKEN)
    return ids.count(processor.image_token_id), ids.count(fake), output


@pytest.mark.parametrize("height,width", EDGES)
def test_edges_match_the_pipeline(processor, height, width):
    tokens, fakes, output = real_counts(processor, [(height, width)])
    mine = idefics2.count(height, width, HUB)
    assert (tokens, fakes) == (mine.tokens, 2)
    mask = output["pixel_attention_mask"][0][0]
    assert (mine.resized_height, mine.resized_width) == (
        int(mask.any(axis=1).sum()),
        int(mask.any(axis=0).sum()),
    )


@pytest.mark.parametrize("height,width", [e for e in EDGES if e[0] >= 2])
def test_edges_match_the_pipeline_with_splitting(split_processor, height, width):
    tokens, fakes, _ = real_counts(split_processor, [(height, width)])
    assert (tokens, fakes) == (idefics2.count(height, width, SPLIT).tokens, 6)


@pytest.mark.parametrize("height,width", [(1, 1), (1, 5), (1, 4000)])
def test_one_pixel_tall_images_are_refused_when_split(split_processor, height, width):
    with pytest.raises(ZeroDivisionError):
        real_counts(split_processor, [(height, width)])
    with pytest.raises(CountError, match="0-px-tall"):
        idefics2.count(height, width, SPLIT)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(2, 1500), st.integers(1, 1500)), min_size=1, max_size=3),
    split=st.booleans(),
)
@example(sizes=[(2, 1), (1500, 1500)], split=True)
def test_random_sizes_match_the_pipeline(processor, split_processor, sizes, split):
    real, s = (split_processor, SPLIT) if split else (processor, HUB)
    tokens, fakes, output = real_counts(real, sizes)
    assert tokens == sum(idefics2.count(h, w, s).tokens for h, w in sizes)
    # adjacent images share their fake tokens: one more than the views
    assert fakes == len(sizes) * s.views + 1
    for i, (h, w) in enumerate(sizes):
        mask = output["pixel_attention_mask"][0][i * s.views + s.views - 1]
        mine = idefics2.count(h, w, s)
        assert (mine.resized_height, mine.resized_width) == (
            int(mask.any(axis=1).sum()),
            int(mask.any(axis=0).sum()),
        )


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (1080, 1920), (2, 4000)])
def test_count_exact_matches_count(height, width, split_folder):
    for folder in (FOLDER, split_folder):
        model = load_model(str(folder))
        images = [image(height, width), image(width, height)]
        if model.settings.split_images and min(height, width) < 2:  # both refuse the 1-px-tall one
            with pytest.raises(CountError):
                idefics2.count_exact(model.image_processor, images, model.settings)
            with pytest.raises(CountError):
                idefics2.count(1, max(height, width), model.settings)
            continue
        exact = idefics2.count_exact(model.image_processor, images, model.settings)
        assert exact == [
            idefics2.count(height, width, model.settings),
            idefics2.count(width, height, model.settings),
        ]


# -- the text ------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", [HUB, SPLIT], ids=["one view", "five views"])
@pytest.mark.parametrize(
    "text",
    [
        "<image>",
        "User:<image>Describe.<end_of_utterance>\n",
        "User:<image><image>x",  # adjacent images share a fake token
        "User: <image> word<image>word\n<image><end_of_utterance>",  # attached words get a space
        "<image>\n<image>",
        "a<fake_token_around_image><image>",  # a fake token in the text merges with the image's
    ],
)
def test_compose_is_the_processors_text(processor, split_processor, s, text):
    real = split_processor if s.do_image_splitting else processor
    n = text.count("<image>")
    counts = [idefics2.count(300, 400, s)] * n
    segments = idefics2.compose(text, [idefics2.expand(c, s) for c in counts], s)
    ids = list(call(real, text, [image(300, 400)] * n)["input_ids"][0])
    assert real.tokenizer(expanded(segments))["input_ids"] == ids


def test_expand_is_one_image_alone():
    assert idefics2.expand(idefics2.count(10, 10, HUB), HUB) == (
        "<fake_token_around_image>", Run("<image>", 64), "<fake_token_around_image>"
    )  # fmt: skip
    five = idefics2.expand(idefics2.count(10, 10, SPLIT), SPLIT)
    assert five.count("<fake_token_around_image>") == 6 and five.count(Run("<image>", 64)) == 5


def test_a_placeholder_without_its_image_is_refused(processor):
    with pytest.raises(ValueError, match="number of"):
        call(processor, "<image><image>", [image(10, 10)])
    with pytest.raises(CountError, match="Found 2 <image> tokens and 1 images"):
        idefics2.compose("<image><image>", [idefics2.expand(idefics2.count(10, 10, HUB), HUB)], HUB)


def conversation(n_images: int, text: str, answer: str = "It is a picture.") -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    return [
        {"role": "user", "content": content},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("sizes", [[(300, 1000)], [(1000, 300), (448, 448)], [(640, 480)] * 3])
@pytest.mark.parametrize("text", ["Describe this image.", "  What is here?\n"])
def test_whole_prompt_input_ids_match_the_processor(
    processor, split_processor, split_folder, split, sizes, text
):
    folder, real = (split_folder, split_processor) if split else (FOLDER, processor)
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)))
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    answer = Message(Role.ASSISTANT, (Part(text="It is a picture."),))
    rendered = scanner.render((Message(Role.USER, parts), answer))
    assert rendered == real.apply_chat_template(conversation(len(sizes), text), tokenize=False)
    counts = [idefics2.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    ids = list(call(real, rendered, [image(h, w) for h, w in sizes])["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    assert ids[0] == real.tokenizer.bos_token_id


def test_scan_of_a_dataset_matches_the_processor(tmp_path, split_folder):
    for folder in (FOLDER, split_folder):
        built = harness.Built("idefics2", folder, "Idefics2Processor", "<image>", "<image>", 0)
        real = harness.real_processor(folder)
        built.image_token_id = real.image_token_id
        dataset = harness.build_dataset(tmp_path / folder.name)
        reference = harness.reference_counts(built, dataset)
        _, counted = harness.vlmlint_counts(built, dataset)
        assert [(r.seq_len, r.image_tokens) for r in counted] == [
            (r.seq_len, r.image_tokens) for r in reference
        ]
        assert all(r.seq_len for r in reference)


def test_there_is_no_size_knob():
    assert "no image-size setting changes the count" in knob_for(idefics2.FAMILY, HUB)
