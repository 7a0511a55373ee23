"""Column mapping (`--columns messages=conv,images=imgs,role=speaker,...`, `columns` in config).

A dataset whose fields have other names than a known layout's is read through a ColumnMap: a
LLaMA-Factory dataset_info.json entry written on the command line. Its keys are LLaMA-Factory
0.9.5's `columns` and `tags` (src/llamafactory/data/parser.py DatasetAttr), the tags also under
short names (role, content, user, assistant, observation, function), and each row is converted by
LLaMA-Factory's own converters as vlmlint reproduces them (readers/dataset_attr.py converter):

- conversation map (messages or any tag named): SharegptDatasetConverter, the row's turns become
  role/content turns of user, assistant and system;
- alpaca map (prompt, query, response or history named): AlpacaDatasetConverter, prompt and query
  joined by a newline, history pairs, the response as the answer;
- rename map (only images, videos, audios, system or tools named): each named field takes its
  standard name and the row is read in whatever layout it then has (ms-swift's `--columns`).

Unnamed keys take the names vlmlint reads without a map: images, videos, audios and (alpaca) system,
instruction, input, output; a conversation map's unnamed messages column is the row's messages,
conversations or conversation, and its unnamed tags follow the row's first turn: role/content with
user/assistant/system/tool when that turn has a "role", else LLaMA-Factory's from/value with
human/gpt/system/observation/function_call.

Unknown names: a file whose first row holds none of the fields the map names stops the scan (a
DatasetError naming them and listing the row's fields); a later such row is VLM102 (a mixed file's
odd row); a row lacking a named messages, prompt or response field is VLM101, listing its fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from vlmlint.readers.dataset_attr import _COLUMNS, _TAGS, DatasetAttr, converter
from vlmlint.readers.files import DatasetError
from vlmlint.readers.layouts import RowError, UnmappedRow, _short

# Short names of the tags, as the example writes them (system stays the column: system_tag).
ALIASES = {
    "role": "role_tag",
    "content": "content_tag",
    "user": "user_tag",
    "assistant": "assistant_tag",
    "observation": "observation_tag",
    "function": "function_tag",
}
KEYS = (*_COLUMNS, *_TAGS)
_CONVERSATION = {"messages", *_TAGS}
_ALPACA = {"prompt", "query", "response", "history"}
_MEDIA = ("images", "videos", "audios")
# Named fields a row must hold (the others may be absent from a row: no media, no history, no input).
_REQUIRED = ("messages", "prompt", "response")
# Unnamed tags by the convention of the row's first turn.
_OPENAI_TAGS = {
    "user_tag": "user",
    "assistant_tag": "assistant",
    "system_tag": "system",
    "observation_tag": "tool",
    "function_tag": "function_call",
}
_SHAREGPT_TAGS = {
    "user_tag": "human",
    "assistant_tag": "gpt",
    "system_tag": "system",
    "observation_tag": "observation",
    "function_tag": "function_call",
}


class ColumnsError(ValueError):
    """A column map that cannot be used: an unknown key, an empty name, keys of two formats."""


def known_keys() -> str:
    """The keys a map takes, for messages: the columns, then the tags with their short names."""
    short = {tag: name for name, tag in ALIASES.items()}
    return ", ".join((*_COLUMNS, *(f"{short[t]} ({t})" if t in short else t for t in _TAGS)))


def check_columns(value: Any) -> dict[str, str]:
    """KEY=VALUE,... text or a table -> {LLaMA-Factory key: the row's field}, in the order given.

    Keys are LLaMA-Factory's (a - reads as _) or the tags' short names; ColumnsError names the
    problem (an unknown key with the known ones, a repeated key, a name that is no text, a map
    mixing conversation and alpaca keys).
    """
    if isinstance(value, str):
        pairs = []
        for item in value.split(","):
            if not item.strip():
                continue
            key, sep, name = item.partition("=")
            if not sep:
                raise ColumnsError(f"columns takes KEY=VALUE pairs separated by commas, got {_short(item)}")
            pairs.append((key, name))
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise ColumnsError(
            f'columns must be a table {{ messages = "conv" }} or KEY=VALUE,..., got {_short(value)}'
        )
    mapping: dict[str, str] = {}
    for raw_key, name in pairs:
        key = str(raw_key).strip().lower().replace("-", "_")
        key = ALIASES.get(key, key)
        if key not in KEYS:
            raise ColumnsError(f"unknown columns key {_short(str(raw_key).strip())}; known: {known_keys()}")
        if key in mapping:
            raise ColumnsError(f"columns key {key!r} is given twice")
        if not isinstance(name, str) or not name.strip() or len(name) > 1024:
            raise ColumnsError(f"columns {key} must name a field (a non-empty string), got {_short(name)}")
        mapping[key] = name.strip()
    if _CONVERSATION & set(mapping) and _ALPACA & set(mapping):
        raise ColumnsError(
            "columns mixes conversation keys (messages, role, content, user, assistant, ...) with alpaca "
            "keys (prompt, query, response, history): a row is one or the other"
        )
    return mapping


@dataclass(frozen=True)
class ColumnMap:
    """A checked column map (check_columns), callable as a reader's row conversion (RowSource.convert).

    Plain data: it travels with unparsed rows to the processes that parse them (`travels`).
    """

    pairs: tuple[tuple[str, str], ...]
    travels = True  # not a field: RowBatch units may carry it to a worker

    @classmethod
    def of(cls, value: Any) -> ColumnMap | None:
        """The map of a `columns` setting (text or table); None when it names nothing."""
        mapping = check_columns(value)
        return cls(tuple(mapping.items())) if mapping else None

    @property
    def named(self) -> dict[str, str]:
        return dict(self.pairs)

    @property
    def mode(self) -> str:
        """sharegpt (a conversation map), alpaca, or rename (media, system and tools only)."""
        keys = set(self.named)
        if keys & _CONVERSATION:
            return "sharegpt"
        return "alpaca" if keys & _ALPACA else "rename"

    def describe(self) -> str:
        return ",".join(f"{key}={name}" for key, name in self.pairs)

    def check_first_row(self, row: Mapping[str, Any], source: str) -> None:
        """DatasetError when a file's first row holds none of the named fields (a wrong map or file)."""
        if not any(name in row for name in self.named.values()):
            raise DatasetError(
                f"{source}: --columns {self.describe()} names no field of the first row; its fields: "
                f"{_fields(row)}"
            )

    def __call__(self, row: Mapping[str, Any]) -> dict[str, Any]:
        named = self.named
        if not any(name in row for name in named.values()):
            raise UnmappedRow(f"--columns {self.describe()} names none of this row's fields {_fields(row)}")
        for key in _REQUIRED:
            if key in named and named[key] not in row:
                raise RowError(
                    f'no "{named[key]}" field (--columns {key}={named[key]}); the row\'s fields: {_fields(row)}'
                )
        if self.mode == "rename":
            sources = set(named.values())
            renamed = {field: value for field, value in row.items() if field not in sources}
            renamed.update({key: row[name] for key, name in self.pairs if name in row})
            return renamed
        return _converter(self, *self._row_defaults(row))(row)

    def _row_defaults(self, row: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
        """A conversation map's unnamed messages column and role/content tags, as this row writes them."""
        if self.mode != "sharegpt":
            return None, None, None
        named = self.named
        messages = named.get("messages") or next(
            (key for key in ("messages", "conversations", "conversation") if key in row), "messages"
        )
        turns = row.get(messages)
        first = turns[0] if isinstance(turns, list) and turns and isinstance(turns[0], Mapping) else {}
        role = named.get("role_tag") or ("role" if "role" in first else "from")
        content = named.get("content_tag") or ("content" if "content" in first else "value")
        return messages, role, content


@lru_cache(maxsize=256)
def _converter(
    columns: ColumnMap, messages: str | None, role: str | None, content: str | None
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """LLaMA-Factory's converter for the map's DatasetAttr (kept: a file's rows share a few variants)."""
    named = columns.named
    values: dict[str, Any] = {key: named.get(key) for key in _COLUMNS}
    values.update({key: named.get(key, key) for key in _MEDIA})
    if columns.mode == "alpaca":
        values.update(
            prompt=named.get("prompt", "instruction"),
            query=named.get("query", "input"),
            response=named.get("response", "output"),
            system=named.get("system", "system"),  # the alpaca layout reads a row's "system"
        )
        return converter(DatasetAttr(file_name="", formatting="alpaca", **values))
    defaults = _OPENAI_TAGS if role == "role" else _SHAREGPT_TAGS
    tags = {tag: named.get(tag, defaults.get(tag)) for tag in _TAGS}
    tags.update(role_tag=role, content_tag=content)
    values["messages"] = messages
    attr = DatasetAttr(file_name="", formatting="sharegpt", **values)
    return converter(replace(attr, **tags))


def _fields(row: Mapping[str, Any]) -> str:
    names = sorted(str(key) for key in row)
    return str(names[:40] + ["..."] if len(names) > 40 else names)
