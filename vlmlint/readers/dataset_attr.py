"""LLaMA-Factory's dataset attributes and row converters: a dataset_info.json entry's `columns` and
`tags`, and the conversion of one row by them, shared by `--dataset` (readers/llamafactory.py) and
`--columns` (readers/columns.py).

Reproduces LLaMA-Factory 0.9.5 (src/llamafactory/data/parser.py, DatasetAttr; data/converter.py, the
alpaca, sharegpt and openai converters): `formatting` alpaca (default), sharegpt or openai, with
`columns` and `tags` as DatasetAttr maps them (sharegpt defaults: conversations, from/value,
human/gpt/observation/function_call/system). Each row becomes a conversation the layouts module
parses (sharegpt with role/content): the roles the tags name become user/assistant/system. A
converter that would skip the row (turns out of order, an odd count) keeps its turns in order here,
and the llamafactory pipeline predicts the drop (VLM603); a role tag none of the tags name, and a
turn without the content tag (LLaMA-Factory's KeyError), are VLM101.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vlmlint.readers.files import DatasetError
from vlmlint.readers.layouts import RowError

DATA_CONFIG = "dataset_info.json"
_COLUMNS = (
    "prompt",
    "query",
    "response",
    "history",
    "messages",
    "system",
    "tools",
    "images",
    "videos",
    "audios",
)
_TAGS = (
    "role_tag",
    "content_tag",
    "user_tag",
    "assistant_tag",
    "observation_tag",
    "function_tag",
    "system_tag",
)
_REMOTE_KEYS = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")


@dataclass(frozen=True)
class DatasetAttr:
    """One dataset_info.json entry, with LLaMA-Factory 0.9.5's defaults (data/parser.py DatasetAttr)."""

    file_name: str
    formatting: str = "alpaca"
    system: str | None = None
    tools: str | None = None
    images: str | None = None
    videos: str | None = None
    audios: str | None = None
    prompt: str | None = "instruction"
    query: str | None = "input"
    response: str | None = "output"
    history: str | None = None
    messages: str | None = "conversations"
    role_tag: str | None = "from"
    content_tag: str | None = "value"
    user_tag: str | None = "human"
    assistant_tag: str | None = "gpt"
    observation_tag: str | None = "observation"
    function_tag: str | None = "function_call"
    system_tag: str | None = "system"

    @classmethod
    def from_entry(cls, name: str, entry: Any) -> DatasetAttr:
        """DatasetAttr.join: `columns` and `tags` override the defaults; a key given as null is None."""
        if not isinstance(entry, Mapping):
            raise DatasetError(f"{DATA_CONFIG}: entry {name!r} must be an object")
        remote = [key for key in _REMOTE_KEYS if key in entry]
        if remote:
            raise DatasetError(
                f"{DATA_CONFIG}: {name!r} is loaded from {remote[0]} ({entry[remote[0]]}); vlmlint reads "
                "local files only: scan the hub dataset id or the downloaded files instead"
            )
        if not isinstance(entry.get("file_name"), str):
            raise DatasetError(f"{DATA_CONFIG}: {name!r} has no file_name")
        if entry.get("ranking") or "kto_tag" in (entry.get("columns") or {}):
            raise DatasetError(
                f"{DATA_CONFIG}: {name!r} is a ranking (DPO/RM) or KTO dataset; --pipeline llamafactory "
                "predicts supervised fine-tuning (stage sft)"
            )
        values: dict[str, Any] = {"file_name": entry["file_name"]}
        formatting = entry.get("formatting", "alpaca")
        if formatting not in ("alpaca", "sharegpt", "openai"):
            raise DatasetError(
                f"{DATA_CONFIG}: {name!r} has formatting {formatting!r}; known: alpaca, sharegpt, openai"
            )
        values["formatting"] = formatting
        for group, names in (("columns", _COLUMNS), ("tags", _TAGS)):
            if group not in entry:
                continue
            mapping = entry[group]
            if not isinstance(mapping, Mapping):
                raise DatasetError(f"{DATA_CONFIG}: {name!r} {group} must be an object")
            # set_attr(key, obj) has default None: a group given replaces every default of the group,
            # so {"tags": {"role_tag": "role", ...}} without system_tag leaves no system tag at all.
            values.update({key: mapping.get(key) for key in names})
        return cls(**values)


def _column(row: Mapping[str, Any], name: str | None) -> Any:
    """example[column]: a column absent from a row reads as None, as in a datasets table."""
    return row.get(name) if name else None


def _turns(row: Mapping[str, Any], attr: DatasetAttr) -> list[dict[str, Any]]:
    """SharegptDatasetConverter/OpenAIDatasetConverter: tags -> user/assistant/system turns, in order."""
    messages = _column(row, attr.messages)
    if not isinstance(messages, list):
        raise RowError(f'"{attr.messages}" must be a list of turns (column "messages" of {DATA_CONFIG})')
    roles = {attr.user_tag: "user", attr.assistant_tag: "assistant", attr.system_tag: "system"}
    tools = {attr.observation_tag, attr.function_tag} - {None}
    turns = []
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise RowError(f"turn {position} is a {type(message).__name__}, not an object")
        tag = message.get(attr.role_tag)
        if tag in tools and tag not in roles:
            raise RowError(
                f"turn {position} is a tool turn ({attr.role_tag} {tag!r}); vlmlint does not count "
                "LLaMA-Factory's observation/function turns"
            )
        if tag not in roles or tag is None:
            named = ", ".join(
                f"{k} {v!r}"
                for k, v in (
                    ("user_tag", attr.user_tag),
                    ("assistant_tag", attr.assistant_tag),
                    ("system_tag", attr.system_tag),
                )
            )
            hint = ' (its "tags" name no system_tag)' if tag == "system" and attr.system_tag is None else ""
            raise RowError(
                f"turn {position} has {attr.role_tag} {tag!r}, none of the dataset's tags ({named}){hint}: "
                "LLaMA-Factory skips the row (Invalid role tag)"
            )
        if attr.content_tag not in message:  # LLaMA-Factory reads message[content_tag]: a KeyError
            named = (
                f'no "{attr.content_tag}"'
                if attr.content_tag
                else "no content (the tags name no content_tag)"
            )
            raise RowError(f"turn {position} has {named}; its fields: {sorted(map(str, message))}")
        turns.append({"role": roles[tag], "content": message[attr.content_tag]})
    return turns


def _system_suffix(system: str, tools: Any) -> str:
    """OpenAIDatasetConverter (0.9.5) appends "detailed thinking off" to the system text without tools."""
    if not system:
        return system if tools else "detailed thinking off"
    if tools:
        return system + "\n"
    if "detailed thinking on" in system or "detailed thinking off" in system:
        return system
    return system + "\ndetailed thinking off"


def converter(attr: DatasetAttr) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A row of this dataset -> a sharegpt row (role/content turns, images) as LLaMA-Factory sees it."""

    def alpaca(row: Mapping[str, Any]) -> dict[str, Any]:
        turns: list[dict[str, Any]] = []
        history = _column(row, attr.history)
        if isinstance(history, list):
            for pair in history:
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise RowError(f'"{attr.history}" must hold [prompt, response] pairs')
                turns += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
        query = [value for value in (_column(row, attr.prompt), _column(row, attr.query)) if value]
        if not all(isinstance(value, str) for value in query):
            raise RowError(f'"{attr.prompt}" and "{attr.query}" must be strings')
        turns.append({"role": "user", "content": "\n".join(query)})
        response = _column(row, attr.response)
        if isinstance(response, str):  # otherwise an unsupervised example: no answer, dropped in sft
            turns.append({"role": "assistant", "content": response})
        return _finish(row, turns, _column(row, attr.system) or "")

    def sharegpt(row: Mapping[str, Any]) -> dict[str, Any]:
        turns = _turns(row, attr)
        system = ""
        if attr.system_tag and turns and turns[0]["role"] == "system":
            system = turns.pop(0)["content"] or ""
        elif attr.system:
            system = _column(row, attr.system) or ""
        if attr.formatting == "openai":
            system = _system_suffix(system, _column(row, attr.tools))
        return _finish(row, turns, system)

    def _finish(row: Mapping[str, Any], turns: list[dict[str, Any]], system: Any) -> dict[str, Any]:
        if not isinstance(system, str):
            raise RowError(f"the system prompt must be a string, got {type(system).__name__}")
        converted: dict[str, Any] = {
            "messages": ([{"role": "system", "content": system}] if system else []) + turns
        }
        for key in ("images", "videos", "audios"):
            media = _column(row, getattr(attr, key))
            if media is not None and media != []:
                converted[key] = media
        return converted

    return alpaca if attr.formatting == "alpaca" else sharegpt
