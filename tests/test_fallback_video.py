"""The real-processor fallback's videos without torch (issue 20, part 3): never a number, a warning.

VideoLlama3Processor (fixtures/processors/videollama3-tiny, fixtures/families/video_llama3.py) has no
family formula: the fallback counts its rows. Its video processor needs torch and torchvision, and its
use_token_compression drops patches by their pixel content, so without them a video row keeps VLM109
saying both: that the tokens cannot be predicted from headers, and what to install. With torch the
videos are counted by the real processor (tests/reference/test_fallback_video.py).
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.readers import iter_samples

FOLDER = str(PROCESSORS / "videollama3-tiny")
CLIP = DATASETS / "media" / "clips" / "h264_320x240_24fps.mp4"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is not None,
    reason="torchvision installed: the real video processor counts (tests/reference/test_fallback_video.py)",
)


def _scan(tmp_path, model):
    shutil.copy(CLIP, tmp_path / CLIP.name)
    row = {
        "messages": [
            {"role": "user", "content": "<video>Describe it"},
            {"role": "assistant", "content": "ok"},
        ],
        "videos": [CLIP.name],
    }
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    scanner = Scanner(ScanConfig(dataset="", model=FOLDER), model=model)
    return next(iter(scanner.scan_samples(iter_samples(str(tmp_path / "rows.jsonl")))))


def test_video_llama3_without_torch_says_why_and_what_to_install(tmp_path):
    model = load_model(FOLDER)
    assert model.family.name == "fallback" and model.processor_class == "VideoLlama3Processor"
    refusal = model.video_refusal
    assert refusal.startswith("VideoLlama3Processor's video tokens cannot be predicted from headers")
    assert "VideoLlama3VideoProcessor, use_token_compression" in refusal and "pixel content" in refusal
    assert (
        "install torch and torchvision to count VideoLlama3Processor videos through its real processor"
        in refusal
    )
    outcome = _scan(tmp_path, model)
    assert [f.code for f in outcome.findings] == ["VLM109"]
    message = outcome.findings[0].message
    assert "cannot be predicted from headers" in message and "install torch and torchvision" in message
    assert "is a lower bound" in message
    assert [info.tokens for info in outcome.result.media] == [None]  # never a number
    assert outcome.result.seq_len is not None and outcome.result.count_error is None


def test_a_fallback_without_compression_says_only_what_to_install(tmp_path):
    folder = tmp_path / "plain"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "video_preprocessor_config.json").read_text())
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps({**config, "use_token_compression": False})
    )
    refusal = load_model(str(folder)).video_refusal
    assert refusal.startswith("VideoLlama3Processor's videos are not counted: install torch and torchvision")
    assert "headers" not in refusal


def test_the_core_path_imports_no_torch():
    import subprocess
    import sys

    code = (
        f"import sys; from vlmlint.models import load_model; load_model({FOLDER!r}); "
        "print(any(m in sys.modules for m in ('torch', 'torchvision', 'av')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
