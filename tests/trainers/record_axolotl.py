"""Record what axolotl's own multimodal preprocessing does with the fixture rows: the truth
tests/test_pipeline_axolotl.py compares `--pipeline axolotl` with. Not a test: it needs axolotl's source,
which vlmlint does not ship (no torch is needed).

    pip download axolotl==0.19.0 --no-deps -d /tmp/axo && (cd /tmp/axo && mkdir -p src && cd src && unzip -o ../axolotl-0.19.0-py3-none-any.whl)
    .venv/bin/python tests/trainers/record_axolotl.py /tmp/axo/src          # from the repo root

`ProcessingStrategy.__call__` is taken from axolotl/processing_strategies.py as the source has it (the
class and the dataclass it names, by their AST, not copied) with `remove_none_values` from
axolotl/utils/dict.py, and run on each row of fixtures/axolotl21.py with transformers' `load_image`
replaced by a stand-in that returns the reference it is given (the placement is what is recorded), then
with `image_size` set, on blank PIL images of several sizes (the size handed to the processor).
"""

from __future__ import annotations

import ast
import json
import logging
import sys
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("axolotl_truth.json")
VERSION = "0.19.0"
SIZES = [(640, 480), (300, 200), (448, 672), (1024, 256), (64, 64)]
IMAGE_SIZES: list[Any] = [336, 448, (448, 448), (640, 320)]


class _Loaded(str):
    """What the stand-in load_image returns: the reference it was given, marked as loaded."""


def strategy_class(src: Path) -> type:
    """axolotl's ProcessingStrategy, from its source, with just enough around it to run torch-free."""
    from PIL import Image, ImageOps

    source = (src / "axolotl" / "processing_strategies.py").read_text()
    tree = ast.parse(source)
    wanted = {"RoleBoundary", "ProcessingStrategy"}
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
    helpers = ast.parse((src / "axolotl" / "utils" / "dict.py").read_text())
    body += [n for n in helpers.body if isinstance(n, ast.FunctionDef) and n.name == "remove_none_values"]
    namespace: dict[str, Any] = {
        "dataclass": dataclass, "field": field, "Optional": Optional, "deepcopy": deepcopy,
        "Image": Image, "ImageOps": ImageOps, "Resampling": Image.Resampling,
        "Tensor": object, "ProcessorMixin": object, "LOG": logging.getLogger("axolotl"),
        "load_image": _Loaded,
    }  # fmt: skip
    exec(compile(ast.Module(body, []), "axolotl/processing_strategies.py", "exec"), namespace)
    return namespace["ProcessingStrategy"]


def strategy(cls: type, image_size: Any = None) -> Any:
    """An instance without its processor (__init__ only reads the processor's tokens and masking)."""
    instance = cls.__new__(cls)
    instance.field_messages = ("messages",)
    instance.image_size = image_size
    instance.image_resize_algorithm = instance_algorithm()
    return instance


def instance_algorithm() -> Any:
    from PIL import Image

    return Image.Resampling.BILINEAR  # ProcessingStrategy's default


def canonical(messages: list[dict]) -> list[dict]:
    """Each turn's role and parts: ["text", str] or ["image", the loaded reference or None (a bare part)]."""
    turns = []
    for message in messages:
        parts = []
        for part in message["content"]:
            if part["type"] == "text":
                parts.append(["text", part["text"]])
            elif part["type"] == "image":
                value = part.get("image", part.get("path", part.get("url")))
                parts.append(["image", None if value is None else str(value)])
        turns.append({"role": message["role"], "parts": parts})
    return turns


def main() -> None:
    from PIL import Image

    sys.path.insert(0, str(ROOT / "fixtures"))
    from axolotl21 import ROWS

    src = Path(sys.argv[1])
    cls = strategy_class(src)
    rows = []
    for note, row in ROWS:
        (out,) = strategy(cls)([deepcopy(row)])
        rows.append({"note": note, "messages": canonical(out["messages"])})
    sizes = []
    for image_size in IMAGE_SIZES:
        for width, height in SIZES:
            row = {"messages": [{"role": "user", "content": "x"}], "images": ["blank"]}
            blank = Image.new("RGB", (width, height))
            namespace_load = cls.__call__.__globals__
            namespace_load["load_image"] = lambda _value, blank=blank: blank
            (out,) = strategy(cls, tuple(image_size) if isinstance(image_size, tuple) else image_size)([row])
            namespace_load["load_image"] = _Loaded
            image = next(p["image"] for p in out["messages"][0]["content"] if p["type"] == "image")
            sizes.append(
                [
                    list(image_size) if isinstance(image_size, tuple) else image_size,
                    [width, height],
                    list(image.size),
                ]
            )
    truth = {"axolotl": VERSION, "rows": rows, "image_size": sizes}
    OUT.write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(rows)} rows, {len(sizes)} resize cases")


if __name__ == "__main__":
    main()
