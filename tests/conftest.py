"""Shared test helpers: fixture paths and the REAL transformers processors, built without torchvision."""

from __future__ import annotations

import inspect
import json
import os
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PROCESSORS = FIXTURES / "processors"
DATASETS = FIXTURES / "datasets"


def real_processor(folder: str | os.PathLike):
    """The model's real transformers processor class, built from the folder's own files.

    Qwen-VL processors declare a video processor, and transformers 5.x cannot build one without
    torchvision; the processor is therefore built with video_processor=None by skipping only the
    class check for that slot. Everything vlmlint is compared against (image processor, placeholder
    expansion in ProcessorMixin.__call__, tokenizer, chat template) is the real code.
    """
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    folder = Path(folder)
    files = {
        name: folder / name
        for name in ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json")
    }
    configs = {name: json.loads(path.read_text()) for name, path in files.items() if path.is_file()}
    class_name = next(c["processor_class"] for c in configs.values() if "processor_class" in c)
    processor_class = getattr(transformers, class_name)
    # The processor's own settings (patch_size, image_seq_len, ...) as from_pretrained would pass them.
    processor_kwargs = {
        k: v
        for k, v in configs.get("processor_config.json", {}).items()
        if k not in ("processor_class", "image_processor", "chat_template", "video_processor")
    }

    class WithoutVideo(processor_class):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        image_processor = AutoImageProcessor.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    template_file = folder / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else None
    parts = {"image_processor": image_processor, "tokenizer": tokenizer}
    if "video_processor" in inspect.signature(processor_class.__init__).parameters:
        parts["video_processor"] = None
    return WithoutVideo(**parts, chat_template=template, **processor_kwargs)


@pytest.fixture(scope="session")
def processors_dir() -> Path:
    return PROCESSORS


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    return DATASETS
