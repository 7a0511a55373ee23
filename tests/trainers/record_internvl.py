"""Record what InternVL's own fine-tuning code does with a set of rows: the truth
tests/test_pipeline_internvl.py compares `--pipeline internvl` with. Not a test: it needs torch and the
InternVL source, which vlmlint does not ship.

    # the InternVL repository at commit 2410d1dbf208f0e799459aff9376e5747dbf41a2 (a clone, or the git
    # directory the search tool's fetch writes), and a venv with torch (.venv-reference has one)
    .venv-reference/bin/python tests/trainers/record_internvl.py /path/to/InternVL   # from the repo root

The functions are taken from internvl_chat/internvl/train/dataset.py as the source has them (by their
AST, not copied): `find_closest_aspect_ratio` and `dynamic_preprocess` on blank images of each size and
tile budget (the number of images it returns), and `preprocess_internvl2_5` (conv_style internvl2_5) on
each row with the internvl3.5 profile's real tokenizer and the budgets and limits of
internvl_chat_finetune.py's `multi_modal_get_item` / `multi_modal_multi_image_get_item`: the length of
input_ids, how many `</img>` the cut keeps and how many labels it keeps, for each max_seq_length.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

COMMIT = "2410d1dbf208f0e799459aff9376e5747dbf41a2"
OUT = Path(__file__).with_name("internvl_truth.json")
SIZES = [
    (1, 1), (28, 28), (224, 224), (448, 448), (640, 480), (480, 640), (1024, 256), (256, 1024),
    (300, 200), (1920, 1080), (1080, 1920), (4000, 64), (64, 4000), (1000, 999), (672, 448),
    (1344, 896), (896, 448), (2000, 3000), (333, 1000), (1500, 500),
]  # fmt: skip
BUDGETS = [1, 2, 3, 4, 6, 12, 24]
LIMITS = [64, 300, 500, 700, 900, 1000, 1200, 1800, 2300, 2500, 2700, 3400, 4400, 16384]


def _source(repo: Path, path: str) -> str:
    if (repo / path).is_file():
        return (repo / path).read_text()
    return subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _functions(source: str, names: tuple[str, ...], namespace: dict) -> dict:
    tree = ast.parse(source)
    module = ast.Module([n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names], [])
    exec(compile(module, "internvl_chat/internvl/train/dataset.py", "exec"), namespace)
    return namespace


def rows() -> list[dict]:
    """(conversations, image sizes) as InternVL's documented chat data format writes them."""
    long = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)
    return [
        {
            "image": [640, 480],
            "conversations": [["human", "<image>\nWhat is in the picture?"], ["gpt", "A cat."]],
        },
        {"image": [448, 448], "conversations": [["human", "<image>\nDescribe."], ["gpt", long]]},
        {
            "image": [[1920, 1080], [448, 672]],
            "conversations": [["human", "Image-1: <image>\nImage-2: <image>\nCompare."], ["gpt", "Two."]],
        },
        {
            "image": [[1024, 256], [256, 1024], [1000, 999]],
            "conversations": [["human", "<image><image><image>Three."], ["gpt", long]],
        },
        {
            "image": [300, 200],
            "conversations": [
                ["system", "You are a careful assistant."],
                ["human", "<image>\nRead it."],
                ["gpt", "A chart."],
                ["human", "And?"],
                ["gpt", long],
            ],
        },
        {
            "image": [2000, 3000],
            "conversations": [["human", "Intro. " + long + " <image>\nWhat?"], ["gpt", "Nothing."]],
        },
    ]


def main() -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from PIL import Image

    from vlmlint.models import load_model

    repo = Path(sys.argv[1])
    dataset = _source(repo, "internvl_chat/internvl/train/dataset.py")
    conversation = _source(repo, "internvl_chat/internvl/conversation.py")
    system = re.search(r"name='internvl2_5',.*?system_message='([^']*)'", conversation, re.S).group(1)

    class Conv:
        system_message = system

    namespace = {
        "np": np, "torch": torch, "F": F, "transformers": __import__("transformers"), "Dict": dict,
        "IGNORE_TOKEN_ID": -100, "IMG_START_TOKEN": "<img>", "IMG_END_TOKEN": "</img>",
        "IMG_CONTEXT_TOKEN": "<IMG_CONTEXT>", "get_conv_template": lambda name: Conv(),
    }  # fmt: skip
    _functions(
        dataset, ("find_closest_aspect_ratio", "dynamic_preprocess", "preprocess_internvl2_5"), namespace
    )
    dynamic_preprocess, preprocess = namespace["dynamic_preprocess"], namespace["preprocess_internvl2_5"]

    tiles = []
    for width, height in SIZES:
        image = Image.new("RGB", (width, height))
        for budget in BUDGETS:
            for thumbnail in (True, False):
                count = len(dynamic_preprocess(image, 1, budget, 448, thumbnail))
                tiles.append([width, height, budget, thumbnail, count])

    tokenizer = load_model("internvl3.5").tokenizer
    end_id = tokenizer.convert_tokens_to_ids("</img>")
    recorded = []
    for row in rows():
        sizes = row["image"] if isinstance(row["image"][0], list) else [row["image"]]
        budget = 12 if len(sizes) == 1 else max(1, 12 // len(sizes))  # the finetune script's max_num
        tokens = [
            256 * len(dynamic_preprocess(Image.new("RGB", tuple(s)), 1, budget, 448, True)) for s in sizes
        ]
        runs = []
        for limit in LIMITS:
            tokenizer.model_max_length = limit
            conversations = [{"from": who, "value": value} for who, value in row["conversations"]]
            # multi_modal_get_item (one image, a string): '<image>\n' before conversations[0] without one
            if len(sizes) == 1 and "<image>" not in conversations[0]["value"]:
                conversations[0]["value"] = "<image>\n" + conversations[0]["value"]
            out = preprocess(
                "internvl2_5", [conversations], tokenizer, tokens, group_by_length=True, num_image=len(sizes)
            )
            ids, labels = out["input_ids"][0], out["labels"][0]
            runs.append(
                {
                    "max_seq_length": limit,
                    "length": int(ids.shape[0]),
                    "img_end": int((ids == end_id).sum()),
                    "labels": int((labels != -100).sum()),
                }
            )
        recorded.append({**row, "image_tokens": tokens, "runs": runs})
    OUT.write_text(
        json.dumps({"commit": COMMIT, "system_message": system, "tiles": tiles, "rows": recorded}, indent=1)
        + "\n"
    )
    print(f"{OUT}: {len(tiles)} dynamic_preprocess cases, {len(recorded)} rows x {len(LIMITS)} limits")


if __name__ == "__main__":
    main()
