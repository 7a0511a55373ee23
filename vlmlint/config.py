"""Scan settings checked and merged: the ScanConfig record (vlmlint/settings.py) built by the CLI or a caller.

Settings come from, in rising priority: ScanConfig's defaults, `[tool.vlmlint]` in pyproject.toml or a
vlmlint.toml (the nearest one at or above the working folder, or the one named with --config), then the
command-line flags. Every value's type and range is checked here, whoever gives it.

A config file vlmlint finds itself belongs to the repository being scanned, which in CI may be an
untrusted pull request: it cannot relax safety (remote code, URLs, paths out of the repository, more
processes than cores, larger work bounds). Those come from flags or from a file named with --config.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from vlmlint.records import Severity
from vlmlint.settings import (  # noqa: F401 (MAX_*, THRESHOLDS, ScanConfig: where they were)
    FILE_KEYS,
    MAX_BATCH_SIZE,
    MAX_JOBS,
    MAX_LENGTH_LIMIT,
    SAFETY_SWITCHES,
    SETTINGS_BY_NAME,
    THRESHOLD_DEFAULTS,
    THRESHOLDS,
    ScanConfig,
    Setting,
)

# Each threshold's range: (low, high, whole number?, low excluded?). Outside it a rule would fire on
# every row or never, so a typo or a hostile value is refused instead of switching a check off.
THRESHOLD_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "near_limit_share": (0.0, 1.0, False, True),
    "max_image_tokens_per_image": (1, 1_000_000_000, True, False),
    "max_image_tokens_per_row": (1, 1_000_000_000, True, False),
    "max_video_tokens_per_video": (1, 1_000_000_000, True, False),
    "heavy_resize_factor": (1.0, 1_000_000.0, False, False),
    "tiny_image_side": (1, 100_000, True, False),
    "tiny_upscale_factor": (1.0, 1_000_000.0, False, False),
    "bomb_pixels": (1, 1 << 40, True, False),
    "max_text_chars": (1, 1_000_000_000, True, False),
    "pre_expanded_run": (2, 1_000_000, True, False),
}
# Thresholds that bound vlmlint's own work (decoding, tokenizing): a found config may lower them only.
WORK_BOUNDS = ("bomb_pixels", "max_text_chars")

MAX_CONFIG_BYTES = 1 << 20  # a config file larger than this is refused before it is parsed
MAX_SETTING_CHARS = 4096  # a string setting (a path, hub id, split, glob) longer than PATH_MAX is refused
_CODE = re.compile(r"VLM[0-9]{0,3}")


class ConfigError(ValueError):
    """A config file or value vlmlint cannot use; the message names it."""


def find_config_file(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest vlmlint.toml, or pyproject.toml with a [tool.vlmlint] table, at or above `start`."""
    folder = Path(start or os.getcwd()).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / "vlmlint.toml").is_file():
            return _inside(candidate / "vlmlint.toml")
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            tool = _read_toml(_inside(pyproject)).get("tool")
            if isinstance(tool, Mapping) and "vlmlint" in tool:
                return pyproject
    return None


def _inside(path: Path) -> Path:
    """A found file that is a link out of its folder is refused: it could name /dev/zero or a secret."""
    if os.path.dirname(os.path.realpath(path)) != os.path.realpath(path.parent):
        raise ConfigError(
            f"{path}: is a link to {os.path.realpath(path)}, out of its folder; name a config file with --config"
        )
    return path


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from vlmlint.fileio import FileTooLarge, NotRegularFile, read_regular

    try:
        data = read_regular(path, MAX_CONFIG_BYTES)  # a FIFO named as a config file does not block
        return tomllib.loads(data.decode("utf-8"))
    except NotRegularFile as exc:
        what = os.strerror(errno.EISDIR) if stat.S_ISDIR(exc.mode) else "not a regular file"
        raise ConfigError(f"{path}: {what}") from None
    except FileTooLarge as exc:
        size = "" if exc.size is None else f" {exc.size:,} bytes,"
        raise ConfigError(
            f"{path}:{size} above the {MAX_CONFIG_BYTES:,} bytes a config file may have"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text (TOML must be UTF-8)") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"{path}: nested too deeply or too large to parse") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """The [tool.vlmlint] table (pyproject.toml) or the whole file (vlmlint.toml), keys as snake_case.

    Every value is checked (type and range); a bad one is a ConfigError naming the file and the key.
    """
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, Mapping):
            raise ConfigError(f"{path}: [tool] must be a table, got {_short(tool)}")
        data = tool.get("vlmlint", {})
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: [tool.vlmlint] must be a table, got {_short(data)}")
    settings: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name in settings:
            raise ConfigError(f"{path}: {_key(name)} is given twice (as - and as _)")
        settings[name] = value
    known = FILE_KEYS
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(
            f"{path}: unknown setting(s) {', '.join(map(_short, unknown))}; known: {', '.join(sorted(known))}"
        )
    try:
        for name, value in settings.items():
            check_setting(name, value)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return settings


def refuse_relaxed_safety(path: Path, settings: Mapping[str, Any], flags: Mapping[str, Any]) -> None:
    """A config file vlmlint found (not named with --config) cannot relax safety: a pull request could.

    `flags`: a key a flag sets is the flag's, whatever the file says.
    """
    repository = os.path.realpath(path.parent)
    shown = os.path.relpath(path)  # as the user would pass it to --config from here

    def refuse(what: str, flag: str) -> ConfigError:
        return ConfigError(
            f"{shown}: {what} is not taken from a config file found in the scanned folder (a pull request "
            f"could set it); pass {flag} or --config {shown}"
        )

    def given(key: str) -> bool:
        return settings.get(key) is not None and flags.get(key) is None

    for key, flag in SAFETY_SWITCHES.items():
        if given(key) and settings[key]:
            raise refuse(_key(key), flag)
    if given("image_root") and not _within(settings["image_root"], repository):
        raise refuse(f"image-root {settings['image_root']!r} (outside {repository})", "--image-root")
    if given("model") and os.path.isdir(settings["model"]) and not _within(settings["model"], repository):
        raise refuse(f"model folder {settings['model']!r} (outside {repository})", "--model")
    cores = os.cpu_count() or 1
    if given("jobs") and settings["jobs"] > cores:
        raise refuse(f"jobs = {settings['jobs']} (more than this machine's {cores} cores)", "--jobs")
    thresholds = settings.get("thresholds") or {}
    flagged = {name.replace("-", "_") for name in flags.get("thresholds") or {}}
    for name, value in thresholds.items():
        key = name.replace("-", "_")
        if key in WORK_BOUNDS and key not in flagged and value > THRESHOLD_DEFAULTS[key]:
            raise refuse(
                f"thresholds.{_key(key)} = {value} (above the default {THRESHOLD_DEFAULTS[key]}, more work per row)",
                f"--threshold {key}=N",
            )


def _within(path: str, folder: str) -> bool:
    full = os.path.realpath(os.path.abspath(path))
    return full == folder or full.startswith(folder.rstrip(os.sep) + os.sep)


def _key(name: str) -> str:
    """A setting as the config file spells it."""
    return name.replace("_", "-")


def _short(value: Any) -> str:
    """A value for a message: its repr, cut so that a hostile one keeps the message one short line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{_key(name)} must be a string, got {_short(value)}")
    if not value.strip() or "\x00" in value or len(value) > MAX_SETTING_CHARS:
        raise ConfigError(
            f"{_key(name)} must be a non-empty string of at most {MAX_SETTING_CHARS} characters "
            f"without NUL, got {_short(value)}"
        )
    return value


def _whole(name: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"{_key(name)} must be a whole number from {low} to {high}, got {_short(value)}")
    return value


def _choice(name: str, value: Any, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{_key(name)} must be one of {', '.join(choices)}, got {_short(value)}")
    return value


def check_threshold(name: Any, value: Any) -> float:
    """One threshold: a known name, a finite number in its range (THRESHOLD_RANGES)."""
    key = str(name).replace("-", "_")
    if key not in THRESHOLDS:
        raise ConfigError(f"unknown threshold {_short(name)}; known: {', '.join(THRESHOLDS)}")
    # A threshold added without a range: any finite number of at least 0 (tests/test_config.py asks for one).
    low, high, whole, open_low = THRESHOLD_RANGES.get(key, (0, math.inf, False, False))
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"threshold {_short(name)} must be a finite number, got {_short(value)}")
    if whole and isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"threshold {_short(name)} must be a whole number, got {_short(value)}")
        value = int(value)
    if value > high or value < low or (open_low and value == low):
        span = f"above {low} and at most {high}" if open_low else f"from {low} to {high}"
        raise ConfigError(f"threshold {_short(name)} must be {span}, got {_short(value)}")
    return value


def check_setting(name: str, value: Any) -> Any:
    """One setting's value checked and normalized; a ConfigError names the key. None: the default."""
    setting = SETTINGS_BY_NAME.get(name)
    if setting is None:
        return value  # dataset, and fields only a Python caller sets
    if value is None and setting.optional:
        return None
    return _CHECKS[setting.check](setting, value)


def _boolean(setting: Setting, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(
            f"{setting.key} must be true or false (a TOML boolean, unquoted), got {_short(value)}"
        )
    return value


def _layout(setting: Setting, value: Any) -> str:
    from vlmlint.readers.layouts import LAYOUTS

    return _choice(setting.name, value, LAYOUTS)


def _pipeline(setting: Setting, value: Any) -> str:
    from vlmlint.pipelines import PIPELINES

    if not isinstance(value, str) or value not in PIPELINES:  # worded as vlmlint.pipelines words it
        raise ConfigError(f"unknown --pipeline {_short(value)}; known: {', '.join(PIPELINES)}")
    return value


def _severity(setting: Setting, value: Any) -> Severity:
    if isinstance(value, Severity):
        return value
    return Severity(_choice(setting.name, value, tuple(level.value for level in Severity)))


def _thresholds(setting: Setting, value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"thresholds must be a table {{ near-limit-share = 0.85 }}, got {_short(value)}")
    return {str(key).replace("-", "_"): check_threshold(key, item) for key, item in value.items()}


# Setting.check -> how a value of that kind is checked (vlmlint/settings.py says which kind each is)
_CHECKS = {
    "bool": _boolean,
    "text": lambda setting, value: _text(setting.name, value),
    "choice": lambda setting, value: _choice(setting.name, value, setting.bounds),
    "layout": _layout,
    "pipeline": _pipeline,
    "severity": _severity,
    "whole": lambda setting, value: _whole(setting.name, value, *setting.bounds),
    "codes": lambda setting, value: _codes(value, setting.key),
    "per_source_ignores": lambda setting, value: _per_source_ignores(value),
    "pipeline_options": lambda setting, value: _pipeline_options(value),
    "processor_options": lambda setting, value: _processor_options(value),
    "columns": lambda setting, value: _columns(value),
    "thresholds": _thresholds,
}


def _columns(value: Any) -> Mapping[str, str]:
    """A column map (KEY=FIELD,... or a table): LLaMA-Factory's column and tag keys, checked here."""
    from vlmlint.readers.columns import ColumnsError, check_columns

    try:
        return MappingProxyType(check_columns(value))
    except ColumnsError as exc:
        raise ConfigError(str(exc)) from None


def _pipeline_options(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"pipeline-options must be a table {{ cutoff_len = 2048 }}, got {_short(value)}")
    options: dict[str, Any] = {}
    for key, item in value.items():
        name = _text("pipeline_options key", key).replace("-", "_")
        # None: a Python caller's "the trainer's default" (TOML and the flags cannot give it)
        scalar = (
            item is None
            or isinstance(item, (bool, int, str))
            or (isinstance(item, float) and math.isfinite(item))
        )
        if not scalar or (isinstance(item, str) and len(item) > MAX_SETTING_CHARS):
            raise ConfigError(
                f"pipeline-options {_short(key)} must be a string, a whole or finite number or true/false, "
                f"got {_short(item)}"
            )
        options[name] = item
    return MappingProxyType(options)


def _processor_option_value(key: Any, item: Any, depth: int = 0) -> Any:
    """A processor option's value: what an image processor's JSON file can hold for a knob (a string,
    a whole or finite number, true/false, a list of numbers, or a table of them, as size is)."""
    if isinstance(item, (bool, int)) or (isinstance(item, float) and math.isfinite(item)):
        return item
    if isinstance(item, str) and len(item) <= MAX_SETTING_CHARS:
        return item
    if isinstance(item, (list, tuple)) and len(item) <= 64 and depth < 2:
        return [_processor_option_value(key, value, depth + 1) for value in item]
    if isinstance(item, Mapping) and len(item) <= 64 and depth < 2:
        return {
            _text("processor_options key", name): _processor_option_value(key, value, depth + 1)
            for name, value in item.items()
        }
    raise ConfigError(
        f"processor-options {_short(key)} must be a string, a whole or finite number, true/false, a list "
        f"or a table of them, got {_short(item)}"
    )


def _processor_options(value: Any) -> Mapping[str, Any]:
    """KEY (or KEY.SUB, one entry of a table such as size) -> value; the keys the model's image processor
    knows are checked when it is loaded (models.apply_processor_options)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"processor-options must be a table {{ max_pixels = 50176 }}, got {_short(value)}")
    options: dict[str, Any] = {}
    for key, item in value.items():
        name = _text("processor_options key", key)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", name):
            raise ConfigError(
                f"processor-options key {_short(key)} must be a key of the image processor's file (max_pixels) "
                "or KEY.SUB for one entry of a table (size.longest_edge)"
            )
        options[name] = _processor_option_value(key, item)
    return MappingProxyType(options)


def _codes(value: Any, what: str) -> tuple[str, ...]:
    """Rule codes or prefixes from a list or a comma-separated string, upper-cased; each must name a rule."""
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of rule codes or prefixes, got {_short(value)}")
    from vlmlint.rules import ALL_RULES, RULES_BY_CODE

    by_name = {rule.name: rule.code for rule in ALL_RULES}  # kebab names are accepted where codes are
    codes = tuple(by_name.get(v.strip().lower(), v.strip().upper()) for v in value)
    for given, code in zip(value, codes, strict=True):
        # Why: an empty prefix matches every rule, a typo none; either switches checks off in silence.
        if not _CODE.fullmatch(code) or not any(known.startswith(code) for known in RULES_BY_CODE):
            raise ConfigError(
                f"{what}: {_short(given.strip())} matches no rule (a code like VLM401, a prefix like VLM4, or a "
                "name like sequence-too-long; see 'vlmlint rules')"
            )
    return codes


def _per_source_ignores(value: Any) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f'per-source-ignores must be a table {{ "glob" = ["VLM2"] }}, got {_short(value)}')
    return MappingProxyType(
        {
            _text("per_source_ignores glob", glob).removeprefix("./"): _codes(
                codes, f"per-source-ignores {_short(glob)}"
            )
            for glob, codes in value.items()
        }
    )


def build_config(
    dataset: str,
    file_settings: Mapping[str, Any],
    flags: Mapping[str, Any],
    config_root: str | os.PathLike | None = None,
) -> ScanConfig:
    """Merge defaults < config file < flags (a flag left at None does not override); check every value.

    `config_root`: the config file's folder, which relative per-source-ignores globs start from.
    Thresholds merge by name (a --threshold flag overrides that one threshold of the file).
    """
    merged: dict[str, Any] = dict(file_settings)
    if config_root is not None:
        merged["config_root"] = os.path.abspath(config_root)
    merged.update({key: value for key, value in flags.items() if value is not None and key != "thresholds"})
    known = {f.name for f in fields(ScanConfig)} - {"dataset"}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(map(_short, unknown))}; known: {', '.join(sorted(known))}"
        )
    thresholds = dict(THRESHOLD_DEFAULTS)
    for source in (file_settings.get("thresholds"), flags.get("thresholds")):
        if source is not None:
            thresholds.update(check_setting("thresholds", source))
    merged.pop("thresholds", None)
    merged = {name: check_setting(name, value) for name, value in merged.items()}
    for key in ("per_source_ignores", "pipeline_options", "processor_options", "columns"):
        if merged.get(key) is None:
            merged.pop(key, None)
    if not merged.get("model"):
        from vlmlint.models.profiles import DEFAULT_PROFILE

        merged["model"] = DEFAULT_PROFILE  # no --model and no model in the config file
    return ScanConfig(dataset=dataset, thresholds=MappingProxyType(thresholds), **merged)
