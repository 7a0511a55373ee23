"""The settings table: every ScanConfig setting once, with how it is checked and how a flag gives it.

One row per setting (ScanConfig's fields but `dataset`, in their order). It drives the config file's
known keys and its validation (config.check_setting), the safety switches a found config file cannot
turn on, the typer options scan, stats and config share (vlmlint/cli.py) and the flags those commands
hand to build_config, and the lines of `vlmlint config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_LENGTH_LIMIT = 1 << 24  # the largest --max-length / max-length (16M tokens)
MAX_JOBS = 256  # the most processes --jobs or jobs may ask for
MAX_BATCH_SIZE = 1 << 20  # rows per batch (the Python API's batch-size)


@dataclass(frozen=True)
class Setting:
    """One setting: its ScanConfig field and config-file key, its check, and its command-line flag."""

    name: str  # the ScanConfig field; the config file's key is it with - for _ (either is read)
    check: (
        str  # how config.check_setting checks a value: bool, text, choice, whole, codes, ... (config._CHECKS)
    )
    bounds: tuple[Any, ...] = ()  # choice: the choices; whole: (lowest, highest)
    optional: bool = False  # None means "the default"
    in_file: bool = True  # a config file may set it (False: only a Python caller)
    safety_flag: str | None = None  # a found config file cannot turn it on: only this flag (or --config)
    param: str | None = None  # the parameter of scan, stats and config that gives it (None: no flag)
    flags: tuple[str, ...] = ()  # the flag's names (empty: typer's --param-name)
    help: str = ""  # the flag's help in `vlmlint scan --help`

    @property
    def key(self) -> str:
        """The setting as the config file spells it."""
        return self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "model",
        "text",
        optional=True,
        param="model",
        flags=("--model", "-m"),
        help="Processor folder, built-in profile ('vlmlint models') or Hugging Face hub id "
        "(default: the qwen2-vl profile).",
    ),
    Setting(
        "layout",
        "layout",
        optional=True,
        param="layout",
        help="Force a row layout: llava, sharegpt, openai, alpaca, captions, pretokenized.",
    ),
    Setting(
        "image_root",
        "text",
        optional=True,
        param="image_root",
        help="Folder that relative image paths are resolved against.",
    ),
    Setting(
        "split",
        "text",
        optional=True,
        param="split",
        help="Split of a Hugging Face dataset (default: train).",
    ),
    Setting(
        "streaming",
        "bool",
        param="streaming",
        flags=("--streaming",),
        help="Stream a hub dataset instead of downloading it.",
    ),
    Setting(
        "max_length",
        "whole",
        (1, MAX_LENGTH_LIMIT),
        optional=True,
        param="max_length",
        help="Maximum sequence length (default: the model's max_position_embeddings).",
    ),
    Setting(
        "truncation_side",
        "choice",
        ("right", "left"),
        param="truncation_side",
        help="Where your trainer cuts rows longer than --max-length: right or left.",
    ),
    Setting(
        "exact",
        "bool",
        param="exact",
        flags=("--exact",),
        help="Decode every image and run the model's real image processor.",
    ),
    Setting(
        "use_chat_template",
        "bool",
        param="chat_template",
        flags=("--chat-template/--no-chat-template",),
        help="Render rows with the model's chat template (default), or count the raw text.",
    ),
    Setting(
        "add_generation_prompt",
        "bool",
        param="add_generation_prompt",
        flags=("--add-generation-prompt",),
        help="Render with add_generation_prompt=True (eval prompts).",
    ),
    Setting(
        "trust_remote_code",
        "bool",
        safety_flag="--trust-remote-code",
        param="trust_remote_code",
        flags=("--trust-remote-code",),
        help="Allow processors that run code from the model repository.",
    ),
    Setting(
        "allow_remote",
        "bool",
        safety_flag="--allow-remote",
        param="allow_remote",
        flags=("--allow-remote",),
        help="Fetch http(s) images (never done otherwise).",
    ),
    Setting(
        "allow_outside_root",
        "bool",
        safety_flag="--allow-outside-root",
        param="allow_outside_root",
        flags=("--allow-outside-root",),
        help="Read images whose path leaves the dataset folder.",
    ),
    Setting(
        "fail_on",
        "severity",
        param="fail_on",
        help="Exit 1 when a finding is at or above this severity (default error).",
    ),
    Setting(
        "select",
        "codes",
        param="select",
        help="Only these rule codes or prefixes, comma-separated (e.g. VLM3,VLM401).",
    ),
    Setting("ignore", "codes", param="ignore", help="Skip these rule codes or prefixes, comma-separated."),
    Setting(
        "thresholds",
        "thresholds",
        param="threshold",
        help="Set a rule threshold, NAME=VALUE (repeatable); see 'vlmlint config'.",
    ),
    Setting("per_source_ignores", "per_source_ignores"),
    Setting("config_root", "text", optional=True, in_file=False),
    Setting("batch_size", "whole", (1, MAX_BATCH_SIZE), in_file=False),
    Setting(
        "jobs",
        "whole",
        (0, MAX_JOBS),  # 0: chosen for the model and cores (runner.default_jobs)
        param="jobs",
        flags=("--jobs", "-j"),
        help="Processes that scan, this one included (default 0: as many as keep every core busy; "
        "1: this process only).",
    ),
    Setting(
        "pipeline",
        "pipeline",
        param="pipeline",
        help="Predict what this trainer does to each row: hf (the raw processor, default), "
        "llamafactory, swift, trl.",
    ),
    Setting(
        "pipeline_options",
        "pipeline_options",
        param="pipeline_option",
        help="A trainer setting, KEY=VALUE (repeatable), e.g. cutoff_len=2048.",
    ),
    Setting(
        "dataset_name",
        "text",
        optional=True,
        param="dataset_name",
        flags=("--dataset",),
        help="With --pipeline llamafactory: the dataset_info.json entry to scan.",
    ),
)
SETTINGS_BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
FILE_KEYS: frozenset[str] = frozenset(setting.name for setting in SETTINGS if setting.in_file)
# Switches a found config file cannot turn on: key -> the flag that can.
SAFETY_SWITCHES: dict[str, str] = {s.name: s.safety_flag for s in SETTINGS if s.safety_flag}
