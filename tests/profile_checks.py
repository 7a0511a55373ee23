"""Checks shared by the profile tests: a scan against the real processor, and the tokenizer cache."""

from __future__ import annotations

from tests.conftest import DATASETS, real_processor
from vlmlint.config import ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.models import load_model, profiles
from vlmlint.template_cache import conversation_for_template, without_media


def scan_equals_real_processor(
    name: str, model, image_token_id: int, dataset: str = "llava", reference: str | None = None
) -> list[tuple[list[int], int]]:
    """`vlmlint scan fixtures/datasets/<dataset> --model <name>` row by row against the transformers
    processor built from the `reference` profile's folder (default: the same profile). Returns each
    counted row's input_ids and image count, for checks of a family's own markers."""
    from tests.test_fixtures import _decode

    folder = profiles.profile_folder(profiles.PROFILES[reference or name])
    processor = real_processor(folder)
    config = build_config(str(DATASETS / dataset), {"model": name}, {"jobs": 1})
    scanner = Scanner(ScanConfig(**{**config.__dict__}), model=model)
    rows = []
    for outcome in scanner.scan():
        result = outcome.result
        if result.seq_len is None:
            continue
        sample = result.sample
        text = processor.apply_chat_template(conversation_for_template(without_media(sample.messages)))
        images = [_decode(ref) for ref in sample.images]
        output = processor(text=[text], images=[images] if images else None, return_tensors=None)
        ids = list(output["input_ids"][0])
        assert result.seq_len == len(ids), sample.location
        assert sum(result.image_tokens) == ids.count(image_token_id), sample.location
        rows.append((ids, len(images)))
    return rows


def second_load_does_not_rebuild(tmp_path, monkeypatch, name: str, build: str, identity: str, pattern: str):
    """The first load builds the cached tokenizer (profiles.<build>) once; a second load reuses it."""
    monkeypatch.setenv("VLMLINT_CACHE", str(tmp_path))
    getattr(profiles, identity).cache_clear()
    calls = []
    real_build = getattr(profiles, build)
    monkeypatch.setattr(profiles, build, lambda *a: calls.append(a) or real_build(*a))
    first = load_model(name)
    assert len(calls) == 1 and len(list((tmp_path / "tokenizers").glob(pattern))) == 1

    def refuse(*args):
        raise AssertionError(f"the {name} tokenizer was rebuilt")

    monkeypatch.setattr(profiles, build, refuse)
    getattr(profiles, identity).cache_clear()
    assert load_model(name).tokenizer("Hello")["input_ids"] == first.tokenizer("Hello")["input_ids"]
