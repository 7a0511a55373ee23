"""The support matrix's differential test: every model type it says is proven, counted as the real
processor counts it.

The model types come from transformers' own auto mappings (vlmlint/models/support.py, no hand-kept
list). For each one whose text gets image tokens and that vlmlint does not refuse, fixtures/support.py
builds a tiny hub-style processor folder from the class defaults, scans a dataset of one- and
two-image rows of varied sizes with vlmlint, and calls the real processor class directly. A model
type is left out only with a reason stated in support.LEFT_OUT (checked below) or because it is
refused (support.NEEDS_AT_CALL, checked below; or its image processor needs torch/torchvision).
"""

from __future__ import annotations

import re

import pytest

from fixtures import support as harness
from tests.conftest import ROOT
from vlmlint.models import registry, support

ENTRIES = {entry.model_type: entry for entry in support.support_matrix()}
COVERED = sorted(m for m, e in ENTRIES.items() if support.in_differential_test(e))

# The "done when": these are counted exactly (real model-type names of the mappings).
MUST_BE_COVERED = (
    "gemma4",
    "glm4v",  # GLM-4.1V
    "glm46v",
    "ernie4_5_vl_moe",
    "minicpmv4_6",
    "qwen2_5_omni",
    "qwen3_omni_moe",
    "granite4_vision",
    "gemma3n",
    "hunyuan_vl",  # HunyuanOCR
    "ovis2",
    "aya_vision",
    "idefics2",
    "deepseek_vl",
    "deepseek_vl_hybrid",
    "paddleocr_vl",
    "deepseek_ocr2",
    "dots3_note",
    "lighton_ocr",
    "qianfan_ocr",
)


@pytest.fixture(scope="session")
def support_root(tmp_path_factory):
    return tmp_path_factory.mktemp("support-matrix")


@pytest.mark.parametrize("model_type", COVERED)
def test_vlmlint_counts_equal_the_real_processor(model_type, support_root):
    outcome = harness.compare(model_type, support_root)
    assert outcome.ok, f"{model_type} ({outcome.route}, vlmlint: {outcome.vlmlint_route}):\n" + "\n".join(
        outcome.problems
    )


def test_the_matrix_is_the_auto_mappings():
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    listed = set(PROCESSOR_MAPPING_NAMES) & set(IMAGE_PROCESSOR_MAPPING_NAMES)
    assert listed <= set(ENTRIES)
    assert list(ENTRIES) == sorted(ENTRIES)
    for entry in ENTRIES.values():
        assert entry.processor_class == PROCESSOR_MAPPING_NAMES[entry.model_type]
        assert (entry.route == "formula") == (entry.family is not None)
        assert (entry.route == "refused") == (entry.reason is not None)
        assert entry.proven in (True, support.RECORDED) or entry.proven.startswith("not covered: ")
        if entry.proven == support.RECORDED:  # torchvision-only: a formula family with recorded outputs
            assert entry.route == "formula" and registry.family_named(entry.family).needs_torchvision
    for model_type in MUST_BE_COVERED:
        assert model_type in COVERED, f"{model_type}: {ENTRIES[model_type].proven}"


@pytest.mark.parametrize("model_type", sorted(support.LEFT_OUT) + sorted(support.NEEDS_AT_CALL))
def test_each_left_out_reason_holds(model_type, support_root):
    """A left-out or call-time refusal is stated because the real processor raises on every row."""
    entry = ENTRIES[model_type]
    assert entry.image_tokens_in_text and not support.in_differential_test(entry)
    built = harness.build_folder(model_type, support_root / "left-out")
    rows = harness.reference_counts(built, harness.build_dataset(support_root / "dataset"))
    assert all(row.seq_len is None for row in rows), [row.seq_len for row in rows]


def test_docs_page_is_generated_from_the_matrix():
    """The page lists one release's model types (each release adds some): it is compared on the release it
    names, the newest pyproject.toml allows, which `make install` takes."""
    import transformers

    page = (ROOT / "docs" / "models" / "support.md").read_text(encoding="utf-8")
    named = re.search(r"Generated from the installed transformers \(([^)]+)\)", page)
    assert named, "docs/models/support.md does not name the transformers release it was generated from"
    if named[1] != transformers.__version__:
        pytest.skip(
            f"docs/models/support.md is transformers {named[1]}'s, this is {transformers.__version__}"
        )
    assert page == support.render_markdown(), (
        "docs/models/support.md is stale: python -m vlmlint.models.support docs/models/support.md"
    )


def test_models_all_prints_the_matrix():
    from typer.testing import CliRunner

    from vlmlint.cli import app

    result = CliRunner().invoke(app, ["models", "--all"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    entries = support.support_matrix()
    assert support.totals_line(entries) in result.output
    assert all(entry.model_type in result.output for entry in entries)


NO_IMAGE_TOKENS = sorted(
    m
    for m, e in ENTRIES.items()
    if not e.image_tokens_in_text and e.route != "refused" and e.image_processors
)


@pytest.mark.parametrize("model_type", NO_IMAGE_TOKENS)
def test_no_image_tokens_claim_holds(model_type, support_root):
    """The other way round: a processor said to write no image tokens leaves the text's ids as they are."""
    result = harness.no_image_tokens_hold(model_type, support_root)
    if result != "ok" and not result.startswith("no tokenizer"):
        assert result.startswith("cannot be checked"), result
        pytest.skip(f"{model_type}: {result}")
