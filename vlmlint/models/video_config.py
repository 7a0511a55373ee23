"""A model's video processor settings, read as transformers' from_pretrained reads them, without torch.

transformers 5.x builds every video processor on torchvision (video_processing_utils.BaseVideoProcessor),
so without it the class cannot be instantiated, and its auto mapping is blanked at import. vlmlint reads
the same settings itself:

- the file, in `BaseVideoProcessor.get_video_processor_dict`'s order (transformers 5.24): the
  `video_processor` dict nested in processor_config.json, else video_preprocessor_config.json, else
  preprocessor_config.json (a Qwen2-VL checkpoint ships only the image processor's file, whose
  min_pixels / max_pixels then bound video frames too);
- the class: the file's `video_processor_type`, else its `image_processor_type` with ImageProcessor
  read as VideoProcessor where transformers has such a class (AutoVideoProcessor's fallback for a
  previous image processor's file), else the auto mapping's entry for config.json's model_type (read
  from video_processing_auto.py's source);
- the class defaults: its literal class attributes and its bases', read from the transformers source
  (never imported), arithmetic included (`size = {"shortest_edge": 128 * 28 * 28, ...}`). The file's
  keys override them, as `from_dict` passes them to `__init__`.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from vlmlint.models.files import model_file

_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNKNOWN = object()


@cache
def transformers_dir() -> Path:
    """The installed transformers' package folder, found without importing it (a built-in profile's
    scan never imports transformers: vlmlint/models/light.py)."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        import transformers  # not found by its spec: its own error

        return Path(transformers.__file__).parent
    return Path(spec.origin).parent


def _literal(node: ast.AST) -> Any:
    """A class attribute's value when it is a literal or arithmetic on literals, else _UNKNOWN."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _literal(node.left), _literal(node.right)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)):
            return _ARITHMETIC[type(node.op)](left, right)
        return _UNKNOWN
    if isinstance(node, ast.Dict):
        keys = [_literal(key) if key is not None else _UNKNOWN for key in node.keys]
        values = [_literal(value) for value in node.values]
        if any(item is _UNKNOWN for item in keys + values):
            return _UNKNOWN
        return dict(zip(keys, values, strict=True))
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(item) for item in node.elts]
        if any(item is _UNKNOWN for item in items):
            return _UNKNOWN
        return items if isinstance(node, ast.List) else tuple(items)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return _UNKNOWN


def _class_paths() -> list[Path]:
    root = transformers_dir()
    return sorted(root.glob("models/*/video_processing*.py")) + [root / "video_processing_utils.py"]


@cache
def _parsed(path: Path) -> dict[str, ast.ClassDef] | None:
    """A file's top-level classes by name (the first of a name), or None where it does not parse."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    found: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.setdefault(node.name, node)
    return found


_CLASS_LINE = re.compile(r"^class[ \t]+(\w+)", re.MULTILINE)


class _Classes(Mapping):
    """Every video processor class of transformers (and BaseVideoProcessor's mixins), by name: the first
    file (in path order) whose top-level body defines it. Files are parsed only when one of their
    classes is asked for (parsing all of them is ~0.3 s of a small scan's start); a `class` line at the
    start of a line names the candidates, which the parse then confirms."""

    def __init__(self, paths: list[Path]) -> None:
        self._candidates: dict[str, list[Path]] = {}
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:
                continue
            for name in dict.fromkeys(_CLASS_LINE.findall(text)):
                self._candidates.setdefault(name, []).append(path)

    def __getitem__(self, name: str) -> ast.ClassDef:
        for path in self._candidates.get(name, ()):
            node = (_parsed(path) or {}).get(name)
            if node is not None:
                return node
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._candidates if name in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True


@cache
def _classes() -> Mapping[str, ast.ClassDef]:
    """Every video processor class of transformers (and BaseVideoProcessor's mixins), by name."""
    return _Classes(_class_paths())


def class_defaults(class_name: str) -> dict[str, Any]:
    """The literal class attributes of a transformers video processor class, its bases' first."""
    node = _classes().get(class_name)
    if node is None:
        return {}
    values: dict[str, Any] = {}
    for base in reversed(node.bases):
        if isinstance(base, ast.Name) and base.id != class_name:
            values.update(class_defaults(base.id))
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name):
            literal = _literal(value)
            if literal is not _UNKNOWN:
                values[target.id] = literal
    return values


def class_for_model_type(model_type: str | None) -> str | None:
    """The video processor class transformers maps a model type to, read from the auto mapping's source.

    Without torchvision transformers blanks these names at import (video_processing_auto.py), and
    several model types use another's class (MiniCPM-V 4.7: MiniCPMV4_6VideoProcessor).
    """
    if not model_type:
        return None
    return _auto_mapping().get(model_type)


@cache
def _auto_mapping() -> dict[str, str]:
    """model_type -> video processor class: auto_mappings.py's table (read, not imported: importing
    video_processing_auto without torchvision blanks the shared dict), then video_processing_auto.py's
    additions, which win as its `update` does."""
    mapping: dict[str, str] = {}
    for name in ("auto_mappings.py", "video_processing_auto.py"):
        path = transformers_dir() / "models" / "auto" / name
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and "VIDEO_PROCESSOR" in t.id for t in node.targets
            ):
                _read_pairs(node.value, mapping)
    return mapping


def _read_pairs(node: ast.AST, mapping: dict[str, str]) -> None:
    """("model_type", {"torchvision": "Class"}) pairs anywhere under node (a dict literal too)."""
    for child in ast.walk(node):
        pairs = []
        if isinstance(child, ast.Tuple) and len(child.elts) == 2:
            pairs.append((child.elts[0], child.elts[1]))
        elif isinstance(child, ast.Dict):
            pairs.extend((k, v) for k, v in zip(child.keys, child.values, strict=True) if k is not None)
        for key, value in pairs:
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Dict):
                for backend in value.values:
                    if isinstance(backend, ast.Constant) and isinstance(backend.value, str):
                        mapping[key.value] = backend.value
                        break


def read_optional_json(model: str, filename: str) -> dict[str, Any]:
    """One JSON file of the folder or hub repo; {} when absent or unreadable (optional settings only)."""
    path = model_file(model, filename)
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def video_processor_config(
    model: str, processor_dict: dict[str, Any], model_type: str | None
) -> tuple[str | None, dict[str, Any], str | None]:
    """(class name, settings: class defaults then the file's keys, the file they came from)."""
    nested = processor_dict.get("video_processor")
    if isinstance(nested, dict):
        config, source = nested, "processor_config.json"
    else:
        config, source = (
            read_optional_json(model, "video_preprocessor_config.json"),
            "video_preprocessor_config.json",
        )
        if not config:
            config, source = read_optional_json(model, "preprocessor_config.json"), "preprocessor_config.json"
    if not config:
        source = None
    class_name = config.get("video_processor_type")
    if not isinstance(class_name, str):  # an image processor's file: its class's video twin, if there is one
        image_type = config.get("image_processor_type")
        inferred = (
            image_type.replace("ImageProcessor", "VideoProcessor") if isinstance(image_type, str) else None
        )
        class_name = inferred if inferred in _classes() else None
    if not isinstance(class_name, str):
        class_name = class_for_model_type(model_type)
    settings = class_defaults(class_name) if class_name else {}
    settings.update(config)
    if class_name:
        settings["video_processor_type"] = class_name
    return class_name, settings, source
