"""Row layouts: turn one decoded JSON object (or dataset row) into a Sample.

A layout is detected once per file from its first object (or forced with --layout) and every row of
the file is parsed with it, so a row that does not fit its file's layout is reported, not guessed.
The readers split the author's literal "<image>" placeholders into image parts here, so everything
downstream sees explicit image parts in their place; "<video>" and "<audio>" (LLaMA-Factory's and
ms-swift's) become media parts, and the row's videos and audio clips MediaRefs (not counted yet).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from vlmlint.readers.fingerprint import row_fingerprint
from vlmlint.records import (
    AUDIO_PLACEHOLDER,
    IMAGE_PLACEHOLDER,
    MAX_EMBEDDED_BYTES,
    VIDEO_PLACEHOLDER,
    ImageRef,
    ImageSizing,
    MediaRef,
    Message,
    Part,
    Role,
    RowProblem,
    Sample,
    beyond_bounds,
    sample_beyond_bounds,
)

LAYOUTS = (
    "llava",
    "sharegpt",
    "openai",
    "alpaca",
    "captions",
    "pretokenized",
    "prompt-completion",
    "cauldron",
    "query-response",
    "pairs",
    "data-juicer",
)

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


class UnmappedRow(RowError):
    """A row conversion's word that the row has none of the fields it reads (VLM102, not VLM101)."""


def detect_layout(row: Mapping[str, Any]) -> str | None:
    """Name the layout a row is written in, or None when no known layout fits its fields."""
    if "input_ids" in row:
        return "pretokenized"  # processor output stored in the dataset, whatever else the row holds
    # ms-swift's `conversation` (singular) counts where it holds turns: else it is likely a misspelling.
    swift_turns = isinstance(row.get("conversation"), list) and bool(row["conversation"])
    if "messages" in row or "conversations" in row or swift_turns:
        turns = next(row[key] for key in ("messages", "conversations", "conversation") if key in row)
        if _is_pairs(turns):
            return "pairs"  # ms-swift's [{"human": q, "assistant": a}]
        if isinstance(turns, list) and any(
            isinstance(t, Mapping) and isinstance(t.get("content"), list) for t in turns
        ):
            return "openai"
        if "conversations" in row and not any(k in row for k in ("messages", "images", "videos", "audios")):
            return "llava"
        return "sharegpt"
    if "prompt" in row and (isinstance(row["prompt"], list) or "completion" in row):
        return "prompt-completion"  # TRL (prompt / completion), verl (a prompt of messages)
    if isinstance(row.get("texts"), list):
        return "cauldron"  # the_cauldron, FineVision
    if "instruction" in row and "output" in row:
        return "alpaca"
    if isinstance(row.get("text"), str) and ("images" in row or DJ_IMAGE in row["text"]):
        return "data-juicer"
    if any(key in row for key in _QUERY_KEYS) and any(key in row for key in _RESPONSE_KEYS):
        return "query-response"  # ms-swift's ResponsePreprocessor: query/response/history, problem/answer
    if ("image" in row or "file_name" in row) and ("text" in row or "caption" in row):
        return "captions"
    return None


def _is_pairs(turns: Any) -> bool:
    """ms-swift's sharegpt turns: each an object of a user and an assistant text, no role key."""
    return (
        isinstance(turns, list)
        and bool(turns)
        and all(
            isinstance(t, Mapping)
            and not any(key in t for key in ("role", "content", "from", "value"))
            and any(key in t for key in _PAIR_USER)
            for t in turns
        )
    )


def _embedded_too_large(label: str, size: int, kind: str = "image") -> str:
    """Why an embedded image or clip is not decoded (nor kept): above MAX_EMBEDDED_BYTES, a VLM201."""
    limit = MAX_EMBEDDED_BYTES // 2**20
    return f"embedded {kind} {label} holds {size:,} bytes, above the {limit} MiB vlmlint reads; store it as a file"


def _decoded_size(encoded: str) -> int:
    """How many bytes base64 text decodes to (for valid text), without decoding it."""
    return len(encoded) // 4 * 3 - encoded.endswith("=") - encoded.endswith("==")


class ImageResolver:
    """Turns an image reference written in a row into an ImageRef, relative to a base folder."""

    def __init__(self, base_dir: str, image_root: str | None = None):
        self.base_dir = os.path.abspath(image_root or base_dir)
        self.real_root = os.path.realpath(self.base_dir)
        self._real_folders: dict[str, str] = {}

    def __call__(self, value: Any) -> ImageRef:
        if isinstance(value, Mapping):
            # Hugging Face Image(decode=False) cells: {"bytes": ..., "path": ...}
            data, path = value.get("bytes"), value.get("path")
            if isinstance(data, (bytes, bytearray)) and data:
                label = path if isinstance(path, str) and path else "<embedded bytes>"
                if len(data) > MAX_EMBEDDED_BYTES:  # not kept: the ref says why instead
                    return ImageRef(reference=label, problem=_embedded_too_large(label, len(data)))
                return ImageRef(reference=label, data=bytes(data))
            if isinstance(path, str) and path:
                return self(path)
            raise RowError(f"image entry has neither bytes nor a path: {_short(value)}")
        if not isinstance(value, str) or not value.strip():
            raise RowError(f"image reference must be a non-empty string, got {_short(value)}")
        if value.startswith(("http://", "https://")):
            return ImageRef(reference=value, url=value)
        if value.startswith("data:"):
            header, comma, encoded = value.partition(",")
            label = header + ",..."
            size = _decoded_size(encoded)  # known before decoding
            if comma and size > MAX_EMBEDDED_BYTES:
                return ImageRef(reference=label, problem=_embedded_too_large(label, size))
            try:
                if not comma:
                    raise ValueError("no comma before the data")
                return ImageRef(reference=label, data=base64.b64decode(encoded, validate=True))
            except (ValueError, binascii.Error) as exc:
                raise RowError(f"image data URI is not valid base64: {exc}") from None
        if value.startswith("file://"):
            value = value[len("file://") :]
        if "\0" in value:
            raise RowError(f"image path contains a NUL character: {_short(value)}")
        path = os.path.normpath(value if os.path.isabs(value) else os.path.join(self.base_dir, value))
        return ImageRef(reference=value, path=path, outside_root=not self._inside(path))

    def _inside(self, path: str) -> bool:
        """Whether the file, with every symlink followed, stays under the dataset folder."""
        if os.path.islink(path):
            real = os.path.realpath(path)
        else:  # one realpath per folder, not per file: datasets hold many images per folder
            folder, name = os.path.split(path)
            real = os.path.join(self._real_folder(folder), name)
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def _real_folder(self, folder: str) -> str:
        real = self._real_folders.get(folder)
        if real is None:
            if len(self._real_folders) > 65536:
                self._real_folders.clear()
            real = self._real_folders[folder] = os.path.realpath(folder)
        return real


_RESOLVERS: dict[tuple[str, str | None], ImageResolver] = {}


def shared_resolver(base_dir: str, image_root: str | None) -> ImageResolver:
    """One ImageResolver per folder and process, kept: it caches each image folder's realpath."""
    key = (base_dir, image_root)
    resolve = _RESOLVERS.get(key)
    if resolve is None:
        if len(_RESOLVERS) > 256:
            _RESOLVERS.clear()
        resolve = _RESOLVERS[key] = ImageResolver(base_dir, image_root)
    return resolve


# Bounded repr of any row value: a value nested 1000 levels deep or holding a million items is shown
# by its first levels and items (plain repr would recurse past Python's limit, or build megabytes).
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value[: limit + 1]) if isinstance(value, str) else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _role(raw: Any) -> Role:
    role = _ROLE_ALIASES.get(raw.lower()) if isinstance(raw, str) else None
    if role is None:
        raise RowError(f"unknown role {_short(raw)}; expected one of {sorted(_ROLE_ALIASES)}")
    return role


_PLACEHOLDERS = re.compile(
    "|".join(re.escape(p) for p in (IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER, AUDIO_PLACEHOLDER))
)


def split_placeholders(text: str) -> tuple[Part, ...]:
    """Split text on the author's "<image>" placeholder into text and image parts, in order.

    "<video>" and "<audio>" become media parts in their place (Part(media="video") / "audio").
    A text holding more placeholders than a row may is refused before it is split (RowError).
    """
    too_many = beyond_bounds(
        0,
        text.count(IMAGE_PLACEHOLDER),
        text.count(VIDEO_PLACEHOLDER) + text.count(AUDIO_PLACEHOLDER) if "<" in text else 0,
    )
    if too_many:
        raise RowError(too_many)
    if VIDEO_PLACEHOLDER in text or AUDIO_PLACEHOLDER in text:
        return _split_media(text)
    pieces = text.split(IMAGE_PLACEHOLDER)
    parts: list[Part] = []
    for i, piece in enumerate(pieces):
        if i:
            parts.append(Part(is_image=True))
        if piece:
            parts.append(Part(text=piece))
    return tuple(parts)


def _split_media(text: str) -> tuple[Part, ...]:
    parts: list[Part] = []
    position = 0
    for match in _PLACEHOLDERS.finditer(text):
        if match.start() > position:
            parts.append(Part(text=text[position : match.start()]))
        token = match.group(0)
        parts.append(Part(is_image=True) if token == IMAGE_PLACEHOLDER else Part(media=token[1:-1]))
        position = match.end()
    if position < len(text):
        parts.append(Part(text=text[position:]))
    return tuple(parts)


def _media_ref(kind: str, value: Any, resolve: ImageResolver) -> MediaRef:
    """One video or audio reference; a video may be a list of its frames' image references."""
    if isinstance(value, (list, tuple)):
        if kind != "video":
            raise RowError(f"an {kind} must be one reference, got a list: {_short(value)}")
        if not value:
            raise RowError("a video given as a list of frames has no frames")
        _bound(0, 0, frames=len(value))
        frames = tuple(_frame(position, frame, resolve) for position, frame in enumerate(value, start=1))
        return MediaRef(
            kind,
            reference=f"{frames[0].reference} ... ({len(frames)} frames)",
            frames=frames,
            outside_root=any(frame.outside_root for frame in frames),
        )
    try:
        ref = resolve(value)
    except RowError as exc:  # "image reference must be ..." -> "video reference must be ..."
        message = str(exc)
        raise RowError(kind + message[len("image") :] if message.startswith("image") else message) from None
    return MediaRef(
        kind,
        ref.reference,
        path=ref.path,
        data=ref.data,
        url=ref.url,
        outside_root=ref.outside_root,
        problem=ref.problem and ref.problem.replace("embedded image", f"embedded {kind}", 1),
    )


def _frame(position: int, value: Any, resolve: ImageResolver) -> ImageRef:
    try:
        return resolve(value)
    except RowError as exc:
        raise RowError(f"video frame {position}: {exc}") from None


def _media_list(row: Mapping[str, Any], key: str, kind: str, resolve: ImageResolver) -> tuple[MediaRef, ...]:
    """`videos` / `audios` (LLaMA-Factory, ms-swift; a video may be a frame list), LLaVA's `video`."""
    value = row.get(key)
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]  # one clip
    if not isinstance(value, list):
        raise RowError(f'"{key}" must be a string or a list of {kind}s, got {type(value).__name__}')
    _bound(0, 0, media=len(value), where=f'"{key}"')
    refs = tuple(_media_ref(kind, item, resolve) for item in value)
    _bound(0, 0, frames=sum(len(ref.frames) for ref in refs), where=f'"{key}"')
    return refs


def _row_media(row: Mapping[str, Any], resolve: ImageResolver) -> tuple[MediaRef, ...]:
    return _media_list(row, "videos", "video", resolve) + _media_list(row, "audios", "audio", resolve)


def _image_list(row: Mapping[str, Any], key: str, resolve: ImageResolver) -> tuple[ImageRef, ...]:
    value = row.get(key)
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]  # LLaVA allows a single string; HF rows may hold one struct
    if not isinstance(value, list):
        raise RowError(f'"{key}" must be a string or a list of images, got {type(value).__name__}')
    _bound(len(value), 0, where=f'"{key}"')  # before resolving: each reference costs a path and a record
    return tuple(resolve(item) for item in value)


def _bound(
    images: int, placeholders: int, media: int = 0, frames: int = 0, parts: int = 0, where: str = ""
) -> None:
    """RowError when these counts are beyond the per-row bounds (sample.MAX_*_PER_ROW)."""
    too_many = beyond_bounds(images, placeholders, media, frames, parts)
    if too_many:
        raise RowError(f"{where}: {too_many}" if where else too_many)


def _text_turns(turns: Any, role_key: str, text_key: str) -> tuple[Message, ...]:
    if not isinstance(turns, list) or not turns:
        raise RowError("the conversation must be a non-empty list of turns")
    _bound(0, 0, parts=len(turns))
    messages = []
    images = media = 0  # placeholders so far: each turn's are bounded, and so is their sum
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
        parts = split_placeholders(text)
        images += sum(part.is_image for part in parts)
        media += sum(bool(part.media) for part in parts)
        _bound(0, images, media)
        messages.append(Message(role=_role(turn[rk]), parts=parts))
    return tuple(messages)


Parsed = tuple[tuple[Message, ...], tuple[ImageRef, ...], tuple[MediaRef, ...]]


def parse_llava(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    if "conversations" not in row:
        raise RowError('missing "conversations"')
    if "image" not in row and any(key in row for key in ("images", "videos", "audios")):
        # a ShareGPT row (LLaMA-Factory's media lists) in a file whose first row was LLaVA's: read its
        # media as its own layout does, never drop them for the file's
        return parse_sharegpt(row, resolve)
    messages = _text_turns(row["conversations"], "from", "value")
    images = _image_list(row, "image", resolve)
    videos = _media_list(row, "video", "video", resolve)  # LLaVA-Video, Qwen-VL's finetune format
    if videos and not images and not _holds(messages, "video"):
        # LLaVA-Video writes <image> where its video goes: those placeholders are the video's.
        messages = tuple(
            Message(m.role, tuple(Part(media="video") if p.is_image else p for p in m.parts))
            for m in messages
        )
    return messages, images, videos


def _holds(messages: tuple[Message, ...], kind: str) -> bool:
    return any(part.media == kind for message in messages for part in message.parts)


def _turns_key(row: Mapping[str, Any]) -> str:
    """The row's conversation field: messages, conversations, or ms-swift's conversation."""
    return next((key for key in ("messages", "conversations", "conversation") if key in row), "messages")


def parse_sharegpt(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    key = _turns_key(row)
    if key not in row:
        raise RowError('missing "messages" or "conversations"')
    turns = row[key]
    if isinstance(turns, list) and any(
        isinstance(t, Mapping) and isinstance(t.get("content"), list) for t in turns
    ):
        return parse_openai(row, resolve)
    return (
        _text_turns(turns, "role", "content"),
        _image_list(row, "images", resolve),
        _row_media(row, resolve),
    )


_MEDIA_PARTS = {  # part type -> (media kind, the keys its reference may sit under, in order)
    "video": ("video", ("video", "url", "path", "video_url")),
    "video_url": ("video", ("video_url", "url", "video")),
    "audio": ("audio", ("audio", "url", "path", "audio_url")),
    "audio_url": ("audio", ("audio_url", "url", "audio")),
}


def _input_audio(part: Mapping[str, Any], position: str) -> MediaRef:
    """OpenAI's {"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"}}."""
    audio = part.get("input_audio")
    data = audio.get("data") if isinstance(audio, Mapping) else None
    if not isinstance(data, str) or not data:
        raise RowError(f'{position} "input_audio" must be an object with base64 "data"')
    audio_format = audio.get("format")
    label = f"<input_audio {audio_format}>" if isinstance(audio_format, str) else "<input_audio>"
    if _decoded_size(data) > MAX_EMBEDDED_BYTES:
        return MediaRef("audio", label, problem=_embedded_too_large(label, _decoded_size(data), "audio"))
    try:
        return MediaRef("audio", label, data=base64.b64decode(data, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise RowError(f'{position} "input_audio" data is not valid base64: {exc}') from None


def _typed_part(part: Any, position: str, resolve: ImageResolver) -> tuple[Part, ImageRef | MediaRef | None]:
    if isinstance(part, str):
        return Part(text=part), None
    if not isinstance(part, Mapping):
        raise RowError(f"{position} is a {type(part).__name__}, not a content part")
    kind = part.get("type")
    if kind in ("text", "reasoning"):
        # LLaMA-Factory v1 keys every part's content "value" (v1/utils/types.py Content); its
        # "reasoning" part is the assistant's thought, counted here as text.
        text = part.get("text", part.get("value", ""))
        if not isinstance(text, str):
            raise RowError(f'{position} "text" must be a string')
        return Part(text=text), None
    if kind in ("image", "image_url"):
        if isinstance(part.get("source"), Mapping):  # Anthropic's {"type": "image", "source": {...}}
            return Part(is_image=True), resolve(_anthropic_source(part["source"], position))
        value = part.get("image", part.get("url", part.get("path", part.get("image_url", part.get("value")))))
        if isinstance(value, Mapping) and "url" in value:
            value = value["url"]
        if value is None:
            return Part(is_image=True), None  # image given in the row's "images" list instead
        ref = resolve(value)
        sizing = _sizing(part, position)
        return Part(is_image=True), ref if sizing is None else replace(ref, sizing=sizing)
    if isinstance(kind, str) and kind in _MEDIA_PARTS:
        media, keys = _MEDIA_PARTS[kind]
        value = next((part[key] for key in (*keys, "value") if part.get(key) is not None), None)
        if isinstance(value, Mapping) and "url" in value:
            value = value["url"]
        if value is None:
            return Part(media=media), None  # given in the row's "videos" / "audios" list instead
        return Part(media=media), _media_ref(media, value, resolve)
    if kind == "input_audio":
        return Part(media="audio"), _input_audio(part, position)
    raise RowError(f"{position} has unsupported type {_short(kind)}")


def _anthropic_source(source: Mapping[str, Any], position: str) -> str:
    """An Anthropic image block's source as an image reference (ms-swift 4.6.0,
    MessagesPreprocessor._anthropic_image_source: base64 -> a data: URI, url -> the URL; a local
    "path" source is read as a path here, where ms-swift refuses it)."""
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str) or not media_type or not data:
            raise RowError(f'{position} base64 image source needs "media_type" and "data"')
        return f"data:{media_type};base64,{data}"
    key = {"url": "url", "path": "path", "file": "path"}.get(kind) if isinstance(kind, str) else None
    if key is None:
        raise RowError(
            f"{position} image source has unsupported type {_short(kind)}; known: base64, url, path"
        )
    value = source.get(key)
    if not isinstance(value, str) or not value:
        raise RowError(f'{position} {kind} image source needs a "{key}" string')
    return value


# qwen-vl-utils' per-image keys (vision_process.py fetch_image): honoured by the Qwen-VL count.
_SIZING_KEYS = ("min_pixels", "max_pixels", "resized_height", "resized_width")


def _sizing(part: Mapping[str, Any], position: str) -> ImageSizing | None:
    given = {key: part[key] for key in _SIZING_KEYS if part.get(key) is not None}
    if not given:
        return None
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 2**31:
            raise RowError(f'{position} "{key}" must be a positive number, got {_short(value)}')
    return ImageSizing(**{key: int(value) for key, value in given.items()})


def parse_openai(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    turns = row.get(_turns_key(row))
    if not isinstance(turns, list) or not turns:
        raise RowError('"messages" must be a non-empty list of turns')
    messages: list[Message] = []
    inline: list[ImageRef] = []
    inline_media: list[MediaRef] = []
    counted = len(turns)  # turns and parts so far, bounded before each turn's parts are built
    images = media = frames = 0
    _bound(0, 0, parts=counted)
    for t, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or "role" not in turn or "content" not in turn:
            raise RowError(f'turn {t} must be an object with "role" and "content"')
        content = turn["content"]
        if isinstance(content, str):
            parts: tuple[Part, ...] = (Part(text=content),) if content else ()
        elif isinstance(content, list):
            counted += len(content)
            _bound(0, 0, parts=counted)
            built = []
            for p, raw in enumerate(content):
                part, ref = _typed_part(raw, f"turn {t} part {p}", resolve)
                if part.is_image or part.media:
                    images += part.is_image
                    media += bool(part.media)
                    frames += len(ref.frames) if isinstance(ref, MediaRef) else 0
                    _bound(0, images, media, frames)
                built.append(part)
                if isinstance(ref, MediaRef):
                    inline_media.append(ref)
                elif ref is not None:
                    inline.append(ref)
            parts = tuple(built)
        else:
            raise RowError(f'turn {t} "content" must be a string or a list of parts')
        messages.append(Message(role=_role(turn["role"]), parts=parts))
    listed = _image_list(row, "images", resolve)
    if inline and listed:
        raise RowError('images are given both inline in the parts and in "images"')
    media = _row_media(row, resolve)
    for kind in ("video", "audio"):
        if any(m.kind == kind for m in inline_media) and any(m.kind == kind for m in media):
            raise RowError(f'{kind}s are given both inline in the parts and in "{kind}s"')
    # In the row's order: videos, then audio clips (each kind is matched to its parts in order).
    media = tuple(m for kind in ("video", "audio") for m in (*inline_media, *media) if m.kind == kind)
    return tuple(messages), tuple(inline) or listed, media


def parse_alpaca(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
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
    return tuple(messages), _image_list(row, "images", resolve), _row_media(row, resolve)


def parse_captions(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    image = row.get("image", row.get("file_name"))
    text = row.get("text", row.get("caption"))
    if image is None:
        raise RowError('missing "image" or "file_name"')
    if not isinstance(text, str):
        raise RowError(f'"text"/"caption" must be a string, got {type(text).__name__}')
    # A caption row is an image followed by its caption: the image takes the user turn's place.
    messages = (Message(Role.USER, (Part(is_image=True),)), Message(Role.ASSISTANT, (Part(text=text),)))
    return messages, (resolve(image),), ()


# -- trainer layouts (issue 21) ---------------------------------------------------------------------

# ms-swift 4.6.0 swift/dataset/preprocessor/core.py ResponsePreprocessor: the columns it reads as the
# query and the response, in this order of priority (RowPreprocessor renames the first one present).
_QUERY_KEYS = ("query", "prompt", "input", "instruction", "question", "problem")
_RESPONSE_KEYS = (
    "response", "answer", "output", "targets", "target", "answer_key", "answers", "solution",
    "text", "completion", "content",
)  # fmt: skip
_SYSTEM_KEYS = ("system", "system_prompt")
# MessagesPreprocessor.sharegpt_to_messages: the user and assistant keys of one pair.
_PAIR_USER = ("user", "human")
_PAIR_ASSISTANT = ("assistant", "gpt", "bot")
DJ_IMAGE = "<__dj__image>"  # data-juicer's SpecialTokens.image (data_juicer/utils/mm_utils.py)
DJ_EOC = "<|__dj__eoc|>"  # SpecialTokens.eoc: the end of a chunk
_DJ_ROLE = re.compile(r"\[\[([a-zA-Z]*?)\]\]: ")  # dj_to_llava.py's from_pattern


def _text_of(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RowError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _first_key(row: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((key for key in keys if key in row), None)


def _images_first(messages: list[Message], count: int) -> list[Message]:
    """`count` image parts before the first user turn's text, where the text holds no placeholder.

    ms-swift's Template._add_default_tags puts the missing `<image>` tags at the start of the first
    message; SmolVLM's and R1-V's training scripts put the images first in the user turn.
    """
    if not count or any(part.is_image for message in messages for part in message.parts):
        return messages
    _bound(count, count)
    position = next((i for i, m in enumerate(messages) if m.role is Role.USER), None)
    if position is None:
        return messages
    first = messages[position]
    messages[position] = Message(first.role, (Part(is_image=True),) * count + first.parts)
    return messages


def _images_of(row: Mapping[str, Any], resolve: ImageResolver) -> tuple[ImageRef, ...]:
    return _image_list(row, "images", resolve) if "images" in row else _image_list(row, "image", resolve)


def parse_prompt_completion(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    """TRL's prompt-completion rows (conversational: lists of messages; standard: strings), verl's
    `prompt` of messages. TRL renders prompt + completion as one conversation
    (trl/data_utils.py apply_chat_template), so the row is its prompt's turns and then its completion's."""
    turns: list[Any] = []
    for key, role in (("prompt", "user"), ("completion", "assistant")):
        value = row.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            turns.append({"role": role, "content": value})
        elif isinstance(value, list):
            turns.extend(value)
        else:
            raise RowError(f'"{key}" must be a string or a list of messages, got {type(value).__name__}')
    if not turns:
        raise RowError('"prompt" is empty')
    typed = any(isinstance(t, Mapping) and isinstance(t.get("content"), list) for t in turns)
    shaped = {"messages": turns, **{k: row[k] for k in ("images", "videos", "audios") if k in row}}
    if "image" in row and "images" not in row:
        shaped["images"] = row["image"]
    if typed:
        return parse_openai(shaped, resolve)
    return (
        _text_turns(turns, "role", "content"),
        _image_list(shaped, "images", resolve),
        _row_media(row, resolve),
    )


def parse_cauldron(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    """the_cauldron / FineVision: `texts` of {user, assistant} pairs; the images go before the first
    user text (as SmolVLM's and Idefics3's fine-tuning notebooks build the conversation)."""
    texts = row.get("texts")
    if not isinstance(texts, list) or not texts:
        raise RowError('"texts" must be a non-empty list of {"user", "assistant"} objects')
    _bound(0, 0, parts=2 * len(texts))
    messages: list[Message] = []
    for position, pair in enumerate(texts):
        if not isinstance(pair, Mapping) or "user" not in pair or "assistant" not in pair:
            raise RowError(f'texts item {position} must be an object with "user" and "assistant"')
        messages.append(
            Message(Role.USER, split_placeholders(_text_of(pair["user"], f"texts {position} user")))
        )
        messages.append(
            Message(
                Role.ASSISTANT, split_placeholders(_text_of(pair["assistant"], f"texts {position} assistant"))
            )
        )
    images = _images_of(row, resolve)
    return tuple(_images_first(messages, len(images))), images, _row_media(row, resolve)


def parse_query_response(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    """ms-swift's ResponsePreprocessor: system, query, response and history [[q, a], ...]; EasyR1's
    and verl's problem / answer, R1-V's image / problem / solution read the same way. Images that no
    `<image>` places go first in the first user turn (swift's _add_default_tags)."""
    query_key, response_key = _first_key(row, _QUERY_KEYS), _first_key(row, _RESPONSE_KEYS)
    if query_key is None or response_key is None:
        raise RowError(
            f"needs a query ({', '.join(_QUERY_KEYS)}) and a response ({', '.join(_RESPONSE_KEYS)})"
        )
    response = row[response_key]
    if isinstance(response, list) and response:
        response = response[0]  # ms-swift keeps the first of several responses
    history = row.get("history") or []
    if not isinstance(history, list):
        raise RowError('"history" must be a list of [query, response] pairs')
    _bound(0, 0, parts=2 * len(history) + 3)
    messages: list[Message] = []
    system_key = _first_key(row, _SYSTEM_KEYS)
    system = _text_of(row.get(system_key), f'"{system_key}"') if system_key else ""
    if system:
        messages.append(Message(Role.SYSTEM, split_placeholders(system)))
    images = media = 0
    for position, pair in enumerate([*history, [row[query_key], response]]):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise RowError(f'"history" item {position} must be a [query, response] pair')
        for role, text in zip((Role.USER, Role.ASSISTANT), pair, strict=True):
            parts = split_placeholders(_text_of(text, f"{role.value} text {position}"))
            images += sum(part.is_image for part in parts)
            media += sum(bool(part.media) for part in parts)
            _bound(0, images, media)
            messages.append(Message(role, parts))
    refs = _images_of(row, resolve)
    return tuple(_images_first(messages, len(refs))), refs, _row_media(row, resolve)


def parse_pairs(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    """ms-swift's sharegpt pairs: `conversation` (or conversations / messages) of {"human": q,
    "assistant": a} objects (MessagesPreprocessor.sharegpt_to_messages), with `system` and `images`."""
    turns = row.get(_turns_key(row))
    if not _is_pairs(turns):
        raise RowError('"conversation" must be a non-empty list of {"human", "assistant"} objects')
    _bound(0, 0, parts=2 * len(turns) + 1)
    messages: list[Message] = []
    system_key = _first_key(row, _SYSTEM_KEYS)
    system = _text_of(row.get(system_key), f'"{system_key}"') if system_key else ""
    if system:
        messages.append(Message(Role.SYSTEM, split_placeholders(system)))
    for position, pair in enumerate(turns):
        user = pair[_first_key(pair, _PAIR_USER)]
        assistant_key = _first_key(pair, _PAIR_ASSISTANT)
        if assistant_key is None:
            raise RowError(f'conversation item {position} has no "assistant" (has {sorted(pair)})')
        messages.append(Message(Role.USER, split_placeholders(_text_of(user, f"item {position} user"))))
        messages.append(
            Message(
                Role.ASSISTANT,
                split_placeholders(_text_of(pair[assistant_key], f"item {position} assistant")),
            )
        )
    refs = _images_of(row, resolve)
    return tuple(_images_first(messages, len(refs))), refs, _row_media(row, resolve)


def parse_data_juicer(row: Mapping[str, Any], resolve: ImageResolver) -> Parsed:
    """data-juicer's multimodal rows: `text` with `<__dj__image>` where each image goes and
    `<|__dj__eoc|>` ending each chunk; turns marked `[[human]]: ` / `[[gpt]]: ` as llava_to_dj.py
    writes them (split as dj_to_llava.py splits them). A text without role marks is a caption: its
    images in the user turn, its text the answer."""
    text = _text_of(row.get("text"), '"text"')
    images = _image_list(row, "images", resolve)
    pieces = _DJ_ROLE.split(text)
    if len(pieces) == 1:  # no roles: a captioned image (or interleaved document)
        count = text.count(DJ_IMAGE)
        _bound(0, count)
        caption = text.replace(DJ_IMAGE, "").replace(DJ_EOC, "").strip()
        messages = (
            Message(Role.USER, (Part(is_image=True),) * count),
            Message(Role.ASSISTANT, split_placeholders(caption)),
        )
        return messages, images, _row_media(row, resolve)
    if pieces[0].strip():
        raise RowError(f"text before the first [[role]]: mark: {_short(pieces[0])}")
    _bound(0, 0, parts=len(pieces) // 2)
    messages_list = []
    for role, sentence in zip(pieces[1::2], pieces[2::2], strict=True):
        sentence = sentence.strip().replace(DJ_EOC, "").strip().replace(DJ_IMAGE, IMAGE_PLACEHOLDER)
        messages_list.append(Message(_role(role), split_placeholders(sentence)))
    return tuple(messages_list), images, _row_media(row, resolve)


# Pre-tokenized rows: the per-token fields, each as long as input_ids (VLM503).
TOKEN_FIELDS = ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "token_type_ids")


def array_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a nested list (or numpy array); None when it is ragged."""
    if not isinstance(value, (list, tuple)) and hasattr(value, "shape"):
        return tuple(int(n) for n in value.shape)
    shape: list[int] = []
    level = [value]
    while level and all(isinstance(item, (list, tuple)) for item in level):
        size = len(level[0])
        if any(len(item) != size for item in level):
            return None
        shape.append(size)
        level = [inner for item in level for inner in item]
    if any(isinstance(item, (list, tuple)) for item in level):
        return None  # lists and scalars mixed at one depth
    return tuple(shape)


def _as_list(value: Any) -> Any:
    return value.tolist() if not isinstance(value, (list, tuple)) and hasattr(value, "tolist") else value


def _token_list(value: Any, key: str) -> list[int]:
    value = _as_list(value)
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], (list, tuple)):
        value = value[0]  # stored with its batch dimension of 1
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise RowError(f'"{key}" must be a list of integers, got {_short(value)}')
    return [int(v) for v in value]


def parse_pretokenized(row: Mapping[str, Any]) -> dict[str, Any]:
    """The processor output a row stores, checked for type; pixel_values is kept as its shape only.

    Keys: the per-token fields present (TOKEN_FIELDS, batch dimension of 1 removed),
    position_ids and position_ids_shape, image_grid_thw ([t, h, w] per image) and
    pixel_values_shape (from pixel_values, or a stored "pixel_values_shape").
    """
    found: dict[str, Any] = {
        key: _token_list(row[key], key) for key in TOKEN_FIELDS if row.get(key) is not None
    }
    if "input_ids" not in found:
        raise RowError('missing "input_ids"')
    if not found["input_ids"]:
        raise RowError('"input_ids" is empty')
    if row.get("position_ids") is not None:
        positions = _as_list(row["position_ids"])
        shape = array_shape(positions)
        if shape is None or not shape:
            raise RowError(f'"position_ids" is not a rectangular array of integers: {_short(positions)}')
        found["position_ids"], found["position_ids_shape"] = positions, shape
    if row.get("image_grid_thw") is not None:
        grids = _as_list(row["image_grid_thw"])
        if isinstance(grids, (list, tuple)) and len(grids) == 3 and all(isinstance(v, int) for v in grids):
            grids = [grids]  # one image's [t, h, w]
        if not isinstance(grids, (list, tuple)) or not all(
            isinstance(g, (list, tuple)) and len(g) == 3 and all(isinstance(v, int) and v > 0 for v in g)
            for g in grids
        ):
            raise RowError(f'"image_grid_thw" must be a list of [t, h, w] per image, got {_short(grids)}')
        found["image_grid_thw"] = [tuple(int(v) for v in g) for g in grids]
    if row.get("pixel_values") is not None:
        shape = array_shape(_as_list(row["pixel_values"]))
        if shape is None:
            raise RowError('"pixel_values" is ragged: its rows differ in length')
        found["pixel_values_shape"] = shape
    elif row.get("pixel_values_shape") is not None:
        shape = _as_list(row["pixel_values_shape"])
        if not isinstance(shape, (list, tuple)) or not all(isinstance(v, int) and v >= 0 for v in shape):
            raise RowError(f'"pixel_values_shape" must be a list of sizes, got {_short(shape)}')
        found["pixel_values_shape"] = tuple(shape)
    return found


PARSERS: dict[str, Callable[[Mapping[str, Any], ImageResolver], Parsed]] = {
    "llava": parse_llava,
    "sharegpt": parse_sharegpt,
    "openai": parse_openai,
    "alpaca": parse_alpaca,
    "captions": parse_captions,
    "prompt-completion": parse_prompt_completion,
    "cauldron": parse_cauldron,
    "query-response": parse_query_response,
    "pairs": parse_pairs,
    "data-juicer": parse_data_juicer,
}


# What each layout is recognised by, for the message of a row that fits none (VLM102).
LAYOUT_FIELDS = {
    "llava": '"conversations" (+ "image")',
    "sharegpt": '"messages" or "conversations" (+ "images")',
    "openai": '"messages" with typed content parts',
    "alpaca": '"instruction" and "output" (+ "input", "images")',
    "captions": '"image" or "file_name", and "text" or "caption"',
    "pretokenized": '"input_ids" (+ "attention_mask", "labels", "position_ids", "image_grid_thw"...)',
    "prompt-completion": '"prompt" (+ "completion", "images"; TRL, verl)',
    "cauldron": '"texts" of {"user", "assistant"} (+ "images"; the_cauldron, FineVision)',
    "query-response": '"query"/"problem"/"question" and "response"/"answer"/"solution" (+ "history"; ms-swift)',
    "pairs": '"conversation" of {"human", "assistant"} (ms-swift)',
    "data-juicer": '"text" with <__dj__image> (+ "images")',
}
# The fields a layout reads; a row holding none of them is not of that layout (mixed files).
_KEY_FIELDS: dict[str, set[str]] = {
    "alpaca": {"instruction", "input", "output", "system"},
    "captions": {"image", "file_name", "text", "caption"},
}
_JSON_TYPES = {"list": "array", "str": "string", "int": "number", "float": "number", "bool": "boolean"}


def _unknown_layout(fields: tuple[str, ...], detail: str = "") -> RowProblem:
    known = "; ".join(f"{name}: {needs}" for name, needs in LAYOUT_FIELDS.items())
    return RowProblem(
        "VLM102", f"no known layout fits this row's fields {sorted(fields)}{detail}; layouts: {known}"
    )


# An id longer than this is cut (with a marker): ids are kept per row for duplicates and reports, and
# a tiny parquet file can repeat a megabyte id a million times.
MAX_ID_CHARS = 1024


def _id_text(raw_id: Any) -> str:
    """A non-string id as text (ids are compared as text): str(), bounded for containers."""
    if isinstance(raw_id, (list, tuple, Mapping)):
        return _short(raw_id, 200)  # str() would recurse through any depth and write any length
    text = raw_id if isinstance(raw_id, str) else str(raw_id)
    if len(text) > MAX_ID_CHARS:
        return f"{text[:MAX_ID_CHARS]}...[{len(text):,} characters]"
    return text


def _list_notes(row: Mapping[str, Any], layout: str) -> tuple[RowProblem, ...]:
    """VLM106: "images" given as one string or object where the layout expects a list."""
    value = row.get("images")
    if layout not in ("sharegpt", "openai", "alpaca") or not isinstance(value, (str, Mapping)):
        return ()
    kind = "a string" if isinstance(value, str) else "an object"
    return (RowProblem("VLM106", f'"images" is {kind}, not a list: {_short(value)} (read as one image)'),)


def row_to_sample(
    row: Any,
    *,
    layout: str | None,
    resolve: ImageResolver,
    source: str,
    index: int,
    line: int | None = None,
    from_first_row: bool = False,
    convert: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> Sample:
    """Parse one decoded row; anything wrong with it becomes a RowProblem on the sample.

    `convert` maps an object row to the row to parse first (a LLaMA-Factory dataset_info.json's
    columns and tags, readers/llamafactory.py; a --columns map, readers/columns.py); a RowError it
    raises is VLM101, an UnmappedRow VLM102. Ids, fields and the
    fingerprint stay those of the row as written.

    `layout` is forced, or (`from_first_row`) the one detected from the file's first object. A row
    whose fields fit no layout at all is VLM102, unless the layout was forced: then, like a row that
    fits another layout than its file's, it is VLM101 naming the field its layout lacks.
    """
    fingerprint = row_fingerprint(row)
    if not isinstance(row, Mapping):
        kind = _JSON_TYPES.get(type(row).__name__, "null" if row is None else type(row).__name__)
        return Sample(
            source=source,
            index=index,
            line=line,
            problems=(RowProblem("VLM101", f"row is a JSON {kind}, not an object"),),
            fingerprint=fingerprint,
        )
    fields = tuple(str(k) for k in row)
    raw_id = row.get("id", row.get("uid"))
    row_id = None if raw_id is None else _id_text(raw_id)
    base = dict(source=source, index=index, line=line, id=row_id, fields=fields, fingerprint=fingerprint)
    if convert is not None:
        try:
            row = convert(row)
        except UnmappedRow as exc:  # a column map naming none of the row's fields (readers/columns.py)
            return Sample(**base, problems=(RowProblem("VLM102", str(exc)),))
        except RowError as exc:
            return Sample(**base, layout=layout or "unknown", problems=(RowProblem("VLM101", str(exc)),))
    chosen = layout or detect_layout(row)
    if chosen is None:
        return Sample(**base, problems=(_unknown_layout(fields),))
    if from_first_row and not set(row) & _KEY_FIELDS.get(chosen, set(row)) and detect_layout(row) is None:
        # A row of a mixed file that shares no field with its file's layout: not read as that layout
        # (alpaca's fields are all optional, so it would parse as an empty conversation).
        return Sample(**base, problems=(_unknown_layout(fields, f" (this file's rows are {chosen})"),))
    if chosen == "pretokenized":
        try:
            return Sample(**base, layout=chosen, pretokenized=parse_pretokenized(row))
        except RowError as exc:
            if from_first_row and detect_layout(row) is None:
                problem = _unknown_layout(fields, f" (this file's rows are {chosen}: {exc})")
                return Sample(**base, problems=(problem,))
            return Sample(**base, layout=chosen, problems=(RowProblem("VLM101", f"{chosen} row: {exc}"),))
    try:
        messages, images, media = PARSERS[chosen](row, resolve)
    except RowError as exc:
        if from_first_row and detect_layout(row) is None:
            problem = _unknown_layout(fields, f" (this file's rows are {chosen}: {exc})")
            return Sample(**base, problems=(problem,))
        return Sample(**base, layout=chosen, problems=(RowProblem("VLM101", f"{chosen} row: {exc}"),))
    sample = Sample(
        **base, layout=chosen, messages=messages, images=images, media=media, notes=_list_notes(row, chosen)
    )
    too_many = sample_beyond_bounds(sample)  # the row's totals (each list and text was bounded alone)
    if too_many:
        return Sample(**base, layout=chosen, problems=(RowProblem("VLM101", f"{chosen} row: {too_many}"),))
    return sample
