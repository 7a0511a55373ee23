"""What the family tests need from the installed transformers release (issue 22: 5.5.0 to 5.24.0).

The differential tests compare vlmlint with the installed release's own code. Some compare with a
processor helper that only later releases have (`replace_image_token` and `_get_num_multimodal_tokens`,
ProcessorMixin in 5.2x; `_merge_kwargs` without its kwargs class, 5.2x): on an older release those tests
skip, naming the helper, while the same file's whole-prompt tests still run the processor's __call__
of that release. Nothing here changes what a test expects.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def needs(obj: Any, attr: str) -> Any:
    """obj.attr, or a skip where the installed release's class has no such helper (or only
    ProcessorMixin's stub, which raises NotImplementedError: Gemma3nProcessor.replace_image_token in 5.16.1)."""
    value = getattr(obj, attr, None)
    why = (
        f"transformers {transformers_version()}'s {_class_name(obj)} has no {attr} "
        "(a later release's helper); this release's __call__ is compared by the whole-prompt tests"
    )
    if value is None:
        pytest.skip(why)
    if not callable(value):
        return value

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return value(*args, **kwargs)
        except NotImplementedError:
            pytest.skip(why)

    return call


def _class_name(obj: Any) -> str:
    """The real class's name (the harness wraps it in Absent / WithoutVideo subclasses)."""
    return _real_class(obj).__name__


def merge_kwargs(processor: Any, **kwargs: Any) -> dict[str, Any]:
    """processor._merge_kwargs(tokenizer_init_kwargs=...) on every release: up to 5.20 it takes the
    processor's ProcessingKwargs class first (models/*/processing_*.py `XProcessorKwargs`)."""
    method = processor._merge_kwargs
    init = processor.tokenizer.init_kwargs
    params = list(inspect.signature(method).parameters)
    if params and params[0] == "ModelProcessorKwargs":
        module = inspect.getmodule(_real_class(processor))
        name = f"{_class_name(processor)}Kwargs"
        return method(getattr(module, name), tokenizer_init_kwargs=init, **kwargs)
    return method(tokenizer_init_kwargs=init, **kwargs)


def _real_class(obj: Any) -> type:
    for cls in type(obj).__mro__:
        if cls.__name__ not in ("Absent", "WithoutVideo"):
            return cls
    return type(obj)


def records(release: str, why: str) -> pytest.MarkDecorator:
    """A test that records `release`'s behaviour where older releases differ for a reason outside
    vlmlint's counts (a helper's or a refusal's behaviour, measured on 5.5.0 and 5.8.0): it skips on
    those, saying why."""
    from packaging.version import Version

    older = Version(transformers_version()) < Version(release)
    return pytest.mark.skipif(older, reason=f"records transformers {release}: {why}")
