"""Record what Qwen's official fine-tune code (qwen-vl-finetune) does with a set of rows: the truth
tests/test_pipeline_qwen_vl_finetune.py compares `--pipeline qwen-vl-finetune` with. Not a test: it needs
torch and Qwen's source, which vlmlint does not ship.

    # QwenLM/Qwen3-VL (the renamed QwenLM/Qwen2.5-VL) at commit 96588727e44c78b25ba03ea03b8e12f7e64fd0da
    # (a clone, or the git directory the search tool's fetch writes), and a venv with torch
    .venv-reference/bin/python tests/trainers/record_qwen_vl_finetune.py /path/to/Qwen3-VL     # transformers 5.24
    # the README's transformers 4.57 (a target folder put before the venv's own packages):
    #   pip install --no-deps --target /tmp/tf457 transformers==4.57.1 tokenizers==0.22.1 huggingface_hub==0.36.0
    PYTHONPATH=/tmp/tf457 .venv-reference/bin/python tests/trainers/record_qwen_vl_finetune.py /path/to/Qwen3-VL

Each run adds the installed transformers' records to tests/trainers/qwen_vl_finetune_truth.json.

The module qwen-vl-finetune/qwenvl/data/data_processor.py is executed as the source has it (by its AST,
less its relative imports, which are given from qwenvl/data/rope2d.py, also executed from the source):
`update_processor_pixels` with scripts/sft.sh's --max_pixels 50176 --min_pixels 784 on each fixture
processor (AutoProcessor.from_pretrained, as train_qwen.py loads it: the qwen2-vl, qwen2.5-vl and qwen3-vl
profiles' folders, which are the fixture folders' processor files with the real tokenizers, and
fixtures/processors/qwen2-vl itself, whose synthetic tokenizer lacks the ids the script hard-codes), then for each row
`LazySupervisedDataset.__getitem__` (its __init__ skipped: it reads a dataset registry; time.sleep
stubbed), whose `_get_item` runs `_build_messages` and `preprocess_qwen_visual` (the processor's
apply_chat_template on the row's images), and the two collators of make_supervised_data_module:
`DataCollatorForSupervisedDataset(processor.tokenizer)` (data_flatten False) with that tokenizer's
model_max_length set to each limit (as a checkpoint whose tokenizer_config.json says so), and
`FlattenedDataCollatorForSupervisedDataset` (data_flatten True, sft.sh's). Recorded: each image's
image_grid_thw tokens, which row __getitem__ returned (a row that raises is replaced by the next one),
the length of input_ids, the label count, and after each cut the length, labels and image tokens kept.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

COMMIT = "96588727e44c78b25ba03ea03b8e12f7e64fd0da"
OUT = Path(__file__).with_name("qwen_vl_finetune_truth.json")
# The built-in profiles (the fixture folders' processor files with each checkpoint's real tokenizer, whose
# ids the script hard-codes), and a fixture folder whose small synthetic tokenizer has other ids.
PROCESSORS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "fixtures/processors/qwen2-vl")
MIN_PIXELS, MAX_PIXELS = 784, 50176  # scripts/sft.sh
LIMITS = [40, 60, 80, 100, 150, 200, 300, 400, 600]
LONG = " ".join(["The quick brown fox jumps over the lazy dog."] * 12)


def rows() -> list[dict]:
    """Rows in the README's "Custom Dataset Configuration" format (image sizes instead of paths)."""
    return [
        {  # README, Single Image Example
            "image": [640, 480],
            "conversations": [
                {"from": "human", "value": "<image>\nWhat's the main object in this picture?"},
                {"from": "gpt", "value": "A red apple on a wooden table"},
            ],
        },
        {  # README, Multi-Image Example
            "image": [[1920, 1080], [300, 200]],
            "conversations": [
                {"from": "human", "value": "<image>\n<image>\nWhat are the differences between these two cats?"},
                {"from": "gpt", "value": LONG},
            ],
        },
        {  # README, Grounding Example
            "image": [1024, 683],
            "conversations": [
                {"from": "human", "value": "<image>\nLocate house in this image and output the bbox coordinates in JSON format."},
                {"from": "gpt", "value": '{\n"bbox_2d": [135, 114, 1016, 672]\n}'},
            ],
        },
        {  # a system turn: the script makes every turn not from "human" an assistant turn
            "image": [10, 10],
            "conversations": [
                {"from": "system", "value": "You are a careful assistant."},
                {"from": "human", "value": "  Read it. <image>  "},
                {"from": "gpt", "value": "Nothing."},
            ],
        },
        {  # several rounds, the image in the second human turn, a tall image
            "image": [64, 4000],
            "conversations": [
                {"from": "human", "value": "Hello."},
                {"from": "gpt", "value": "Hi."},
                {"from": "human", "value": "And this?<image>"},
                {"from": "gpt", "value": LONG},
            ],
        },
        {  # text only
            "conversations": [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "Hi."}],
        },
        {  # an <image> in the gpt turn: left unused, _build_messages raises; __getitem__ takes the next row
            "image": [448, 448],
            "conversations": [
                {"from": "human", "value": "Draw a square."},
                {"from": "gpt", "value": "<image>"},
            ],
        },
        {  # the next row, which replaces it
            "image": [448, 448],
            "conversations": [{"from": "human", "value": "<image>What?"}, {"from": "gpt", "value": "A square."}],
        },
    ]  # fmt: skip


def _source(repo: Path, path: str) -> str:
    if (repo / path).is_file():
        return (repo / path).read_text()
    return subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _module(source: str, filename: str, namespace: dict) -> dict:
    """The module's statements less its relative imports and its __main__ block, run in namespace."""
    tree = ast.parse(source)
    body = [
        node
        for node in tree.body
        if not (isinstance(node, ast.ImportFrom) and node.level)
        and not (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    ]
    exec(compile(ast.Module(body, []), filename, "exec"), namespace)
    return namespace


def _items(folder: Path) -> list[dict]:
    """The rows as the script's annotation file holds them, their images written into folder (data_path)."""
    from PIL import Image

    items = []
    for number, row in enumerate(rows()):
        item = {k: v for k, v in row.items() if k != "image"}
        if "image" in row:
            sizes = row["image"] if isinstance(row["image"][0], list) else [row["image"]]
            names = []
            for k, (width, height) in enumerate(sizes):
                names.append(f"r{number}_{k}.png")
                Image.new("RGB", (width, height), (k * 40, 90, 200)).save(folder / names[-1])
            item["image"] = names if len(names) > 1 else names[0]
        item["data_path"] = str(folder)
        items.append(item)
    return items


def main() -> None:
    import torch
    import transformers
    from transformers import AutoProcessor

    repo = Path(sys.argv[1])
    rope = _module(_source(repo, "qwen-vl-finetune/qwenvl/data/rope2d.py"), "rope2d.py", {})
    data = _module(
        _source(repo, "qwen-vl-finetune/qwenvl/data/data_processor.py"),
        "data_processor.py",
        {"data_list": None, **{k: v for k, v in rope.items() if k.startswith("get_rope_index")}},
    )
    data["time"] = types.SimpleNamespace(sleep=lambda seconds: None)  # __getitem__'s retries wait 1 s
    data_args = types.SimpleNamespace(
        min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, video_min_pixels=256 * 28 * 28,
        video_max_pixels=1024 * 28 * 28, video_min_frames=4, video_max_frames=8, video_fps=2,
    )  # fmt: skip
    rope_of = {
        "qwen2-vl": "get_rope_index_2",
        "qwen2.5-vl": "get_rope_index_25",
        "qwen3-vl": "get_rope_index_3",
    }
    from vlmlint.models.profiles import find_profile, profile_folder

    recorded: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        items = _items(folder)
        for name in PROCESSORS:
            path = ROOT / name if "/" in name else profile_folder(find_profile(name))
            processor = AutoProcessor.from_pretrained(path)
            processor = data["update_processor_pixels"](processor, data_args)
            dataset = object.__new__(data["LazySupervisedDataset"])
            dataset.processor, dataset.tokenizer, dataset.data_args = (
                processor,
                processor.tokenizer,
                data_args,
            )
            dataset.merge_size = getattr(processor.image_processor, "merge_size", 2)
            dataset.get_rope_index = data[rope_of[name.rsplit("/", 1)[-1]]]
            dataset.list_data_dict = [json.loads(json.dumps(item)) for item in items]
            dataset.item_fn = dataset._get_item
            image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
            base_limit = processor.tokenizer.model_max_length
            out = []
            for index in range(len(items)):
                sample = dataset[index]
                ids = sample["input_ids"][0]
                grid = sample.get("image_grid_thw")
                tokens = [int(t) for t in (grid.prod(-1) // 4).tolist()] if grid is not None else []
                try:  # the row's own item, or why the script refuses it (then __getitem__ gave the next row)
                    dataset._get_item([dataset.list_data_dict[index]])
                    raises = None
                except Exception as exc:  # noqa: BLE001
                    raises = f"{type(exc).__name__}: {exc}"
                trained = index if raises is None else min(index + 1, len(items) - 1)
                own = dataset._get_item([dataset.list_data_dict[trained]])
                assert torch.equal(own["input_ids"], sample["input_ids"])
                flat = data["FlattenedDataCollatorForSupervisedDataset"](processor.tokenizer)([sample])
                runs = []
                for limit in LIMITS:
                    processor.tokenizer.model_max_length = limit
                    batch = data["DataCollatorForSupervisedDataset"](processor.tokenizer)([sample])
                    cut = batch["input_ids"][0]
                    runs.append(
                        {
                            "model_max_length": limit,
                            "length": int(cut.shape[0]),
                            "labels": int((batch["labels"][0] != -100).sum()),
                            "image_tokens": int((cut == image_id).sum()),
                        }
                    )
                processor.tokenizer.model_max_length = base_limit
                out.append(
                    {
                        "trained": trained,
                        "raises": raises,
                        "image_tokens": tokens,
                        "length": int(ids.shape[0]),
                        "labels": int((sample["labels"][0] != -100).sum()),
                        "flattened_length": int(flat["input_ids"].shape[1]),
                        "runs": runs,
                    }
                )
            recorded[name] = out
    truth = json.loads(OUT.read_text()) if OUT.is_file() else {}
    truth.update({"commit": COMMIT, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "rows": rows()})
    truth.setdefault("transformers", {})[transformers.__version__] = recorded
    OUT.write_text(json.dumps(truth, indent=1) + "\n")
    print(
        f"{OUT}: transformers {transformers.__version__}, {len(PROCESSORS)} processors x {len(items)} rows x {len(LIMITS)} limits"
    )


if __name__ == "__main__":
    main()
