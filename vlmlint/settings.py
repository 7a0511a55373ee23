"""The settings table: ScanConfig, each setting declared once with how it is checked and how a flag gives it.

ScanConfig's fields (but `dataset`) are the settings: each carries its Setting in the field's metadata
(`setting(...)` below), and SETTINGS is read from them, in ScanConfig's order. The table drives the
config file's known keys and its validation (config.check_setting), the safety switches a found config
file cannot turn on, the typer options scan, stats and config share (vlmlint/cli.py) and the flags those
commands hand to build_config, and the lines of `vlmlint config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any

from vlmlint.readers.layouts import LAYOUTS
from vlmlint.records import Severity

MAX_LENGTH_LIMIT = 1 << 24  # the largest --max-length / max-length (16M tokens)
MAX_JOBS = 256  # the most processes --jobs or jobs may ask for
MAX_BATCH_SIZE = 1 << 20  # rows per batch (the Python API's batch-size)

# Rule thresholds: name -> (default, what it means). Rules read them from the RuleContext, never as literals.
THRESHOLDS: dict[str, tuple[float, str]] = {
    "near_limit_share": (0.9, "VLM405: warn when a row uses more than this share of the length limit"),
    "max_image_tokens_per_image": (16384, "VLM406: image tokens above which one image is a memory risk"),
    "max_image_tokens_per_row": (32768, "VLM406: image tokens above which a row is a memory risk"),
    "max_video_tokens_per_video": (16384, "VLM409: video tokens above which one video is a memory risk"),
    "heavy_resize_factor": (16.0, "VLM208: area shrunk or grown by more than this factor"),
    "tiny_image_side": (28, "VLM204: images with a side below this many pixels are upscaled a lot"),
    "tiny_upscale_factor": (
        2.0,
        "VLM204: also images the processor enlarges more than this (area) to its min_pixels",
    ),
    "bomb_pixels": (89_478_485, "VLM202: images above this many pixels are never decoded (PIL's limit)"),
    "max_text_chars": (
        1_000_000,
        "VLM408: rows whose rendered text is longer are not tokenized (about 250k tokens or more)",
    ),
    "pre_expanded_run": (8, "VLM302: this many placeholders in a row means already-expanded text"),
}
THRESHOLD_DEFAULTS: Mapping[str, float] = MappingProxyType({k: v for k, (v, _) in THRESHOLDS.items()})


@dataclass(frozen=True)
class Setting:
    """One setting: its ScanConfig field and config-file key, its default and check, and its flag."""

    name: str  # the ScanConfig field; the config file's key is it with - for _ (either is read)
    check: (
        str  # how config.check_setting checks a value: bool, text, choice, whole, codes, ... (config._CHECKS)
    )
    default: Any = MISSING  # ScanConfig's default (MISSING: required, as model is)
    bounds: tuple[Any, ...] = ()  # choice: the choices; whole: (lowest, highest)
    optional: bool = False  # None means "the default"
    in_file: bool = True  # a config file may set it (False: only a Python caller)
    safety_flag: str | None = None  # a found config file cannot turn it on: only this flag (or --config)
    param: str | None = None  # the parameter of scan, stats and config that gives it (None: no flag)
    flags: tuple[str, ...] = ()  # the flag's names (empty: typer's --param-name)
    help: str = ""  # the flag's help in `vlmlint scan --help`
    switch: bool = False  # a plain on-switch: its parameter is its name and its flag --<key> (switch())

    @property
    def key(self) -> str:
        """The setting as the config file spells it."""
        return self.name.replace("_", "-")


_FIELD_NAME = "<the field's name>"  # setting()'s default parameter: the one named as the field


def setting(default: Any = MISSING, check: str = "text", bounds: tuple[Any, ...] = (), **rest: Any) -> Any:
    """A ScanConfig field declaring its setting: `rest` are Setting's (optional, param, flags, help, ...).

    A table default (thresholds, per-source-ignores, pipeline-options) is read-only and shared: the field
    hands out that same MappingProxyType.
    """
    # The name is the field's, filled in by SETTINGS; so is the parameter unless given (None: no flag).
    rest.setdefault("param", _FIELD_NAME)
    rest.setdefault("optional", default is None or default is MISSING)  # None: "the default"
    row = Setting("", check, default, bounds, **rest)
    if isinstance(default, Mapping):
        return field(default_factory=lambda: default, metadata={"setting": row})
    return field(default=default, metadata={"setting": row})


def switch(help: str, safety: bool = False) -> Any:
    """An off-by-default boolean setting whose flag is --<its key> (`safety`: a found config file cannot
    turn it on, only that flag or --config)."""
    return setting(False, "bool", help=help, switch=True, safety_flag="" if safety else None)


@dataclass(frozen=True)
class ScanConfig:
    """Everything a scan is told: built by the CLI from defaults < config file < flags (config.build_config)
    or by a Python caller. Each field but `dataset` is a setting of the table (its `setting(...)`)."""

    dataset: str
    model: str = setting(
        check="text",
        flags=("--model", "-m"),
        help="Processor folder, built-in profile ('vlmlint models') or Hugging Face hub id "
        "(default: the qwen2-vl profile).",
    )
    layout: str | None = setting(None, "layout", help=f"Force a row layout: {', '.join(LAYOUTS)}.")
    # LLaMA-Factory column or tag -> the row's field (readers/columns.py); a flag replaces the file's map
    columns: Mapping[str, str] = setting(
        MappingProxyType({}),
        "columns",
        help="Read rows whose fields have other names: KEY=FIELD,... with LLaMA-Factory's columns and "
        "tags, e.g. messages=conv,images=imgs,role=speaker,content=text,user=human,assistant=bot.",
    )
    image_root: str | None = setting(
        None, "text", help="Folder that relative image paths are resolved against."
    )
    split: str | None = setting(None, "text", help="Split of a Hugging Face dataset (default: train).")
    streaming: bool = switch("Stream a hub dataset instead of downloading it.")
    max_length: int | None = setting(  # None: the model's text max_position_embeddings
        None,
        "whole",
        (1, MAX_LENGTH_LIMIT),
        help="Maximum sequence length (default: the model's max_position_embeddings).",
    )
    truncation_side: str = setting(  # where a trainer cuts a row longer than max_length
        "right",
        "choice",
        ("right", "left"),
        help="Where your trainer cuts rows longer than --max-length: right or left.",
    )
    exact: bool = switch("Decode every image and run the model's real image processor.")
    use_chat_template: bool = setting(
        True,
        "bool",
        param="chat_template",
        flags=("--chat-template/--no-chat-template",),
        help="Render rows with the model's chat template (default), or count the raw text.",
    )
    add_generation_prompt: bool = switch("Render with add_generation_prompt=True (eval prompts).")
    trust_remote_code: bool = switch("Allow processors that run code from the model repository.", safety=True)
    allow_remote: bool = switch("Fetch http(s) images (never done otherwise).", safety=True)
    allow_outside_root: bool = switch("Read images whose path leaves the dataset folder.", safety=True)
    fail_on: Severity = setting(
        Severity.ERROR, "severity", help="Exit 1 when a finding is at or above this severity (default error)."
    )
    select: tuple[str, ...] = setting(  # rule codes or prefixes; empty: all
        (), "codes", help="Only these rule codes or prefixes, comma-separated (e.g. VLM3,VLM401)."
    )
    ignore: tuple[str, ...] = setting((), "codes", help="Skip these rule codes or prefixes, comma-separated.")
    thresholds: Mapping[str, float] = setting(
        THRESHOLD_DEFAULTS,
        "thresholds",
        param="threshold",
        help="Set a rule threshold, NAME=VALUE (repeatable); see 'vlmlint config'.",
    )
    # glob -> codes or prefixes dropped for findings of the files it matches (ruff's per-file-ignores)
    per_source_ignores: Mapping[str, tuple[str, ...]] = setting(
        MappingProxyType({}), "per_source_ignores", param=None
    )
    # the config file's folder: relative globs are matched from it
    config_root: str | None = setting(None, "text", param=None, in_file=False)
    batch_size: int = setting(256, "whole", (1, MAX_BATCH_SIZE), param=None, in_file=False)
    jobs: int = setting(  # processes that scan, this one included
        1,
        "whole",
        (0, MAX_JOBS),  # 0: chosen for the model and cores (runner.default_jobs)
        flags=("--jobs", "-j"),
        help="Processes that scan, this one included (default 0: as many as keep every core busy; "
        "1: this process only).",
    )
    pipeline: str = setting(  # the trainer whose preprocessing to predict (vlmlint/pipelines)
        "hf",
        "pipeline",
        help="Predict what this trainer does to each row: hf (the raw processor, default), "
        "axolotl, internvl, llamafactory, qwen-vl-finetune, swift, trl.",
    )
    pipeline_options: Mapping[str, Any] = setting(
        MappingProxyType({}),
        "pipeline_options",
        param="pipeline_option",
        help="A trainer setting, KEY=VALUE (repeatable), e.g. cutoff_len=2048.",
    )
    # image processor key -> value, as if the processor's file held it (models.apply_processor_options)
    processor_options: Mapping[str, Any] = setting(
        MappingProxyType({}),
        "processor_options",
        param="processor_option",
        help="Set an image processor key as if its file held it, KEY=VALUE (repeatable), e.g. "
        "max_pixels=50176 or size.longest_edge=1456.",
    )
    dataset_name: str | None = setting(  # a dataset of a LLaMA-Factory dataset_info.json (--dataset)
        None,
        "text",
        flags=("--dataset",),
        help="With --pipeline llamafactory: the dataset_info.json entry to scan.",
    )

    def __reduce__(self):
        # Why: MappingProxyType fields do not pickle, and Ray actors, Spark executors and spawned
        # workers receive the config pickled. Rebuilt with the same read-only tables.
        state = {item.name: getattr(self, item.name) for item in fields(self)}
        tables = tuple(name for name, value in state.items() if isinstance(value, Mapping))
        state.update({name: dict(state[name]) for name in tables})
        return (_unpickle_config, (state, tables))

    def rule_enabled(self, code: str) -> bool:
        """ruff-style selection: selected by code or prefix (all when none), minus the ignored ones."""
        if self.select and not any(code.startswith(prefix) for prefix in self.select):
            return False
        return not any(code.startswith(prefix) for prefix in self.ignore)

    def source_ignores(self, source: str) -> tuple[str, ...]:
        """The codes or prefixes per-source-ignores drops for findings of `source` (a report path)."""
        if not self.per_source_ignores:
            return ()
        if source.endswith("]") and "[" in source and os.path.exists(source[: source.rindex("[")]):
            source = source[: source.rindex("[")]  # a saved dataset's "folder[split]"
        path = os.path.abspath(source)
        candidates = [path, os.path.basename(path)]
        relative = os.path.relpath(path, self.config_root or os.getcwd())
        if not relative.startswith(".."):
            candidates.append(relative.replace(os.sep, "/"))
        return tuple(
            code
            for pattern, codes in self.per_source_ignores.items()
            if any(fnmatchcase(candidate, pattern) for candidate in candidates)
            for code in codes
        )


def _unpickle_config(state: dict[str, Any], tables: tuple[str, ...]) -> ScanConfig:
    state.update({name: MappingProxyType(state[name]) for name in tables})
    return ScanConfig(**state)


# The table, read from ScanConfig's fields (in their order), each row named after its field.
def _named(row: Setting, name: str) -> Setting:
    row = replace(row, name=name, param=name if row.param == _FIELD_NAME else row.param)
    if not row.switch:
        return row
    flag = f"--{row.key}"
    return replace(row, param=name, flags=(flag,), safety_flag=flag if row.safety_flag is not None else None)


SETTINGS: tuple[Setting, ...] = tuple(
    _named(item.metadata["setting"], item.name) for item in fields(ScanConfig) if "setting" in item.metadata
)
SETTINGS_BY_NAME: dict[str, Setting] = {row.name: row for row in SETTINGS}
FILE_KEYS: frozenset[str] = frozenset(row.name for row in SETTINGS if row.in_file)
# Switches a found config file cannot turn on: key -> the flag that can.
SAFETY_SWITCHES: dict[str, str] = {row.name: row.safety_flag for row in SETTINGS if row.safety_flag}
