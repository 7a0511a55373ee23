"""Render a chat template once per conversation *shape*, not once per row.

A jinja render costs most of a row's time (about 0.6 ms). Most templates treat the text of a turn as
opaque: they write it out verbatim, once, and branch only on roles and part types. For such a template
the output for a row is the output for its shape (roles and the kinds of their parts) with each text
put where that shape's sentinel was. vlmlint uses that shortcut only where it is proven safe:

- per template, at start: a probe suite renders real conversations with texts a template may inspect
  (padding that `trim` would strip, empty text, `</think>`, `<tool_response>` wrappers, newlines,
  jinja-looking text, the image placeholder) and compares the full render with the substituted one;
  any difference turns the cache off for this template (Gemma 3 and Llama 3.2 trim texts, for example);
- per shape, the first time: two different sentinel sets must give the same literal text around them,
  and each sentinel must appear exactly once; otherwise that shape always takes the full render;
- per shape, the first real row is rendered both ways and must agree.

Everything else (templates that look into the text) falls back to the full render, so the result is
always the string `processor.apply_chat_template` would produce.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from vlmlint.records import Message, Part, Role
from vlmlint.templates import TemplateLimit, render

Shape = tuple[tuple[str, tuple[str, ...]], ...]
Renderer = Callable[[Sequence[Message]], str]
_MAX_SHAPES = 4096  # conversations with more distinct shapes than this render in full beyond it

# Texts a template might test, strip or transform: if any changes the output other than by substitution,
# the template is not text-opaque.
_PROBE_TEXTS = (
    "  padded text with spaces  ",
    "",
    "\n\nleading and trailing newlines\n\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_response>\n{}\n</tool_response>",
    "{{ not jinja }} {% raw %}",
    "<image>",
    "plain",
)
_PROBE_SHAPES: tuple[tuple[tuple[Role, tuple[bool, ...]], ...], ...] = (
    ((Role.USER, (True, False)), (Role.ASSISTANT, (False,))),
    ((Role.USER, (False, True, False)), (Role.ASSISTANT, (False,)), (Role.USER, (False,))),
    ((Role.SYSTEM, (False,)), (Role.USER, (True, False)), (Role.ASSISTANT, (False,))),
    (
        (Role.USER, (False,)),
        (Role.ASSISTANT, (False,)),
        (Role.USER, (True, False)),
        (Role.ASSISTANT, (False,)),
    ),
)


def _kind(part: Part) -> str:
    """ "image", "video", "audio" or "" (text): what a template branches on."""
    return "image" if part.is_image else part.media


def shape_of(messages: Sequence[Message]) -> Shape:
    return tuple((message.role.value, tuple(_kind(part) for part in message.parts)) for message in messages)


def _texts(messages: Sequence[Message]) -> list[str]:
    return [part.text for message in messages for part in message.parts if not _kind(part)]


def _with_texts(messages: Sequence[Message], texts: Sequence[str]) -> tuple[Message, ...]:
    supply = iter(texts)
    return tuple(
        Message(
            message.role,
            tuple(part if _kind(part) else Part(text=next(supply)) for part in message.parts),
        )
        for message in messages
    )


class _Layout:
    """A shape's render with holes: literal pieces and, between them, which text goes there."""

    __slots__ = ("literals", "order")

    def __init__(self, literals: list[str], order: list[int]) -> None:
        self.literals = literals
        self.order = order

    def fill(self, texts: Sequence[str]) -> str:
        pieces = [self.literals[0]]
        for index, literal in zip(self.order, self.literals[1:], strict=True):
            pieces.append(texts[index])
            pieces.append(literal)
        return "".join(pieces)


def _layout(rendered: str, sentinels: Sequence[str]) -> _Layout | None:
    """Split a sentinel render into literals and text slots; None unless each sentinel occurs once."""
    if any(rendered.count(sentinel) != 1 for sentinel in sentinels):
        return None
    index_of = {sentinel: i for i, sentinel in enumerate(sentinels)}
    parts = re.split("(" + "|".join(map(re.escape, sentinels)) + ")", rendered)
    return _Layout(parts[0::2], [index_of[s] for s in parts[1::2]])


class ShapeCache:
    """Renders through `render_full`, reusing one render per shape when the template allows it."""

    def __init__(self, render_full: Renderer) -> None:
        self._render_full = render_full
        self._layouts: dict[Shape, _Layout | None] = {}
        self._checked: set[Shape] = set()
        self.enabled = self._template_is_text_opaque()
        self.hits = 0

    def render(self, messages: Sequence[Message]) -> str:
        if not self.enabled:
            return self._render_full(messages)
        shape = shape_of(messages)
        layout = self._layouts.get(shape, False)
        if layout is False:
            layout = self._learn(messages) if len(self._layouts) < _MAX_SHAPES else None
            if len(self._layouts) < _MAX_SHAPES:
                self._layouts[shape] = layout
        if layout is None:
            return self._render_full(messages)
        if shape not in self._checked:  # the first real row of a shape is rendered both ways
            self._checked.add(shape)
            full = self._render_full(messages)
            if layout.fill(_texts(messages)) != full:
                self._layouts[shape] = None
            return full
        self.hits += 1
        return layout.fill(_texts(messages))

    def _learn(self, messages: Sequence[Message]) -> _Layout | None:
        """The shape's layout, if two different sentinel sets agree on everything around the texts."""
        count = len(_texts(messages))
        first = [f"\x00vlmlint-a{i}\x00" for i in range(count)]
        second = [f"\x01VLMLINT B {i} text\x01" for i in range(count)]
        try:
            layout = _layout(self._render_full(_with_texts(messages, first)), first)
            other = _layout(self._render_full(_with_texts(messages, second)), second)
        except Exception:  # the template rejects this shape: let the full render say why, row by row
            return None
        if (
            layout is None
            or other is None
            or (layout.literals, layout.order) != (other.literals, other.order)
        ):
            return None
        return layout

    def _template_is_text_opaque(self) -> bool:
        for shape in _PROBE_SHAPES:
            skeleton = tuple(
                Message(role, tuple(Part(is_image=True) if image else Part(text="x") for image in kinds))
                for role, kinds in shape
            )
            try:
                self._render_full(skeleton)
            except TemplateLimit:
                return False  # a template that runs away is never probed further: each row renders in full
            except Exception:
                continue  # the template refuses this shape (e.g. no system role): try the others
            layout = self._learn(skeleton)
            if layout is None:
                return False
            slots = len(_texts(skeleton))
            for start in range(len(_PROBE_TEXTS)):
                texts = [_PROBE_TEXTS[(start + i) % len(_PROBE_TEXTS)] for i in range(slots)]
                try:
                    full = self._render_full(_with_texts(skeleton, texts))
                except Exception:
                    return False  # a text alone changes whether the template accepts the row
                if layout.fill(texts) != full:
                    return False
        return True


def conversation_for_template(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages as processor.apply_chat_template receives them: typed parts, images and videos in place.

    Callers leave out the media parts vlmlint does not count (without_media): those rows' lengths
    are lower bounds (VLM109).
    """
    return [
        {
            "role": message.role.value,
            "content": [
                {"type": _kind(part)} if _kind(part) else {"type": "text", "text": part.text}
                for part in message.parts
            ],
        }
        for message in messages
    ]


def without_media(messages: Iterable[Message], keep: frozenset[str] = frozenset()) -> tuple[Message, ...]:
    """The messages without their video and audio parts, but the kinds in `keep` (the same tuple when
    there is nothing to leave out)."""
    messages = tuple(messages)
    if not any(part.media and part.media not in keep for message in messages for part in message.parts):
        return messages
    return tuple(
        Message(m.role, _merged(p for p in m.parts if not p.media or p.media in keep)) for m in messages
    )


def _merged(parts: Iterable[Part]) -> tuple[Part, ...]:
    """Adjacent text parts joined, as the text was before a media placeholder split it."""
    out: list[Part] = []
    for part in parts:
        if out and not _kind(part) and not _kind(out[-1]):
            out[-1] = Part(text=out[-1].text + part.text)
        else:
            out.append(part)
    return tuple(out)


def render_conversation(
    template: str, messages: Iterable[Message], generation_prompt: bool, special_tokens: Mapping[str, Any]
) -> str:
    """One full jinja render of a conversation, exactly as processor.apply_chat_template does it."""
    return render(template, conversation_for_template(messages), generation_prompt, **special_tokens)
