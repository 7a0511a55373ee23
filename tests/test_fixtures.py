"""Every fixture dataset: each row gets exactly its expected findings, and every count vlmlint gives
equals the input_ids of the real transformers processor for the same row."""

from __future__ import annotations

import io
import json
import os
from types import MappingProxyType

import pytest
from PIL import Image, ImageOps

from tests.conftest import DATASETS, FIXTURES, PROCESSORS, real_processor
from vlmlint.config import THRESHOLD_DEFAULTS, ScanConfig
from vlmlint.engine import Scanner
from vlmlint.template_cache import conversation_for_template, without_media

DATASET_NAMES = sorted(p.stem for p in (FIXTURES / "expected").glob("*.json"))
PROCESSOR_NAMES = sorted(p.name for p in PROCESSORS.iterdir() if p.is_dir())


def _has_text_placeholder(folder) -> bool:
    """Chat-model folders; plain vision encoders (ViT/CLIP/SigLIP) have their own differential tests."""
    from vlmlint.models.registry import find_family

    configs = [
        folder / n for n in ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json")
    ]
    data = {}
    for path in configs:
        if path.is_file():
            data = {**json.loads(path.read_text()), **data}
    image_type = data.get("image_processor_type") or data.get("feature_extractor_type")
    family = find_family(data.get("processor_class"), image_type)
    return family is not None and bool(family.placeholder)


CHAT_PROCESSOR_NAMES = [name for name in PROCESSOR_NAMES if _has_text_placeholder(PROCESSORS / name)]


# The codes every expectation file is exhaustive about; a file may assert more ("checked": [...]), and
# the catalogue dataset asserts every code. Other rules (EXIF, tiny images...) may fire elsewhere freely.
BASE_CHECKED = {"VLM101", "VLM103", "VLM201", "VLM301", "VLM401", "VLM404"}


def checked_codes(name: str) -> set[str] | None:
    doc = json.loads((FIXTURES / "expected" / f"{name}.json").read_text())
    if doc.get("checked") == "all":
        return None
    listed = {
        code
        for spec in (doc.get("manifests") or {"": doc}).values()
        for row in spec["rows"]
        for code in row["codes"]
    }
    return BASE_CHECKED | listed | set(doc.get("checked", []))


def expected_codes(name: str) -> dict[tuple[str, int], list[str]]:
    """(manifest file name, row index) -> the codes that row must get."""
    doc = json.loads((FIXTURES / "expected" / f"{name}.json").read_text())
    manifests = doc.get("manifests") or {doc["manifest"]: {"rows": doc["rows"]}}
    return {
        (manifest, row["index"]): sorted(row["codes"])
        for manifest, spec in manifests.items()
        for row in spec["rows"]
    }


def manifest_key(name: str, source: str, expected: dict) -> str:
    base = os.path.basename(source)
    if any(key[0] == base for key in expected):
        return base
    return "."  # folder-level datasets (sidecar, imagefolder, hf_disk) use one manifest name


@pytest.fixture(scope="module")
def scanners():
    cache = {}

    def get(processor: str) -> Scanner:
        if processor not in cache:
            cache[processor] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / processor)))
        return cache[processor]

    return get


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_each_row_gets_exactly_its_expected_codes(name, scanners):
    doc = json.loads((FIXTURES / "expected" / f"{name}.json").read_text())
    scanner = scanners(doc.get("model", "qwen2-vl-small"))
    if doc.get("options"):  # the same model with this dataset's settings (e.g. --max-length, thresholds)
        options = dict(doc["options"])
        thresholds = MappingProxyType({**THRESHOLD_DEFAULTS, **options.pop("thresholds", {})})
        config = ScanConfig(dataset="", model=scanner.config.model, thresholds=thresholds, **options)
        scanner = Scanner(config, model=scanner.model)
    expected = expected_codes(name)
    checked = checked_codes(name)
    outcomes = list(scanner.scan_samples(_samples(name)))
    assert outcomes, "the dataset yielded no rows"
    got = {}
    for outcome in outcomes:
        sample = outcome.result.sample
        key = (manifest_key(name, sample.source, expected), sample.index)
        got[key] = sorted(f.code for f in outcome.findings if checked is None or f.code in checked)
        if sample.line is not None and outcome.findings:
            assert all(f.line == sample.line for f in outcome.findings)
    if all(key[0] == "." for key in expected):
        # one manifest for the whole folder: compare in reading order
        assert sorted(got.values()) == sorted(expected.values()) and len(got) == len(expected)
        assert [got[k] for k in sorted(got)] == [expected[k] for k in sorted(expected)]
    else:
        assert got == expected


def _samples(name: str):
    from vlmlint.readers import iter_samples

    return iter_samples(str(DATASETS / name))


def _decode(ref):
    source = io.BytesIO(ref.data) if ref.data is not None else ref.path
    with Image.open(source) as image:
        image.load()
        return ImageOps.exif_transpose(image).convert("RGB")


def _loaded(ref, scanner):
    """The image as the row's loader hands it to the processor: qwen-vl-utils' fetch_image resizes an
    image part with per-image settings (its recorded size, fixtures/qwen_vl_utils_sizes.json) for Qwen-VL."""
    image = _decode(ref)
    if ref.sizing is None or scanner.family.name != "qwen-vl":
        return image
    from tests.test_qwen_vl_utils_sizing import recorded_size

    with Image.open(ref.path) as stored:  # fetch_image opens the file without its EXIF orientation
        width, height = stored.size
    sizing = {k: v for k, v in vars(ref.sizing).items() if v is not None}
    resized = recorded_size(height, width, sizing, scanner.model.settings.factor)
    assert resized is not None, "fetch_image refuses this image: the fixture row must not be counted"
    return image.resize((resized[1], resized[0]))


def _image_runs(ids: list[int], token_id: int) -> list[int]:
    runs, current = [], 0
    for token in ids:
        if token == token_id:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


@pytest.mark.parametrize("processor_name", CHAT_PROCESSOR_NAMES)
@pytest.mark.parametrize("name", DATASET_NAMES)
def test_counts_equal_the_real_processor(name, processor_name, scanners):
    if json.loads((FIXTURES / "expected" / f"{name}.json").read_text())["layout"] == "pretokenized":
        pytest.skip("processor output stored in the rows: tests/test_pretokenized.py rebuilds it")
    scanner = scanners(processor_name)
    if scanner.model.exact_unavailable:  # torchvision-only: proven on fixtures/reference/ records instead
        pytest.skip(scanner.model.exact_unavailable)
    processor = real_processor(PROCESSORS / processor_name)
    checked = 0
    for outcome in scanner.scan_samples(_samples(name)):
        result = outcome.result
        if result.seq_len is None:
            continue
        sample = result.sample
        if any(info.tokens is not None for info in result.media):
            continue  # counted videos: proven against the real video processors (tests/families/test_*_video.py)
        if processor.chat_template is not None:  # the media vlmlint does not count are left out on both sides
            text = processor.apply_chat_template(conversation_for_template(without_media(sample.messages)))
        else:  # no template (e.g. PaliGemma): both sides get vlmlint's documented raw rendering
            text = scanner.render(sample.messages)
        images = [_loaded(ref, scanner) for ref in sample.images] or None
        # Nested per sample, as apply_chat_template(tokenize=True) and trainers pass them (OneVision counts differ).
        nested = [images] if images else None
        try:
            output = processor(text=[text], images=nested, return_tensors=None)
        except (AttributeError, ImportError):  # Ovis2 / MiniCPM-V read their outputs as arrays
            output = processor(text=[text], images=nested, return_tensors="np")
        ids = list(output["input_ids"][0])
        assert result.seq_len == len(ids), sample.location
        # The id the model matches image features against: config.json's image_token_id/index (Gemma 3's
        # processor.image_token_id is <start_of_image>, its features go to <image_soft_token>).
        config = json.loads((PROCESSORS / processor_name / "config.json").read_text())
        image_token_id = config.get(
            "image_token_id", config.get("image_token_index", processor.image_token_id)
        )
        image_ids = sum(1 for token in ids if token == image_token_id)
        assert sum(result.image_tokens) == image_ids, sample.location
        if len(result.image_tokens) == 1 or processor_name.startswith("qwen"):
            # one image, or one contiguous run per image (Qwen): the per-image attribution is checkable
            expected = [image_ids] if len(result.image_tokens) == 1 else _image_runs(ids, image_token_id)
            assert result.image_tokens == expected, sample.location
        assert result.text_tokens == len(ids) - sum(result.image_tokens)
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_exact_mode_agrees_with_the_header_path(name):
    model = str(PROCESSORS / "qwen2-vl")
    fast = Scanner(ScanConfig(dataset=str(DATASETS / name), model=model))
    exact = Scanner(ScanConfig(dataset=str(DATASETS / name), model=model, exact=True), model=fast.model)
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        assert a.result.images == b.result.images or _same_counts(a.result, b.result), (
            a.result.sample.location
        )
        assert a.result.seq_len == b.result.seq_len
        assert [f.code for f in a.findings] == [f.code for f in b.findings]


def _same_counts(a, b) -> bool:
    keys = ("resized_width", "resized_height", "grid", "tokens", "error_code")
    return [[getattr(i, k) for k in keys] for i in a.images] == [
        [getattr(i, k) for k in keys] for i in b.images
    ]
