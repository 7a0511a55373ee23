"""Shared test helpers: fixture paths and the REAL transformers processors, built without torchvision."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import sys
import types
import warnings
from functools import cache
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
    if class_name == "PixtralProcessor":  # its module imports a torch-only helper: see below
        processor_class = real_pixtral_processor_class()
    else:
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
    required = inspect.signature(processor_class.__init__).parameters
    if "video_processor" in required:
        parts["video_processor"] = None
    # SmolVLMProcessor.apply_chat_template reads its video processor's num_frames / fps; fixtures/support.py
    # stubs it, as it does MiniCPM-V's and the audio parts
    if "feature_extractor" in required or "audio_processor" in required or class_name == "SmolVLMProcessor":
        # Gemma 3n / Gemma 4 need their audio part (torch): fixtures/support.py stubs it
        from fixtures import support

        return support.real_processor(folder)
    try:
        return WithoutVideo(**parts, chat_template=template, **processor_kwargs)
    except AttributeError:  # MiniCPM-V reads its video processor's settings: fixtures/support.py stubs it
        from fixtures import support

        return support.real_processor(folder)


TORCH_MODULE = "transformers.models.pixtral.image_processing_pixtral"


def _function_ast(source: str, name: str) -> str:
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.dump(node)


@cache
def real_pixtral_processor_class():
    """transformers' own PixtralProcessor, importable without torch (see the module docstring)."""
    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    torch_source = Path(importlib.util.find_spec(TORCH_MODULE).origin).read_text()
    pil_source = Path(pil.__file__).read_text()
    for name in ("get_resize_output_image_size", "_num_image_tokens"):
        assert _function_ast(torch_source, name) == _function_ast(pil_source, name), name
    if "transformers.models.pixtral.processing_pixtral" in sys.modules:
        module = sys.modules["transformers.models.pixtral.processing_pixtral"]
    else:
        stub = types.ModuleType(TORCH_MODULE)
        stub.get_resize_output_image_size = pil.get_resize_output_image_size
        had = sys.modules.get(TORCH_MODULE)
        sys.modules[TORCH_MODULE] = had or stub
        try:
            module = importlib.import_module("transformers.models.pixtral.processing_pixtral")
        finally:
            if had is None:
                del sys.modules[TORCH_MODULE]
    return module.PixtralProcessor


@pytest.fixture(scope="session", autouse=True)
def vlmlint_cache(tmp_path_factory):
    """Built-in profiles are prepared in a session folder, never in the user's ~/.cache/vlmlint."""
    folder = tmp_path_factory.mktemp("vlmlint-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("VLMLINT_CACHE", str(folder))
    yield folder
    patch.undo()


@pytest.fixture(scope="session")
def processors_dir() -> Path:
    return PROCESSORS


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    return DATASETS
