"""Row layouts: turn one decoded JSON object (or dataset row) into a Sample.

A layout is detected once per file from its first object (or forced with --layout) and every row of
the file is parsed with it, so a row that does not fit its file's layout is reported, not guessed.
The readers split the author's literal "<image>" placeholders into image parts here, so everything
downstream sees explicit image parts in their place.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Mapping
from typing import Any

from vlmlint.sample import IMAGE_PLACEHOLDER, ImageRef, Message, Part, Role, RowProblem, Sample

LAYOUTS = ("llava", "sharegpt", "openai", "alpaca", "captions")

_ROLE_ALIASES = {
    "human": Role.USER,
    "user": Role.USER,
    "gpt": Role.ASSISTANT,
    "assistant": Role.ASSISTANT,
    "bot": Role.ASSISTANT,
    "model": Role.ASSISTANT,
    "system": Role.SYSTEM,
}


class RowError(ValueError):
    """The row does not fit its layout; the message says which field and why."""


def detect_layout(row: Mapping[str, Any]) -> str | None:
    """Name the layout a row is written in, or None when no known layout fits its fields."""
    if "messages" in row or "conversations" in row:
        turns = row.get("messages", row.get("conversations"))
        if isinstance(turns, list) and any(
            isinstance(t, Mapping) and isinstance(t.get("content"), list) for t in turns
        ):
            return "openai"
        if "conversations" in row and "messages" not in row and "images" not in row:
            return "llava"
        return "sharegpt"
    if "instruction" in row and "output" in row:
        return "alpaca"
    if ("image" in row or "file_name" in row) and ("text" in row or "caption" in row):
        return "captions"
    return None


class ImageResolver:
    """Turns an image reference written in a row into an ImageRef, relative to a base folder."""

    def __init__(self, base_dir: str, image_root: str | None = None):
        self.base_dir = os.path.abspath(image_root or base_dir)

    def __call__(self, value: Any) -> ImageRef:
        if isinstance(value, Mapping):
            # Hugging Face Image(decode=False) cells: {"bytes": ..., "path": ...}
            data, path = value.get("bytes"), value.get("path")
            if isinstance(data, (bytes, bytearray)) and data:
                return ImageRef(reference=str(path or "<embedded bytes>"), data=bytes(data))
            if isinstance(path, str) and path:
                return self(path)
            raise RowError(f"image entry has neither bytes nor a path: {_short(value)}")
        if not isinstance(value, str) or not value.strip():
            raise RowError(f"image reference must be a non-empty string, got {_short(value)}")
        if value.startswith(("http://", "https://")):
            return ImageRef(reference=value, url=value)
        if value.startswith("data:"):
            try:
                header, encoded = value.split(",", 1)
                return ImageRef(reference=header + ",...", data=base64.b64decode(encoded, validate=True))
            except (ValueError, binascii.Error) as exc:
                raise RowError(f"image data URI is not valid base64: {exc}") from None
        if value.startswith("file://"):
            value = value[len("file://") :]
        path = value if os.path.isabs(value) else os.path.join(self.base_dir, value)
        return ImageRef(reference=value, path=os.path.normpath(path))


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _role(raw: Any) -> Role:
    role = _ROLE_ALIASES.get(raw.lower()) if isinstance(raw, str) else None
    if role is None:
        raise RowError(f"unknown role {_short(raw)}; expected one of {sorted(_ROLE_ALIASES)}")
    return role


def split_placeholders(text: str) -> tuple[Part, ...]:
    """Split text on the author's "<image>" placeholder into text and image parts, in order."""
    pieces = text.split(IMAGE_PLACEHOLDER)
    parts: list[Part] = []
    for i, piece in enumerate(pieces):
        if i:
            parts.append(Part(is_image=True))
        if piece:
            parts.append(Part(text=piece))
    return tuple(parts)


def _image_list(row: Mapping[str, Any], key: str, resolve: ImageResolver) -> tuple[ImageRef, ...]:
    value = row.get(key)
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]  # LLaVA allows a single string; HF rows may hold one struct
    if not isinstance(value, list):
        raise RowError(f'"{key}" must be a string or a list of images, got {type(value).__name__}')
    return tuple(resolve(item) for item in value)


def _text_turns(turns: Any, role_key: str, text_key: str) -> tuple[Message, ...]:
    if not isinstance(turns, list) or not turns:
        raise RowError("the conversation must be a non-empty list of turns")
    messages = []
    for position, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise RowError(f"turn {position} is a {type(turn).__name__}, not an object")
        rk = role_key if role_key in turn else ("role" if "role" in turn else "from")
        tk = text_key if text_key in turn else ("content" if "content" in turn else "value")
        if rk not in turn or tk not in turn:
            raise RowError(f'turn {position} lacks "{role_key}" or "{text_key}" (has {sorted(turn)})')
        text = turn[tk]
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise RowError(f'turn {position} "{tk}" must be a string, got {type(text).__name__}')
        messages.append(Message(role=_role(turn[rk]), parts=split_placeholders(text)))
    return tuple(messages)


def parse_llava(
    row: Mapping[str, Any], resolve: ImageResolver
) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    if "conversations" not in row:
        raise RowError('missing "conversations"')
    return _text_turns(row["conversations"], "from", "value"), _image_list(row, "image", resolve)


def parse_sharegpt(
    row: Mapping[str, Any], resolve: ImageResolver
) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    key = "messages" if "messages" in row else "conversations"
    if key not in row:
        raise RowError('missing "messages" or "conversations"')
    turns = row[key]
    if isinstance(turns, list) and any(
        isinstance(t, Mapping) and isinstance(t.get("content"), list) for t in turns
    ):
        return parse_openai(row, resolve)
    return _text_turns(turns, "role", "content"), _image_list(row, "images", resolve)


def _typed_part(part: Any, position: str, resolve: ImageResolver) -> tuple[Part, ImageRef | None]:
    if isinstance(part, str):
        return Part(text=part), None
    if not isinstance(part, Mapping):
        raise RowError(f"{position} is a {type(part).__name__}, not a content part")
    kind = part.get("type")
    if kind == "text":
        text = part.get("text", "")
        if not isinstance(text, str):
            raise RowError(f'{position} "text" must be a string')
        return Part(text=text), None
    if kind in ("image", "image_url"):
        value = part.get("image", part.get("url", part.get("path", part.get("image_url"))))
        if isinstance(value, Mapping) and "url" in value:
            value = value["url"]
        if value is None:
            return Part(is_image=True), None  # image given in the row's "images" list instead
        return Part(is_image=True), resolve(value)
    raise RowError(f"{position} has unsupported type {_short(kind)}")


def parse_openai(
    row: Mapping[str, Any], resolve: ImageResolver
) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    turns = row.get("messages", row.get("conversations"))
    if not isinstance(turns, list) or not turns:
        raise RowError('"messages" must be a non-empty list of turns')
    messages: list[Message] = []
    inline: list[ImageRef] = []
    for t, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or "role" not in turn or "content" not in turn:
            raise RowError(f'turn {t} must be an object with "role" and "content"')
        content = turn["content"]
        if isinstance(content, str):
            parts: tuple[Part, ...] = (Part(text=content),) if content else ()
        elif isinstance(content, list):
            built = []
            for p, raw in enumerate(content):
                part, ref = _typed_part(raw, f"turn {t} part {p}", resolve)
                built.append(part)
                if ref is not None:
                    inline.append(ref)
            parts = tuple(built)
        else:
            raise RowError(f'turn {t} "content" must be a string or a list of parts')
        messages.append(Message(role=_role(turn["role"]), parts=parts))
    listed = _image_list(row, "images", resolve)
    if inline and listed:
        raise RowError('images are given both inline in the parts and in "images"')
    return tuple(messages), tuple(inline) or listed


def parse_alpaca(
    row: Mapping[str, Any], resolve: ImageResolver
) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    fields = {k: row.get(k, "") for k in ("instruction", "input", "output", "system")}
    for key, value in fields.items():
        if value is None:
            fields[key] = ""
        elif not isinstance(value, str):
            raise RowError(f'"{key}" must be a string, got {type(value).__name__}')
    # LLaMA-Factory's alpaca converter joins instruction and input with a newline.
    prompt = "\n".join(x for x in (fields["instruction"], fields["input"]) if x)
    messages = []
    if fields["system"]:
        messages.append(Message(Role.SYSTEM, split_placeholders(fields["system"])))
    messages.append(Message(Role.USER, split_placeholders(prompt)))
    messages.append(Message(Role.ASSISTANT, split_placeholders(fields["output"])))
    return tuple(messages), _image_list(row, "images", resolve)


def parse_captions(
    row: Mapping[str, Any], resolve: ImageResolver
) -> tuple[tuple[Message, ...], tuple[ImageRef, ...]]:
    image = row.get("image", row.get("file_name"))
    text = row.get("text", row.get("caption"))
    if image is None:
        raise RowError('missing "image" or "file_name"')
    if not isinstance(text, str):
        raise RowError(f'"text"/"caption" must be a string, got {type(text).__name__}')
    # A caption row is an image followed by its caption: the image takes the user turn's place.
    messages = (Message(Role.USER, (Part(is_image=True),)), Message(Role.ASSISTANT, (Part(text=text),)))
    return messages, (resolve(image),)


PARSERS: dict[
    str, Callable[[Mapping[str, Any], ImageResolver], tuple[tuple[Message, ...], tuple[ImageRef, ...]]]
] = {
    "llava": parse_llava,
    "sharegpt": parse_sharegpt,
    "openai": parse_openai,
    "alpaca": parse_alpaca,
    "captions": parse_captions,
}


def row_to_sample(
    row: Any,
    *,
    layout: str | None,
    resolve: ImageResolver,
    source: str,
    index: int,
    line: int | None = None,
) -> Sample:
    """Parse one decoded row; anything wrong with it becomes a RowProblem on the sample."""
    if not isinstance(row, Mapping):
        return Sample(
            source=source,
            index=index,
            line=line,
            problems=(RowProblem("VLM101", f"row is a JSON {type(row).__name__}, not an object"),),
        )
    fields = tuple(str(k) for k in row)
    raw_id = row.get("id", row.get("uid"))
    row_id = None if raw_id is None else str(raw_id)
    base = dict(source=source, index=index, line=line, id=row_id, fields=fields)
    chosen = layout or detect_layout(row)
    if chosen is None:
        return Sample(
            **base,
            problems=(RowProblem("VLM101", f"no known layout fits this row's fields: {sorted(fields)}"),),
        )
    try:
        messages, images = PARSERS[chosen](row, resolve)
    except RowError as exc:
        return Sample(**base, layout=chosen, problems=(RowProblem("VLM101", f"{chosen} row: {exc}"),))
    return Sample(**base, layout=chosen, messages=messages, images=images)
