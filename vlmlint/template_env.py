"""transformers' chat template environment and message preparation, reproduced so that vlmlint/templates.py
renders without importing transformers (issue 23: a small scan starts in a fraction of a second).

utils/chat_template_utils.py of transformers 5.24.0, the same in 5.25.0 (the releases `LIGHT_TRANSFORMERS` names; on any other
release templates.py uses the installed transformers' own): _cached_compile_jinja_template's environment
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols and the generation tracker,
tojson, raise_exception, strftime_now, dict, namespace) and the messages as render_jinja_template prepares
them (_plain_template_data, _alias_reasoning_fields). tests/test_fast_start.py renders the same
conversations both ways. The built-in profiles' light loading (tokenizer and settings) is
vlmlint/models/light.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from functools import cache
from typing import Any

# The transformers releases whose loading and template semantics vlmlint reproduces without importing them
# (tests/test_fast_start.py passes on each).
LIGHT_TRANSFORMERS = frozenset({"5.24.0", "5.25.0"})


@cache
def installed_transformers() -> str | None:
    """The installed transformers' version, from its metadata (never imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


@cache
def templates_light() -> bool:
    """Whether vlmlint/templates.py may render with this module's copy of transformers' environment."""
    return installed_transformers() in LIGHT_TRANSFORMERS


# --- the chat template environment (utils/chat_template_utils.py, transformers 5.24.0) -----------------


@cache
def _environment_factory() -> Any:
    """_cached_compile_jinja_template's body: a function of a template to its compiled form."""
    from contextlib import contextmanager
    from contextvars import ContextVar
    from datetime import datetime

    import jinja2
    import jinja2.exceptions
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja's own class attribute)

        def __init__(self, environment: Any) -> None:
            super().__init__(environment)
            environment.extend(activate_tracker=self.activate_tracker)
            self._tracking: ContextVar = ContextVar("assistant_tracker", default=None)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(
                lineno
            )

        @jinja2.pass_eval_context
        def _generation_support(self, context: Any, caller: Any) -> str:
            rv = caller()
            if (tracking := self._tracking.get()) is not None:
                rendered_blocks, generation_indices = tracking
                start_index = len("".join(rendered_blocks))
                generation_indices.append((start_index, start_index + len(rv)))
            return rv

        def is_active(self) -> bool:
            return self._tracking.get() is not None

        @contextmanager
        def activate_tracker(self, rendered_blocks: list, generation_indices: list) -> Any:
            if self.is_active():
                raise ValueError("AssistantTracker should not be reused before closed")
            token = self._tracking.set((rendered_blocks, generation_indices))
            try:
                yield
            finally:
                self._tracking.reset(token)

    from packaging import version

    if version.parse(jinja2.__version__) < version.parse("3.1.6"):
        raise ImportError(
            f"apply_chat_template requires jinja2>=3.1.6 to be installed. Your version is {jinja2.__version__}. "
            "You can upgrade it with `pip install -U jinja2`."
        )

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:  # noqa: A002 (transformers' name)
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (jinja's Namespace signature trick)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute."
                )

    def compile_jinja_template(chat_template: str) -> Any:
        jinja_env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
        )
        jinja_env.filters["tojson"] = tojson
        jinja_env.globals["raise_exception"] = raise_exception
        jinja_env.globals["strftime_now"] = strftime_now
        jinja_env.globals["dict"] = TemplateDict()
        jinja_env.globals["namespace"] = TemplateNamespace
        return jinja_env.from_string(chat_template)

    return compile_jinja_template


def compile_jinja_template(chat_template: str) -> Any:
    """transformers' _cached_compile_jinja_template (5.24.0), without importing transformers."""
    return _environment_factory()(chat_template)


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def alias_reasoning_fields(chat: list[Any]) -> list[Any]:
    """transformers' _alias_reasoning_fields (5.24.0)."""
    aliased = []
    for message in chat:
        if isinstance(message, dict):
            reasoning = next(
                (message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None
            )
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        aliased.append(message)
    return aliased


def plain_template_data(value: Any) -> Any:
    """transformers' _plain_template_data (5.24.0); numpy scalars only where numpy is already loaded
    (a row's JSON data holds none)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_template_data(key): plain_template_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_template_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_template_data(item) for item in value)
    np = __import__("sys").modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        return plain_template_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_template_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_template_data(value.model_dump())
    return f"<{type(value).__name__}>"
