"""The fallback for processors vlmlint has no formula for: counts come from the real processor."""

from __future__ import annotations

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import ModelError, load_model


def _without_family(monkeypatch):
    import vlmlint.models as models

    monkeypatch.setattr(models, "find_family", lambda processor_class, image_processor_type: None)


@pytest.mark.parametrize("folder", ["llava-1.5-7b", "llava-v1.6-mistral-7b", "idefics3-8b-llama3"])
def test_generic_counts_equal_the_family_formula(folder, monkeypatch):
    dataset = str(DATASETS / "llava")
    formula = Scanner(ScanConfig(dataset=dataset, model=str(PROCESSORS / folder)))
    _without_family(monkeypatch)
    generic = Scanner(ScanConfig(dataset=dataset, model=str(PROCESSORS / folder)))
    assert generic.family.name == "generic" and not generic.family.header_formula
    assert "no formula" in generic.model.notice
    compared = 0
    for a, b in zip(formula.scan(), generic.scan(), strict=True):
        assert (a.result.seq_len, a.result.image_tokens) == (b.result.seq_len, b.result.image_tokens)
        # The fallback knows counts, not the processor's resized size, which VLM208 compares against.
        assert [f.code for f in a.findings if f.code != "VLM208"] == [f.code for f in b.findings]
        compared += a.result.seq_len is not None
    assert compared > 10


def test_generic_refuses_clearly_when_the_processor_cannot_load(monkeypatch):
    _without_family(monkeypatch)
    # Qwen2-VL's processor declares a video processor: AutoProcessor needs torchvision for it.
    with pytest.raises(ModelError, match="no formula|could not be loaded"):
        load_model(str(PROCESSORS / "qwen2-vl"))
