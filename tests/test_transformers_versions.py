"""The transformers releases vlmlint supports (issue 22; README "transformers versions"): the floor and the
refusals name the release to install, and the profiles' tokenizer conversions give the same file on every
supported release (`make test-versions` runs this file in each release's venv)."""

from __future__ import annotations

import hashlib
import re

import pytest
from packaging.version import Version

from vlmlint.models import ModelError, compat, load_model, profiles

# tokenizer.json digests built on transformers 5.0.0, 5.8.0 and 5.24.0 alike (2026-12-03), keyed by the
# cache file's name (source package version and source file digest): another source skips.
BUILT = {
    "qwen-0.3.0-b2b1b8dfb5cc5f02.json": "7afd88a3c0d741668f202c8c03d0c8919e5a2482bcafd1538d51e28a5b7dfedd",
    "mistral-v1-1.13.1-dadfd56d766715c6.json": "c64eef07f63389da8aa085a95ad3a7b2e0c4e46e370947d005ad9af0fb2b204c",
    "tekken-1.13.1-1948e2d48b0e7377.json": "ca7aee5d41906d5006ebeb516f1c0f11f67cf7591ef8a71713128d464b2047ed",
}


def test_the_installed_release_is_supported():
    assert compat.unsupported() is None
    assert Version(compat.transformers_version()) >= Version(compat.MIN_TRANSFORMERS)


def test_an_older_release_is_refused_at_load_naming_the_one_to_install(monkeypatch):
    monkeypatch.setattr(compat, "transformers_version", lambda: "5.4.0")
    range_ = re.escape(f"pip install 'transformers>=5.5.0,<{compat.FIRST_UNPROVEN}'")
    with pytest.raises(ModelError, match=r"5\.4\.0 is older.*" + range_):
        load_model("qwen2-vl")


def test_a_release_past_the_proven_range_is_refused_unless_allowed(monkeypatch):
    newer = compat.FIRST_UNPROVEN
    monkeypatch.setattr(compat, "transformers_version", lambda: newer)
    monkeypatch.delenv(compat.ALLOW_UNTESTED, raising=False)
    range_ = re.escape(f"pip install 'transformers>=5.5.0,<{newer}'")
    with pytest.raises(ModelError, match=re.escape(newer) + " is newer.*" + range_):
        load_model("qwen2-vl", light=False)
    monkeypatch.setenv(compat.ALLOW_UNTESTED, "1")
    assert compat.unsupported() is None and "counts may differ" in compat.untested()


def test_processor_since_agrees_with_the_installed_release():
    installed = Version(compat.transformers_version())
    for name, since in compat.PROCESSOR_SINCE.items():
        assert compat.has_class(name) == (installed >= Version(since)), (name, since)


def test_a_processor_of_a_later_release_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(compat, "has_class", lambda name: False)
    assert "it came in transformers 5.5.0: pip install 'transformers>=5.5.0'" in compat.missing_processor(
        "Gemma4Processor"
    )
    assert compat.missing_processor("NoSuchProcessor").endswith("pip install -U transformers")


def test_a_processor_this_release_cannot_import_without_torch_is_refused(monkeypatch):
    """transformers 5.16.1's and 5.20.0's processing_gemma4 imports image_processing_gemma4, which imports
    torch: Gemma4Processor is refused there with the reason, not an internal error."""
    assert compat.import_error("Qwen2VLProcessor") is None and compat.import_error("NoSuchProcessor") is None
    monkeypatch.setattr(compat, "import_error", lambda name: "ModuleNotFoundError: Could not import module")
    refusal = compat.missing_processor("Gemma4Processor")
    assert "cannot be imported from the installed transformers" in refusal and "pip install torch" in refusal


def test_the_pil_image_processor_is_found_from_its_own_module():
    cls = compat.image_processor_class("Qwen2VLImageProcessor")
    assert cls is not None and cls.__name__ == "Qwen2VLImageProcessorPil" and not compat.is_dummy(cls)
    assert compat.image_processor_class("NoSuchImageProcessor") is None


@pytest.mark.parametrize("build", ["qwen_bpe_json", "mistral_v1_json", "tekken_json"])
def test_profile_tokenizers_are_the_same_file_on_every_release(build, tmp_path, monkeypatch):
    monkeypatch.setenv("VLMLINT_CACHE", str(tmp_path))
    for cached in ("_qwen_identity", "_tekken_identity", "_mistral_v1_identity"):
        getattr(getattr(profiles, cached, None), "cache_clear", lambda: None)()
    path = getattr(profiles, build)()
    if path.name not in BUILT:
        pytest.skip(f"{path.name}: another source file than the recorded ones")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == BUILT[path.name]
