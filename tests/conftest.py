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


def _real_auto_image_processor() -> None:
    """transformers 5.8.0 to 5.16.1 hand out a dummy top-level AutoImageProcessor without torch (and a
    dummy Idefics3ImageProcessorPil through it): the tests' reference side then gets the same real
    classes through vlmlint.models.compat, as later releases give them (`make test-versions`)."""
    import transformers.processing_utils  # its direct_transformers_import replaces sys.modules["transformers"]

    from vlmlint.models import compat

    transformers = sys.modules["transformers"]
    if compat.is_dummy(transformers.AutoImageProcessor):
        transformers.AutoImageProcessor = compat.AutoImageProcessor


_real_auto_image_processor()


def _families_missing(module_name: str) -> str | None:
    """Why a family module's tests cannot run here: every processor class of its families came in a later
    transformers than the installed one (vlmlint refuses them at load, naming the release)."""
    from vlmlint.models import compat
    from vlmlint.models.base import Family

    try:
        module = importlib.import_module(f"vlmlint.models.{module_name}")
    except ImportError:
        return None
    classes = [c for f in vars(module).values() if isinstance(f, Family) for c in f.processor_classes]
    reasons = [compat.missing_processor(c) for c in classes]
    return reasons[0] if classes and all(reasons) else None


@cache
def _folder_missing(name: str) -> str | None:
    """Why fixtures/processors/<name> cannot be loaded here: its processor came in a later transformers."""
    from vlmlint.models import compat

    for file in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        path = PROCESSORS / name / file
        try:
            processor_class = json.loads(path.read_text()).get("processor_class") if path.is_file() else None
        except (OSError, ValueError):
            continue
        if processor_class:
            return compat.missing_processor(processor_class)
    return None


def pytest_collection_modifyitems(config, items):
    """Tests of a family the installed transformers lacks skip, naming the release it came in:
    tests/families/test_<family>[_video].py, and any test parametrized with such a processor folder."""
    del config
    seen: dict[str, str | None] = {}
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        names = [v for v in params.values() if isinstance(v, str) and (PROCESSORS / v).is_dir()]
        reason = next((r for r in map(_folder_missing, names) if r), None)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
            continue
        path = Path(str(item.fspath))
        if path.parent.name != "families" or not path.stem.startswith("test_"):
            continue
        stem = path.stem.removeprefix("test_").removesuffix("_video")
        if stem not in seen:
            seen[stem] = _families_missing({"qwen": "qwen_vl"}.get(stem, stem))
        if seen[stem]:
            item.add_marker(pytest.mark.skip(reason=seen[stem]))


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
    from vlmlint.models import compat

    if compat.missing_processor(class_name):  # a family newer than this transformers: vlmlint refuses it
        pytest.skip(compat.missing_processor(class_name))
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
