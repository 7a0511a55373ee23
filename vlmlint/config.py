"""Scan settings: one frozen record built by the CLI (or a Python caller) and read by the engine.

Settings come from, in rising priority: the defaults here, `[tool.vlmlint]` in pyproject.toml or a
vlmlint.toml (the nearest one at or above the working folder), then the command-line flags.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any

from vlmlint.rules.base import Severity

# Rule thresholds: name -> (default, what it means). Rules read them from the RuleContext, never as literals.
THRESHOLDS: dict[str, tuple[float, str]] = {
    "near_limit_share": (0.9, "VLM405: warn when a row uses more than this share of the length limit"),
    "max_image_tokens_per_image": (16384, "VLM406: image tokens above which one image is a memory risk"),
    "max_image_tokens_per_row": (32768, "VLM406: image tokens above which a row is a memory risk"),
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


class ConfigError(ValueError):
    """A config file or value vlmlint cannot use; the message names it."""


@dataclass(frozen=True)
class ScanConfig:
    dataset: str
    model: str
    layout: str | None = None
    image_root: str | None = None
    split: str | None = None
    streaming: bool = False
    max_length: int | None = None  # None: the model's text max_position_embeddings
    truncation_side: str = "right"  # where a trainer cuts a row longer than max_length
    exact: bool = False  # decode pixels and run the real image processor
    use_chat_template: bool = True
    add_generation_prompt: bool = False
    trust_remote_code: bool = False
    allow_remote: bool = False  # fetch http(s) images (never by default)
    allow_outside_root: bool = False  # read images outside the dataset folder
    fail_on: Severity = Severity.ERROR
    select: tuple[str, ...] = ()  # rule codes or prefixes; empty: all
    ignore: tuple[str, ...] = ()
    thresholds: Mapping[str, float] = field(default_factory=lambda: THRESHOLD_DEFAULTS)
    # glob -> codes or prefixes dropped for findings of the files it matches (ruff's per-file-ignores)
    per_source_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    config_root: str | None = None  # the config file's folder: relative globs are matched from it
    batch_size: int = 256
    jobs: int = (
        1  # processes that scan, this one included; 0: chosen for the model and cores (runner.default_jobs)
    )
    pipeline: str = "hf"  # the trainer whose preprocessing to predict (vlmlint/pipelines)
    pipeline_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dataset_name: str | None = None  # a dataset of a LLaMA-Factory dataset_info.json (--dataset)

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


def find_config_file(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest vlmlint.toml, or pyproject.toml with a [tool.vlmlint] table, at or above `start`."""
    folder = Path(start or os.getcwd()).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / "vlmlint.toml").is_file():
            return candidate / "vlmlint.toml"
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "tool" in (data := _read_toml(pyproject)) and "vlmlint" in data["tool"]:
            return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """The [tool.vlmlint] table (pyproject.toml) or the whole file (vlmlint.toml), keys as snake_case."""
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("vlmlint", {})
    settings = {key.replace("-", "_"): value for key, value in data.items()}
    known = {f.name for f in fields(ScanConfig)} - {"dataset", "batch_size", "config_root"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(
            f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return settings


def _codes(value: Any, what: str) -> tuple[str, ...]:
    """Rule codes or prefixes from a list or a comma-separated string, upper-cased."""
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of rule codes or prefixes, got {value!r}")
    return tuple(v.upper() for v in value)


def _per_source_ignores(value: Any) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f'per-source-ignores must be a table {{ "glob" = ["VLM2"] }}, got {value!r}')
    return MappingProxyType(
        {
            str(glob).removeprefix("./"): _codes(codes, f"per-source-ignores {glob!r}")
            for glob, codes in value.items()
        }
    )


def build_config(
    dataset: str,
    file_settings: Mapping[str, Any],
    flags: Mapping[str, Any],
    config_root: str | os.PathLike | None = None,
) -> ScanConfig:
    """Merge defaults < config file < flags (a flag left at None does not override).

    `config_root`: the config file's folder, which relative per-source-ignores globs start from.
    """
    merged: dict[str, Any] = dict(file_settings)
    if "per_source_ignores" in merged:
        merged["per_source_ignores"] = _per_source_ignores(merged["per_source_ignores"])
    if config_root is not None:
        merged["config_root"] = os.path.abspath(config_root)
    merged.update({key: value for key, value in flags.items() if value is not None})
    thresholds = dict(THRESHOLD_DEFAULTS)
    for name, value in dict(merged.pop("thresholds", {}) or {}).items():
        key = name.replace("-", "_")
        if key not in THRESHOLDS:
            raise ConfigError(f"unknown threshold {name!r}; known: {', '.join(THRESHOLDS)}")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"threshold {name!r} must be a number, got {value!r}")
        thresholds[key] = value
    for key in ("select", "ignore"):
        if merged.get(key) is not None:
            merged[key] = _codes(merged[key], key)
    if "fail_on" in merged:
        try:
            merged["fail_on"] = Severity(str(merged["fail_on"]))
        except ValueError:
            raise ConfigError(f"fail-on must be error, warning or info, got {merged['fail_on']!r}") from None
    if not isinstance(merged.get("pipeline_options", {}), Mapping):
        raise ConfigError(f"pipeline-options must be a table, got {merged['pipeline_options']!r}")
    if "pipeline_options" in merged:
        merged["pipeline_options"] = MappingProxyType(dict(merged["pipeline_options"]))
    jobs = merged.get("jobs", 1)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise ConfigError(f"jobs must be a whole number >= 0 (0: every core), got {jobs!r}")
    # 0 stays 0: the engine picks the number once it knows the model (runner.default_jobs).
    if merged.get("truncation_side", "right") not in ("left", "right"):
        raise ConfigError(f"truncation-side must be left or right, got {merged['truncation_side']!r}")
    if not merged.get("model"):
        from vlmlint.models.profiles import DEFAULT_PROFILE

        merged["model"] = DEFAULT_PROFILE  # no --model and no model in the config file
    return ScanConfig(dataset=dataset, thresholds=MappingProxyType(thresholds), **merged)
