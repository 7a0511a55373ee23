"""Chat templates rendered as processor.apply_chat_template does, with bounds on their work.

A model folder's chat template is code from whoever wrote the folder (in CI, perhaps a pull request).
transformers renders it in jinja's sandbox, which stops attribute escapes but not work: nested loops
or a doubling string take minutes and gigabytes. Each render here has:

- a time bound (MAX_RENDER_SECONDS): checked on every call, attribute lookup, operator, output chunk
  and `range` item, and, in the main thread, by a CPU-time timer (SIGVTALRM) for loops that do none;
- an output bound (MAX_RENDER_CHARS, or twice the conversation's own text when that is larger):
  counted per output chunk, and checked before `*`, `+`, `%`, `~`, and the filters that can grow a
  string, so that no single operation allocates beyond it;
- an iteration bound (MAX_RENDER_ITERATIONS) on `range` items.

The environment is transformers' own (its filters, globals and extensions), so a normal template
renders to exactly transformers' string.
"""

from __future__ import annotations

import functools
import math
import re
import signal
import threading
import time
from collections import OrderedDict
from typing import Any

MAX_RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 16 * 2**20
MAX_RENDER_ITERATIONS = 1_000_000
MAX_TEMPLATE_CHARS = 2**20  # real chat templates are under 64 KB
_MAX_POWER_BITS = 2**16  # `**` on integers: a result above 65,536 bits is refused before it is computed
_COMPILED_CACHE = 8
_TIMER_STEP = 0.1

_state = threading.local()
_compiled: OrderedDict[str, Any] = OrderedDict()
_WIDE_FORMAT = re.compile(r"%[-+ #0]*(?:\*|\d{7,})|%[-+ #0]*\d*\.(?:\*|\d{7,})")


class TemplateLimit(Exception):
    """A chat template render went past one of its bounds."""


class _Budget:
    __slots__ = ("deadline", "chars", "iterations")

    def __init__(self, seconds: float, chars: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.chars = chars
        self.iterations = MAX_RENDER_ITERATIONS


def _budget() -> _Budget:
    budget = getattr(_state, "budget", None)
    # Outside render() (jinja folding constants at compile time): each call gets the bounds afresh.
    return budget if budget is not None else _Budget(MAX_RENDER_SECONDS, MAX_RENDER_CHARS)


def _tick() -> _Budget:
    budget = _budget()
    if time.monotonic() > budget.deadline:
        raise TemplateLimit(f"the chat template ran longer than {MAX_RENDER_SECONDS:g} s (its time bound)")
    return budget


def _too_long(size: int) -> None:
    budget = _budget()
    if size > budget.chars:
        raise TemplateLimit(
            f"the chat template's output exceeded {budget.chars:,} characters (its size bound)"
        )


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


class _Range:
    """The sandbox's range, each item counted against the render's iteration and time bounds."""

    __slots__ = ("_range",)

    def __init__(self, inner: range) -> None:
        self._range = inner

    def __iter__(self):
        for item in self._range:
            budget = _tick()
            budget.iterations -= 1
            if budget.iterations < 0:
                raise TemplateLimit(
                    f"the chat template exceeded {MAX_RANGE_TEXT} loop iterations (its iteration bound)"
                )
            yield item

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index):
        item = self._range[index]
        return _Range(item) if isinstance(item, range) else item

    def __contains__(self, item) -> bool:
        return item in self._range

    def __reversed__(self):
        return iter(_Range(self._range[::-1]))

    def __eq__(self, other) -> bool:
        return self._range == (other._range if isinstance(other, _Range) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._range)

    __str__ = __repr__


MAX_RANGE_TEXT = f"{MAX_RENDER_ITERATIONS:,}"


def _install(env: Any) -> None:
    """Bound an environment of transformers' kind, in place (it is vlmlint's own copy)."""
    cls = type(env)
    safe_range = env.globals["range"]

    def bounded_range(*args: Any) -> _Range:
        _tick()
        return _Range(safe_range(*args))

    def call(__context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        _precheck(name, (owner, *args) if isinstance(owner, str) else args, kwargs)
        result = cls.call(env, __context, __obj, *args, **kwargs)
        _too_long(_size(result))
        return result

    def getattr_(obj: Any, attribute: str) -> Any:
        _tick()
        if isinstance(obj, str) and attribute in ("format", "format_map"):  # wrapped by the sandbox below
            _precheck("format", (obj,), {})
        return cls.getattr(env, obj, attribute)

    def getitem(obj: Any, argument: Any) -> Any:
        _tick()
        return cls.getitem(env, obj, argument)

    def call_binop(context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if _size(seq) and isinstance(times, int):
                    _too_long(_size(seq) * max(times, 0))
        elif operator == "+":
            _too_long(_size(left) + _size(right))
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                if right * math.log2(abs(left)) > _MAX_POWER_BITS:
                    raise TemplateLimit(f"the chat template computes {left} ** {right}: too large a number")
        elif operator == "%" and isinstance(left, str):
            if _WIDE_FORMAT.search(left):
                raise TemplateLimit("the chat template formats with a field width above 1,000,000")
        result = cls.call_binop(env, context, operator, left, right)
        _too_long(_size(result))
        return result

    env.globals["range"] = bounded_range
    env.call = call
    env.getattr = getattr_
    env.getitem = getitem
    env.call_binop = call_binop
    env.intercepted_binops = frozenset({"*", "+", "**", "%"})
    for name in list(env.filters):
        env.filters[name] = _bounded_filter(env.filters[name])


def _bounded_filter(function: Any) -> Any:
    @functools.wraps(function)  # keeps jinja's pass_context / pass_eval_context marks (its __dict__)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        _precheck(function.__name__.removeprefix("do_"), args, kwargs)
        result = function(*args, **kwargs)
        _too_long(_size(result))
        return result

    return bounded


_WIDE_BRACE = re.compile(r"\{[^{}]*:[^{}]*\d{7,}")


def _precheck(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a call (filter or str method) whose result would exceed the output bound, before it runs."""
    limit = _budget().chars
    for value in (*args, *kwargs.values()):  # a width, count or repeat beyond the bound
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            raise TemplateLimit(f"the chat template passes {value:,} to {name}, above its size bound")
    texts = [a for a in args if isinstance(a, str)]
    if name == "replace" and len(texts) >= 3:  # s.replace(old, new), s | replace(old, new)
        s, old, new = texts[:3]
        grows = (len(new) - len(old)) * (s.count(old) if old else len(s) + 1)
        _too_long(len(s) + max(grows, 0))
    elif (
        name in ("format", "format_map")
        and texts
        and (_WIDE_BRACE.search(texts[0]) or _WIDE_FORMAT.search(texts[0]))
    ):
        raise TemplateLimit("the chat template formats with a field width above 1,000,000")
    elif name == "join":
        for value in args:
            if isinstance(value, (list, tuple)):
                separator = next((t for t in texts if t is not value), "")
                parts = sum(len(v) for v in value if isinstance(v, str))
                _too_long(parts + len(separator) * max(len(value) - 1, 0))


def _bounded_join(join: Any) -> Any:
    def bounded(seq: Any) -> str:
        pieces = [piece if isinstance(piece, str) else str(piece) for piece in seq]
        _too_long(sum(map(len, pieces)))
        return join(pieces)

    return bounded


def _transformers_compile() -> Any:
    """transformers' template compiler: _cached_compile_jinja_template from 5.3.0, _compile_jinja_template
    in 5.0 to 5.2 (the same sandboxed environment, filters and globals); on the release vlmlint/template_env.py
    reproduces, its copy of that environment, so that rendering does not import transformers."""
    from vlmlint import template_env as light

    if light.templates_light():
        return light.compile_jinja_template
    from transformers.utils import chat_template_utils as utils

    return getattr(utils, "_cached_compile_jinja_template", None) or utils._compile_jinja_template


def _prepared(conversation: Any) -> Any:
    """The messages as the installed transformers' render_jinja_template hands them to the template: plain
    data (_plain_template_data, 5.23+) with reasoning fields aliased (_alias_reasoning_fields, 5.21+);
    earlier releases pass the messages as given (vlmlint's rows are plain JSON data already)."""
    from vlmlint import template_env as light

    if light.templates_light():
        return light.alias_reasoning_fields(light.plain_template_data(conversation))
    from transformers.utils import chat_template_utils as utils

    plain = getattr(utils, "_plain_template_data", None)
    alias = getattr(utils, "_alias_reasoning_fields", None)
    chat = plain(conversation) if plain is not None else conversation
    return alias(chat) if alias is not None else chat


def _prepared_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    from vlmlint import template_env as light

    if light.templates_light():
        return light.plain_template_data(kwargs)
    from transformers.utils import chat_template_utils as utils

    plain = getattr(utils, "_plain_template_data", None)  # 5.23+; earlier, the kwargs as given
    return plain(kwargs) if plain is not None else dict(kwargs)


def compile_template(template: str) -> Any:
    """transformers' compiled template, in vlmlint's own bounded copy of its environment (cached)."""
    compiled = _compiled.get(template)
    if compiled is not None:
        _compiled.move_to_end(template)
        return compiled
    env = _transformers_compile()("").environment  # a fresh environment as transformers sets it up
    _install(env)  # before compiling: intercepted operators are chosen at compile time
    compiled = env.from_string(template)
    namespace = compiled.root_render_func.__globals__  # `~` joins through these
    for name in ("str_join", "markup_join"):
        if name in namespace:
            namespace[name] = _bounded_join(namespace[name])
    _compiled[template] = compiled
    while len(_compiled) > _COMPILED_CACHE:
        _compiled.popitem(last=False)
    return compiled


def _text_chars(value: Any, depth: int = 0) -> int:
    if isinstance(value, str):
        return len(value)
    if depth > 8:
        return 0
    if isinstance(value, dict):
        return sum(_text_chars(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_text_chars(v, depth + 1) for v in value)
    return 0


def render(
    template: str, conversation: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any
) -> str:
    """transformers' render_jinja_template for one conversation, bounded (TemplateLimit beyond)."""
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateLimit(
            f"the chat template is {len(template):,} characters, above {MAX_TEMPLATE_CHARS:,}"
        )
    try:
        compiled = compile_template(template)
    except RecursionError:
        raise TemplateLimit("the chat template nests too deeply to compile") from None
    chat = _prepared(conversation)
    for message in chat:
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
    variables = _prepared_kwargs(kwargs)
    chars = max(MAX_RENDER_CHARS, 2 * _text_chars(chat))  # a long row renders; VLM408 then says so
    previous = getattr(_state, "budget", None)
    _state.budget = budget = _Budget(MAX_RENDER_SECONDS, chars)
    alarm = None
    try:
        alarm = _arm(budget)
        pieces: list[str] = []
        total = 0
        for piece in compiled.generate(
            messages=chat,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        ):
            total += len(piece)
            if total > chars:
                _too_long(total)
            _tick()
            pieces.append(piece)
        return "".join(pieces)
    except RecursionError:
        raise TemplateLimit("the chat template recursed too deeply") from None
    finally:
        _disarm(alarm)
        _state.budget = previous


# ---- the CPU-time timer: loops over literals call nothing the hooks above see ----


def _arm(budget: _Budget) -> Any:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return None

    def expire(signum: int, frame: Any) -> None:
        left = budget.deadline - time.monotonic()
        if left <= 0:
            raise TemplateLimit(
                f"the chat template ran longer than {MAX_RENDER_SECONDS:g} s (its time bound)"
            )

    try:
        previous = signal.signal(signal.SIGVTALRM, expire)
    except (ValueError, OSError):
        return None
    # Every 0.1 s of CPU time: on a busy machine CPU time runs behind the clock.
    signal.setitimer(signal.ITIMER_VIRTUAL, _TIMER_STEP, _TIMER_STEP)
    return previous


def _disarm(previous: Any) -> None:
    if previous is None:
        return
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    signal.signal(signal.SIGVTALRM, previous)
