"""The real-processor fallback: routing by processor class, counts equal to the formulas, honest refusals."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import ModelError, load_model
from vlmlint.models.registry import FAMILIES, find_family

# Rules that read the formula's resized size or the image processor's settings, which the fallback
# (counts from input_ids) does not know: VLM204 (area below min_pixels), VLM208 (heavy resize).
SIZE_RULES = {"VLM204", "VLM208"}


@pytest.mark.parametrize(
    "folder",
    [
        "qwen2-vl",  # declares a video processor: built without it
        "llava-1.5-7b",
        "llava-v1.6-mistral-7b",
        "gemma-3-4b-it",
        "llava-onevision-qwen2-7b-ov",  # multi-image rows: tokens shared out by the sentinel call
        "idefics3-8b-llama3",  # tiles with separators between them
    ],
)
def test_fallback_counts_equal_the_family_formula(folder):
    dataset = str(DATASETS / "llava")
    formula = Scanner(ScanConfig(dataset=dataset, model=str(PROCESSORS / folder), jobs=1))
    model = load_model(str(PROCESSORS / folder), force_fallback=True)
    fallback = Scanner(ScanConfig(dataset=dataset, model=str(PROCESSORS / folder), jobs=1), model=model)
    assert fallback.family.name == "fallback" and not fallback.family.header_formula
    assert "no formula" in model.notice and model.counted_by() == "real processor (fallback)"
    compared = multi = 0
    for a, b in zip(formula.scan(), fallback.scan(), strict=True):
        tokens = [info.tokens for info in a.result.images]
        assert (a.result.seq_len, tokens) == (b.result.seq_len, [info.tokens for info in b.result.images])
        assert a.result.text_tokens == b.result.text_tokens
        codes = [f.code for f in a.findings if f.code not in SIZE_RULES]
        assert codes == [f.code for f in b.findings if f.code not in SIZE_RULES]
        compared += a.result.seq_len is not None
        multi += a.result.seq_len is not None and len(tokens) > 1
    assert compared > 10 and multi >= 1
    assert model.settings.ms_per_row is not None
    assert model.counted_by(timing=True).startswith("real processor (fallback: ")


def test_fallback_in_worker_processes_gives_the_same_rows():
    dataset = str(DATASETS / "llava")
    folder = str(PROCESSORS / "llava-1.5-7b")
    model = load_model(folder, force_fallback=True)
    one = Scanner(ScanConfig(dataset=dataset, model=folder, jobs=1), model=model)
    two = Scanner(ScanConfig(dataset=dataset, model=folder, jobs=2), model=model)
    rows = [(o.result.seq_len, o.result.image_tokens, [f.code for f in o.findings]) for o in one.scan()]
    assert rows == [
        (o.result.seq_len, o.result.image_tokens, [f.code for f in o.findings]) for o in two.scan()
    ]


def test_a_processor_error_is_a_finding_on_that_row_and_the_scan_goes_on():
    folder = str(PROCESSORS / "llava-1.5-7b")
    model = load_model(folder, force_fallback=True)
    real = model.settings.processor

    class Refusing:
        def __getattr__(self, name):
            return getattr(real, name)

        def __call__(self, text, images=None, **kwargs):
            if images and images[0] and images[0][0].width == images[0][0].height:
                raise ValueError("square images are refused by this processor\nsecond line")
            return real(text=text, images=images, **kwargs)

    model.settings.processor = Refusing()
    outcomes = list(
        Scanner(ScanConfig(dataset=str(DATASETS / "llava"), model=folder, jobs=1), model=model).scan()
    )
    refused = [o for o in outcomes if any(f.code == "VLM108" for f in o.findings)]
    counted = [o for o in outcomes if o.result.seq_len is not None]
    assert refused and counted
    message = next(f.message for f in refused[0].findings if f.code == "VLM108")
    assert "ValueError: square images are refused by this processor" in message and "second" not in message


def test_routing_is_by_processor_class_only():
    # Granite 4 Vision reuses LLaVA-NeXT's image processor and expands it its own way: the image processor
    # never routes a named processor class, which gets its own family or none (the fallback).
    for processor_class, shared in (
        ("Granite4VisionProcessor", "LlavaNextImageProcessor"),
        ("Gemma3nProcessor", "SiglipImageProcessor"),
        ("Qwen2_5OmniProcessor", "Qwen2VLImageProcessor"),
        ("NotAFamilyProcessor", "LlavaNextImageProcessor"),
    ):
        found = find_family(processor_class, shared)
        assert found is None or processor_class in found.processor_classes
    assert find_family("NotAFamilyProcessor", "Qwen2VLImageProcessor") is None
    assert find_family("LlavaNextProcessor", None).name == "llava-next"
    # A folder naming no processor class at all (google/vit-*): the image processor decides.
    assert find_family(None, "ViTImageProcessor").name == "vision-encoder"
    for family in FAMILIES:
        for processor_class in family.processor_classes:
            assert find_family(processor_class, "AnyImageProcessor") is family


def _folder(tmp_path, processor_class, image_processor_type, source="llava-1.5-7b"):
    for path in (PROCESSORS / source).iterdir():
        if "token" in path.name or path.name in ("chat_template.jinja", "config.json"):
            shutil.copy(path, tmp_path / path.name)
    (tmp_path / "processor_config.json").write_text(json.dumps({"processor_class": processor_class}))
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": image_processor_type, "processor_class": processor_class})
    )
    return str(tmp_path)


def test_a_foreign_processor_class_never_takes_the_family_of_its_image_processor(tmp_path):
    """A processor class transformers does not know, over LLaVA's image processor: refused, not LLaVA."""
    folder = _folder(tmp_path, "MadeUpVisionProcessor", "LlavaImageProcessor")
    with pytest.raises(ModelError, match="MadeUpVisionProcessor is not a family .* no processor class"):
        load_model(folder)


def test_an_image_processor_that_needs_torchvision_is_refused_with_that_reason(tmp_path):
    folder = _folder(tmp_path, "Gemma4UnifiedProcessor", "Gemma4UnifiedImageProcessor")  # no family
    with pytest.raises(
        ModelError, match=r"its image_processor needs torchvision \(pip install torch torchvision\)"
    ):
        load_model(folder)


def test_a_folder_without_processor_class_and_an_unknown_image_processor_is_refused(tmp_path):
    folder = _folder(tmp_path, "X", "BeitImageProcessor")
    for name in ("processor_config.json", "preprocessor_config.json"):
        (tmp_path / name).write_text(json.dumps({"image_processor_type": "BeitImageProcessor"}))
    for name in ("tokenizer_config.json",):
        config = json.loads((tmp_path / name).read_text())
        config.pop("processor_class", None)
        (tmp_path / name).write_text(json.dumps(config))
    with pytest.raises(ModelError, match="name no processor class"):
        load_model(folder)


def test_the_report_says_how_counts_were_made(tmp_path):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "scan",
            str(DATASETS / "llava"),
            "--model",
            str(PROCESSORS / "llava-1.5-7b"),
            "--format",
            "json",
            "--quiet",
        ],
    )
    assert json.loads(result.stdout)["model"]["counted_by"] == "formula (family llava)"
    result = runner.invoke(
        app, ["scan", str(DATASETS / "llava"), "--model", str(PROCESSORS / "llava-1.5-7b"), "--quiet"]
    )
    assert "counted by: formula (family llava)" in result.stdout
