"""Differential tests: vlmlint's Gemma 3n count and expansion against the real Gemma3nProcessor.

The real side is transformers' own code: SiglipImageProcessorPil and Gemma3nProcessor built from the
fixture folder (fixtures/support.py's real_processor: its audio feature extractor is absent). Counts
are <image_soft_token> ids in input_ids, <start_of_image> / <end_of_image> ids and the pixel_values
the processor made.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import support as harness
from tests.conftest import PROCESSORS
from tests.families._releases import needs
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, Run, gemma3n, load_model
from vlmlint.records import Message, Part, Role

FOLDER = PROCESSORS / "gemma-3n-e4b-it"
HUB = gemma3n.Gemma3nSettings(height=768, width=768)
SEQUENCE = "\n\n<start_of_image>" + "<image_soft_token>" * 256 + "<end_of_image>\n\n"


@pytest.fixture(scope="module")
def processor():
    return harness.real_processor(FOLDER)


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def real_pipeline(processor, height: int, width: int, **call_kwargs) -> dict:
    tokenizer = processor.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=["<image_soft_token>"], images=[image(height, width)], **call_kwargs)
    ids = list(output["input_ids"][0])
    return {
        "soft": ids.count(tokenizer.convert_tokens_to_ids("<image_soft_token>")),
        "boi": ids.count(tokenizer.convert_tokens_to_ids("<start_of_image>")),
        "eoi": ids.count(tokenizer.convert_tokens_to_ids("<end_of_image>")),
        "shape": tuple(int(v) for v in output["pixel_values"][0].shape[-2:]),
    }


def assert_count_matches_pipeline(
    processor, height: int, width: int, s: gemma3n.Gemma3nSettings, **kw
) -> None:
    real = real_pipeline(processor, height, width, **kw)
    got = gemma3n.count(height, width, s)
    assert got.tokens == real["soft"], (height, width)
    assert real["boi"] == real["eoi"] == 1
    assert (got.resized_height, got.resized_width) == real["shape"]


# -- settings ------------------------------------------------------------------------------------


def test_load_model_picks_gemma3n_and_reads_the_hub_settings():
    model = load_model(str(FOLDER))
    assert model.family is gemma3n.FAMILY
    assert model.counted_by() == "formula (family gemma3n)"
    assert model.settings == HUB
    assert model.family.placeholder == "<image_soft_token>"  # not Gemma 3's <start_of_image>
    assert model.max_position_embeddings == 32768
    assert type(model.image_processor).__name__ == "SiglipImageProcessorPil"


def test_processor_image_seq_length_is_the_one_used(tmp_path):
    """image_seq_length from processor_config.json (the processor's own kwarg) sets the run."""
    folder = tmp_path / "gemma3n-seq"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "processor_config.json").read_text())
    config["image_seq_length"] = 64
    (folder / "processor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.settings.image_seq_length == 64
    processor = harness.real_processor(folder)
    assert real_pipeline(processor, 300, 500)["soft"] == 64 == gemma3n.count(300, 500, model.settings).tokens


def test_tokenizer_init_kwargs_override_the_size(tmp_path):
    folder = tmp_path / "gemma3n-size"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["size"] = {"height": 512, "width": 384}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert (model.settings.height, model.settings.width) == (512, 384)
    assert_count_matches_pipeline(harness.real_processor(folder), 300, 500, model.settings)


def test_a_size_without_height_and_width_is_refused():
    class Shortest:
        size = {"shortest_edge": 768}  # noqa: RUF012

    with pytest.raises(CountError, match=r"size\.height and size\.width"):
        gemma3n.settings_from(Shortest(), {}, {})


# -- the pipeline ----------------------------------------------------------------------------------

EDGES = [(1, 1), (1, 4000), (4000, 1), (768, 768), (767, 769), (10, 10), (300, 1000), (3000, 4000)]


@pytest.mark.parametrize("height,width", EDGES)
def test_pipeline_edges(processor, height, width):
    assert_count_matches_pipeline(processor, height, width, HUB)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(height=st.integers(1, 2000), width=st.integers(1, 2000), side=st.sampled_from([224, 512, 768]))
def test_random_sizes_match_the_pipeline(processor, height, width, side):
    s = gemma3n.Gemma3nSettings(height=side, width=side)
    assert_count_matches_pipeline(processor, height, width, s, size={"height": side, "width": side})


@pytest.mark.parametrize("height,width", [(1, 1), (50, 70), (900, 600)])
def test_without_resize_the_image_keeps_its_size(processor, height, width):
    s = gemma3n.Gemma3nSettings(height=768, width=768, do_resize=False)
    assert_count_matches_pipeline(processor, height, width, s, do_resize=False)


@pytest.mark.parametrize("height,width", [(1, 1), (300, 1000), (1000, 300), (768, 768)])
def test_count_exact_matches_count(height, width):
    model = load_model(str(FOLDER))
    images = [image(height, width), image(width, height)]
    exact = gemma3n.count_exact(model.image_processor, images, model.settings)
    assert exact == [
        gemma3n.count(height, width, model.settings),
        gemma3n.count(width, height, model.settings),
    ]


def test_transformers_helper_agrees(processor):
    helper = needs(processor, "_get_num_multimodal_tokens")(image_sizes=[(1, 1), (300, 1000)])
    assert helper["num_image_tokens"] == [256, 256] == [gemma3n.count(1, 1, HUB).tokens] * 2


# -- expansion and whole prompts -----------------------------------------------------------------


def expanded(segments) -> str:
    return "".join(s.token * s.count if isinstance(s, Run) else s for s in segments)


def test_expand_is_the_processors_full_image_sequence(processor):
    count = gemma3n.count(300, 1000, HUB)
    assert expanded(gemma3n.expand(count, HUB)) == processor.full_image_sequence == SEQUENCE
    assert needs(processor, "replace_image_token")({}, 0) == SEQUENCE


def conversation(n_images: int, text: str) -> list[dict]:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    return [
        {"role": "user", "content": content},
        {"role": "assistant", "content": [{"type": "text", "text": "It is a picture."}]},
    ]


@pytest.mark.parametrize("n_images", [1, 2, 3])
@pytest.mark.parametrize("text", ["Describe this image.", "\nWhat is here?\n", "a\n\nb"])
def test_whole_prompt_input_ids_match_the_processor(processor, scanner, n_images, text):
    """The "\\n\\n" around each sequence meets the neighbours' text: vlmlint tokenizes the composed text
    whole, so the merges are the processor's."""
    sizes = [(300, 1000), (1, 1), (4000, 30)][:n_images]
    parts = tuple(Part(is_image=True) for _ in sizes) + (Part(text=text),)
    answer = Message(Role.ASSISTANT, (Part(text="It is a picture."),))
    rendered = scanner.render((Message(Role.USER, parts), answer))
    assert rendered == processor.apply_chat_template(conversation(n_images, text), tokenize=False)
    counts = [gemma3n.count(h, w, scanner.model.settings) for h, w in sizes]
    composed, saved = scanner.compose(rendered, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[rendered], images=[[image(h, w) for h, w in sizes]])
    ids = list(output["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    assert len(mine["input_ids"]) + saved == len(ids)
    full = composed.replace("<image_soft_token>", "<image_soft_token>" * 256)
    assert scanner.model.tokenizer(full)["input_ids"] == ids
    bos = processor.tokenizer.bos_token_id
    assert ids[:2] == [bos, bos]  # the template's <bos> and the tokenizer's


@pytest.mark.parametrize("text", ["x <image_soft_token> y", "<image_soft_token><image_soft_token>"])
def test_raw_text_compose_matches_the_processor(processor, scanner, text):
    n = text.count("<image_soft_token>")
    counts = [gemma3n.count(100, 100, HUB)] * n
    composed, saved = scanner.compose(text, counts)
    ids = list(processor(text=[text], images=[[image(100, 100)] * n])["input_ids"][0])
    mine = scanner.model.tokenizer(composed, add_special_tokens=True)
    assert len(mine["input_ids"]) + saved == len(ids)


def test_scan_of_a_dataset_matches_the_processor(tmp_path):
    """vlmlint scan --model <fixture> against the real processor, row by row (one- and two-image rows)."""
    processor = harness.real_processor(FOLDER)
    token_id = processor.tokenizer.convert_tokens_to_ids("<image_soft_token>")
    built = harness.Built(
        "gemma3n", FOLDER, "Gemma3nProcessor", "<image_soft_token>", "<image_soft_token>", token_id
    )
    dataset = harness.build_dataset(tmp_path)
    reference = harness.reference_counts(built, dataset)
    _, counted = harness.vlmlint_counts(built, dataset)
    assert [(r.seq_len, r.image_tokens) for r in counted] == [(r.seq_len, r.image_tokens) for r in reference]
    assert all(r.seq_len for r in reference)
