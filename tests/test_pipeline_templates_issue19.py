"""--pipeline llamafactory / swift on issue 19's models: the trainer's template is named, and refused
where vlmlint does not reproduce it, never counted with another template's text."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.models import ModelError, load_model
from vlmlint.pipelines import PipelineError, llamafactory, load_pipeline, swift

# profile -> the LLaMA-Factory 0.9.5 template its checkpoint trains with (extras/constants.py), and
# ms-swift 4.6.0's (swift/model/models/*.py); None: the trainer registers none for it.
TEMPLATES = {
    "gemma-4": ("gemma4", "gemma4"),
    "glm-4.1v": ("glm4v", "glm4v"),
    "glm-4.6v": ("glm4_5v", "glm4_5v"),
    "minicpm-v-4.6": ("minicpm_v_4_6", "minicpmv4_6"),
    "qwen2.5-omni": ("qwen2_omni", "qwen2_5_omni"),
    "kimi-k2.5": (None, "kimi_k25"),
    "llama-4": ("llama4", "llama4"),
    "lfm2-vl": ("lfm2_vl", None),
    "phi-4-mm": (None, "phi4_multimodal"),
    "molmo2": (None, "molmo2"),
    "ernie-4.5-vl": ("ernie_vl", "ernie_vl"),
    "paddleocr-vl": (None, "paddle_ocr"),
    "internvl3.5": ("intern_vl", None),
}


def _scanner(profile: str, pipeline: str, **options) -> Scanner:
    try:
        model = load_model(profile)
    except ModelError as exc:  # a torchvision-only processor whose family has not landed: refused at load
        pytest.skip(str(exc))
    config = build_config(
        str(DATASETS / "demo"), {}, {"model": profile, "pipeline": pipeline, "pipeline_options": options}
    )
    return Scanner(config, model=model)


def _reproduced(profile: str) -> bool:
    return TEMPLATES[profile][0] in llamafactory.TEMPLATES


@pytest.mark.parametrize("profile", sorted(p for p in TEMPLATES if _reproduced(p)))
def test_llamafactory_scans_with_the_template_it_reproduces(profile):
    """The profile's default LLaMA-Factory template is the one its checkpoint registers."""
    template, _ = TEMPLATES[profile]
    scanner = _scanner(profile, "llamafactory")
    assert scanner.pipeline.template.name == template
    assert template not in llamafactory.NOT_REPRODUCED


@pytest.mark.parametrize("profile", sorted(p for p in TEMPLATES if not _reproduced(p)))
def test_llamafactory_names_the_template_it_does_not_reproduce(profile):
    template, _ = TEMPLATES[profile]
    with pytest.raises(PipelineError) as raised:
        _scanner(profile, "llamafactory")
    message = str(raised.value)
    if template is None:
        assert "name none for" in message
    else:
        assert f"template {template} (" in message and "not reproduced" in message
        assert template in llamafactory.NOT_REPRODUCED


@pytest.mark.parametrize("template", sorted(llamafactory.NOT_REPRODUCED))
def test_an_unreproduced_template_option_is_refused_by_name(template):
    with pytest.raises(PipelineError, match=f"template {template} .*not reproduced"):
        load_pipeline("llamafactory", {"template": template})


# the profiles whose ms-swift template vlmlint reproduces (tests/test_pipeline_swift.py proves each)
SWIFT_REPRODUCED = {"glm-4.1v", "glm-4.6v", "minicpm-v-4.6", "llama-4"}


@pytest.mark.parametrize(
    "profile", sorted(p for p, (_, t) in TEMPLATES.items() if t and p not in SWIFT_REPRODUCED)
)
def test_swift_names_its_own_template(profile):
    _, template = TEMPLATES[profile]
    with pytest.raises(PipelineError) as raised:
        _scanner(profile, "swift")
    assert template in str(raised.value) and "does not reproduce" in str(raised.value)


@pytest.mark.parametrize("profile", sorted(SWIFT_REPRODUCED))
def test_swift_scans_the_profiles_whose_template_it_reproduces(profile):
    scanner = _scanner(profile, "swift", max_length=64)
    model = scanner.model
    assert swift.REPRODUCED[model.processor_class].name == TEMPLATES[profile][1]
    fates = [outcome.result.trainer for outcome in scanner.scan() if outcome.result.trainer]
    assert fates and {fate.status for fate in fates} <= {"kept", "dropped", "truncated", "raise"}


def test_swift_glm4v_processor_is_reproduced_for_glm_4_1v_only(tmp_path):
    # GLM-4.5V shares Glm4vProcessor but trains with glm4_5v: its config's model_type tells them apart
    folder = tmp_path / "glm-4.5v"
    shutil.copytree(PROCESSORS / "glm-4.1v-9b-thinking", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "glm4v_moe"}))
    model = load_model(str(folder))
    with pytest.raises(PipelineError, match="recorded only for model_type glm4v"):
        load_pipeline("swift").bind(model)
    load_pipeline("swift").bind(load_model(str(PROCESSORS / "glm-4.1v-9b-thinking")))


def test_swift_refusals_say_what_differs():
    for processor, (template, source, why) in swift.NOT_REPRODUCED.items():
        assert template and source.endswith(".py") and len(why) > 30, processor


def test_swift_still_scans_the_families_it_reproduces():
    names = {processor for processor in swift.NOT_REPRODUCED}
    assert "Qwen2VLProcessor" not in names and "LlavaProcessor" not in names
    assert not names & set(swift.REPRODUCED)
