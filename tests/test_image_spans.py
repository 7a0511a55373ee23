"""Token-position facts against the real processors: image spans (VLM402) and M-RoPE positions (VLM404).

RowResult.image_spans must be, per image, [first, last + 1) of the positions of the model's image
token id in the input_ids the real transformers processor returns for the same row. The attribution
of image-token positions to images is done here without vlmlint's counts: images are separated by
a long stretch of text (Qwen, Idefics3, Pixtral, ...), or, where the chat template puts all images
first (LLaVA), by each image's count from the real processor on a one-image row.

RowResult.max_position_id must be the largest position id of Qwen2VLModel.get_rope_index
(transformers 5.24.0), ported below without torch and run on the real processor's input_ids,
mm_token_type_ids and image_grid_thw.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import PROCESSORS, real_processor
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.records import ImageRef, Message, Part, Role, Sample
from vlmlint.template_cache import conversation_for_template

SEPARATOR = " ".join(["the quick brown fox jumps over the lazy dog"] * 8)
SIZES = [(640, 480), (100, 300), (900, 200)]  # width, height


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("span-images")
    paths = []
    for width, height in [*SIZES, (28, 28), (1000, 30), (56, 1400), (1280, 720)]:
        path = folder / f"{width}x{height}.png"
        Image.new("RGB", (width, height), (10, 20, 30)).save(path)
        paths.append(path)
    return paths


def _sample(paths: list[Path], separated: bool = True) -> Sample:
    parts: list[Part] = []
    for position, _ in enumerate(paths):
        if separated or position == 0:
            parts.append(Part(text=f"{SEPARATOR} {position}\n"))
        parts.append(Part(is_image=True))
    parts.append(Part(text="Compare them."))
    messages = (Message(Role.USER, tuple(parts)), Message(Role.ASSISTANT, (Part(text="They differ."),)))
    images = tuple(ImageRef(str(p), path=str(p)) for p in paths)
    return Sample(source="spans", index=0, messages=messages, images=images)


def _scan(name: str, sample: Sample, max_length: int = 1):
    scanner = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / name), max_length=max_length))
    return scanner, next(scanner.scan_samples([sample])).result


def _real(name: str, scanner: Scanner, sample: Sample) -> dict:
    processor = real_processor(PROCESSORS / name)
    messages = conversation_for_template(sample.messages)
    if processor.chat_template is not None:
        text = processor.apply_chat_template(messages)
    else:
        text = scanner.render(sample.messages)
    images = [Image.open(ref.path).convert("RGB") for ref in sample.images]
    return processor(text=[text], images=[images], return_tensors=None)


def _image_token_id(name: str, processor_output_ids: list[int]) -> int:
    config = json.loads((PROCESSORS / name / "config.json").read_text())
    token_id = config.get("image_token_id", config.get("image_token_index"))
    assert token_id in processor_output_ids
    return token_id


def _groups_by_gap(positions: list[int], gap: int) -> list[tuple[int, int]]:
    groups = [[positions[0]]]
    for before, after in itertools.pairwise(positions):
        if after - before > gap:
            groups.append([after])
        else:
            groups[-1].append(after)
    return [(group[0], group[-1] + 1) for group in groups]


# Chat templates that keep the images where the text puts them; the separator (~80 tokens) is far longer
# than any gap inside one image's expansion (row markers, [IMG_BREAK], "\n").
SEPARATED = [
    "qwen2-vl-small",
    "qwen2.5-vl",
    "qwen3-vl",
    "idefics3-8b-llama3",
    "smolvlm-256m-instruct",
    "pixtral-12b",
    "mistral-small-3.1-24b",
    "gemma-3-4b-it",
    "gemma-3-4b-it-panscan",
    "internvl3-1b-hf",
    "paligemma-3b-pt-224",
]


@pytest.mark.parametrize("name", SEPARATED)
def test_spans_equal_the_real_image_token_positions(name, image_files):
    sample = _sample(image_files[:3])
    scanner, result = _scan(name, sample)
    ids = list(_real(name, scanner, sample)["input_ids"][0])
    assert result.seq_len == len(ids)
    token_id = _image_token_id(name, ids)
    positions = [i for i, token in enumerate(ids) if token == token_id]
    expected = tuple(_groups_by_gap(positions, gap=40))
    assert len(expected) == 3
    assert result.image_spans == expected


@pytest.mark.parametrize("name", ["llava-1.5-7b", "llava-v1.6-mistral-7b"])
def test_spans_of_images_side_by_side(name, image_files):
    """LLaVA templates put every image first: attribute positions with the real per-image counts."""
    sample = _sample(image_files[:3])
    scanner, result = _scan(name, sample)
    ids = list(_real(name, scanner, sample)["input_ids"][0])
    token_id = _image_token_id(name, ids)
    positions = [i for i, token in enumerate(ids) if token == token_id]
    expected, used = [], 0
    for path in image_files[:3]:
        single = _sample([path])
        alone = list(_real(name, scanner, single)["input_ids"][0])
        count = sum(1 for token in alone if token == token_id)
        expected.append((positions[used], positions[used + count - 1] + 1))
        used += count
    assert used == len(positions)
    assert result.image_spans == tuple(expected)


@pytest.mark.parametrize(
    "name",
    ["llava-onevision-qwen2-7b-ov", "llava-1.5-7b", "qwen2-vl-small", "pixtral-12b", "idefics3-8b-llama3"],
)
def test_span_of_a_single_image(name, image_files):
    sample = _sample(image_files[:1])
    scanner, result = _scan(name, sample)
    ids = list(_real(name, scanner, sample)["input_ids"][0])
    token_id = _image_token_id(name, ids)
    positions = [i for i, token in enumerate(ids) if token == token_id]
    assert result.image_spans == ((positions[0], positions[-1] + 1),)


def test_mllama_has_no_span_to_cut(image_files):
    """Mllama keeps one <|image|> per image (cross-attention): nothing is expanded, so no spans."""
    _, result = _scan("llama-3.2-11b-vision-instruct", _sample(image_files[:2]))
    assert result.image_spans == ()


def test_no_spans_for_rows_within_the_limit(image_files):
    _, result = _scan("qwen2-vl-small", _sample(image_files[:2]), max_length=100_000)
    assert result.seq_len is not None and result.image_spans is None


# -- M-RoPE -----------------------------------------------------------------------------------------


def rope_positions(token_types: list[int], image_grid_thw, spatial_merge_size: int) -> np.ndarray:
    """Qwen2VLModel.get_rope_index (transformers 5.24.0) for one row without padding, in numpy.

    Line for line: text runs get consecutive positions (the same on the three axes); each image
    run gets start + (t, h, w) on its (grid_t, grid_h / merge, grid_w / merge) grid, and moves the
    position on by max(grid_h, grid_w) // merge.
    """
    grids = iter(image_grid_thw)
    pieces, current = [], 0
    for modality, group in itertools.groupby(token_types):
        length = len(list(group))
        if modality == 0:
            pieces.append(np.broadcast_to(np.arange(length), (3, length)) + current)
            current += length
            continue
        grid_t, grid_h, grid_w = (int(v) for v in next(grids))
        llm_t, llm_h, llm_w = grid_t, grid_h // spatial_merge_size, grid_w // spatial_merge_size
        t_grid, h_grid, w_grid = np.meshgrid(
            np.arange(llm_t), np.arange(llm_h) + current, np.arange(llm_w) + current, indexing="ij"
        )
        vision = np.stack([t_grid, h_grid, w_grid]).reshape(3, -1)
        vision[0] += current
        assert vision.shape[1] == length  # one position per image token
        pieces.append(vision)
        current += max(grid_h, grid_w) // spatial_merge_size
    return np.concatenate(pieces, axis=1)


@pytest.mark.parametrize("module", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_the_port_follows_the_installed_get_rope_index(module):
    source = Path(importlib.util.find_spec("transformers").origin).parent / "models" / module
    text = (source / f"modeling_{module}.py").read_text()
    assert "current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size" in text
    assert "torch.arange(llm_grid_h, device=device) + start_position" in text


@pytest.mark.parametrize("name", ["qwen2-vl-small", "qwen2.5-vl", "qwen3-vl"])
@pytest.mark.parametrize(
    "picks,separated",
    [((0,), True), ((0, 1, 2), True), ((3, 4, 5, 6), True), ((6, 0, 5), False), ((4, 4), False)],
)
def test_max_position_id_equals_get_rope_index(name, picks, separated, image_files):
    sample = _sample([image_files[i] for i in picks], separated=separated)
    scanner, result = _scan(name, sample)
    output = _real(name, scanner, sample)
    merge = scanner.model.settings.merge_size
    positions = rope_positions(list(output["mm_token_type_ids"][0]), output["image_grid_thw"], merge)
    assert positions.shape[1] == result.seq_len
    assert result.max_position_id == int(positions.max())
