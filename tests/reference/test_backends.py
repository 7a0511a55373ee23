"""The PIL-backed families run once through their torchvision image processors (reference job only).

vlmlint's formulas are proven against the PIL backend (`make test` has no torch). A user's trainer may
load the torchvision backend instead (`AutoImageProcessor` picks it when torchvision is installed), so
the reference job runs every fixture processor folder of a formula family through both backends on the
same images and compares what the counts are made of: every output but the pixel values themselves,
and the pixel values' shape. Disagreements are reported (the terminal summary and
$VLMLINT_BACKENDS_REPORT, default reference-backends.md), not failed: they are transformers' facts that
a user must know, not vlmlint bugs. The test fails only when a folder cannot be run at all.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import PROCESSORS

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from vlmlint.models import load_model  # noqa: E402

# Sides that hit the resize, tiling and rounding boundaries of most families, and odd aspect ratios.
SIZES = [
    (1, 1),
    (7, 1000),
    (1000, 7),
    (224, 224),
    (336, 672),
    (480, 640),
    (1080, 1920),
    (2000, 300),
    (513, 511),
]
REPORT: list[str] = []


def _folders() -> list[Path]:
    folders = []
    for folder in sorted(PROCESSORS.iterdir()):
        config = folder / "preprocessor_config.json"
        if not config.is_file():
            continue
        image_type = json.loads(config.read_text()).get("image_processor_type", "")
        if image_type:
            folders.append(folder)
    return folders


def _summary(output) -> dict[str, object]:
    """What a count can depend on: every non-pixel output, and the pixel values' shape."""
    summary: dict[str, object] = {}
    for key, value in output.items():
        if key.startswith("pixel_values"):
            shapes = [tuple(np.asarray(v).shape) for v in value] if isinstance(value, list) else None
            summary[key + ".shape"] = shapes if shapes is not None else tuple(np.asarray(value).shape)
        else:
            summary[key] = np.asarray(value).tolist() if not isinstance(value, list) else _plain(value)
    return summary


def _plain(value):
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return np.asarray(value).tolist()


def _run(folder: Path, backend: str, image: Image.Image) -> dict[str, object] | str:
    from transformers import AutoImageProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = AutoImageProcessor.from_pretrained(str(folder), backend=backend)
        try:
            return _summary(processor(images=[image], return_tensors="np"))
        except Exception as exc:  # the refusal itself is what the two backends must agree on
            return f"{type(exc).__name__}: {exc}"[:200]


@pytest.mark.parametrize("folder", _folders(), ids=lambda f: f.name)
def test_the_two_backends_agree(folder):
    model = load_model(str(folder))
    if model.family.count_row is not None or not model.family.header_formula:
        pytest.skip("not a formula family")
    from transformers import AutoImageProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pil = type(AutoImageProcessor.from_pretrained(str(folder), backend="pil")).__name__
        fast = type(AutoImageProcessor.from_pretrained(str(folder), backend="torchvision")).__name__
    if pil == fast:
        pytest.skip(f"one backend only ({pil})")
    for height, width in SIZES:
        image = Image.new("RGB", (width, height), (127, 64, 200))
        a, b = _run(folder, "pil", image), _run(folder, "torchvision", image)
        if a != b:
            REPORT.append(
                f"| {folder.name} | {model.family.name} | {height}x{width} | {pil}: {a} | {fast}: {b} |"
            )


def pytest_terminal_summary_lines() -> list[str]:
    head = [
        "| folder | family | image (h x w) | PIL backend | torchvision backend |",
        "|---|---|---|---|---|",
    ]
    return head + REPORT


@pytest.fixture(scope="module", autouse=True)
def _write_report():
    yield
    path = Path(os.environ.get("VLMLINT_BACKENDS_REPORT", "reference-backends.md"))
    lines = pytest_terminal_summary_lines()
    text = (
        "# PIL and torchvision image processors: where they disagree\n\n"
        + ("\n".join(lines) if REPORT else "No disagreement on the fixture folders.")
        + "\n"
    )
    path.write_text(text, encoding="utf-8")
    print(f"\n{len(REPORT)} backend disagreement(s); see {path}")
