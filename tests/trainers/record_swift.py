"""Record what ms-swift's own template does with the fixture rows: the truth tests/test_pipeline_swift.py
compares `--pipeline swift` with. Not a test: it needs torch and ms-swift, which vlmlint does not install.

    python -m venv /tmp/venv-swift
    /tmp/venv-swift/bin/pip install torch ms-swift==4.6.0 qwen_vl_utils orjson ijson
    /tmp/venv-swift/bin/python tests/trainers/record_swift.py   # from the repository root

For each row of the fixture datasets, each max_length in MAX_LENGTHS, each template truncation
strategy (raise: what `--truncation_strategy delete` hands the template, left, right) and, with left
and right, each loss_scale (default, last_round, all: which tokens are labels), the row goes
through `Template.encode` in train mode, as `swift sft` encodes it: MaxLengthError or the encoded
input_ids and labels. The template's image token id is set to the fixture tokenizer's (the fixture's
small vocabulary numbers Qwen's tokens differently from the real model, whose ids the template holds). The Qwen2-VL template imports qwen_vl_utils, which imports torchvision for
videos only; a CPU-only torch cannot load PyPI's torchvision, so a stand-in module is installed
(images go through PIL only). vlmlint's reader supplies the rows.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _torchvision_stand_in() -> None:
    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0.0"
    tv.io = types.ModuleType("torchvision.io")
    tv.transforms = types.ModuleType("torchvision.transforms")
    tv.transforms.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic", BILINEAR="bilinear")
    tv.transforms.functional = types.ModuleType("torchvision.transforms.functional")
    sys.modules.update(
        {
            "torchvision": tv,
            "torchvision.io": tv.io,
            "torchvision.transforms": tv.transforms,
            "torchvision.transforms.functional": tv.transforms.functional,
        }
    )


# swift, transformers and datasets first: they must find no torchvision (PIL image backends)
from swift.model import get_processor  # noqa: E402
from swift.template import MaxLengthError, get_template  # noqa: E402
from swift.version import __version__ as swift_version  # noqa: E402

_torchvision_stand_in()


def _no_video_processor() -> None:
    """The processor loads without its video processor (it needs torchvision; rows hold images only)."""
    from transformers import ProcessorMixin
    from transformers.models.auto import video_processing_auto

    video_processing_auto.AutoVideoProcessor.from_pretrained = classmethod(lambda cls, *args, **kwargs: None)
    check = ProcessorMixin.check_argument_for_proper_class
    ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: (
        None if arg is None else check(self, name, arg)
    )


_no_video_processor()

from vlmlint.readers import iter_samples  # noqa: E402

MODEL = "qwen2-vl"
DATASETS = ("llava/data.jsonl", "sharegpt", "openai")
MAX_LENGTHS = (18, 60, 200, 420, 1024)
STRATEGIES = ("raise", "left", "right")
LOSS_SCALES = ("default", "last_round", "all")  # the others only with left and right (they change labels)
OUT = Path(__file__).with_name("swift_truth.json")


def _row(sample) -> dict:
    messages = [
        {
            "role": message.role.value,
            "content": "".join("<image>" if part.is_image else part.text for part in message.parts),
        }
        for message in sample.messages
    ]
    return {"messages": messages, "images": [ref.path for ref in sample.images]}


def _encode(template, row: dict) -> dict:
    try:
        encoded = template.encode(json.loads(json.dumps(row)))
    except MaxLengthError as exc:
        return {"error": f"MaxLengthError: {exc}"}
    ids = list(encoded["input_ids"])
    labels = list(encoded["labels"])
    image_id = template.processor.image_token_id
    return {
        "length": len(ids),
        "labels": sum(label != -100 for label in labels),
        "image_tokens": ids.count(image_id),
    }


def main() -> None:
    processor = get_processor(
        str(ROOT / "fixtures/processors" / MODEL), model_type="qwen2_vl", download_model=False
    )
    templates = {
        (strategy, max_length, loss_scale): get_template(
            processor,
            max_length=max_length,
            truncation_strategy=strategy,
            loss_scale=loss_scale,
            template_type="qwen2_vl",
        )
        for strategy in STRATEGIES
        for max_length in (None, *MAX_LENGTHS)
        for loss_scale in LOSS_SCALES
        if loss_scale == "default" or strategy != "raise"
    }
    tokenizer = processor.tokenizer
    for template in templates.values():
        template.set_mode("train")
        # Qwen2VLTemplate hard-codes Qwen's ids (151655...); the fixture's small vocabulary numbers the
        # same tokens differently.
        template.image_token_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        template.video_token_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    rows = []
    for dataset in DATASETS:
        for sample in iter_samples(str(ROOT / "fixtures/datasets" / dataset)):
            if sample.problems or not sample.messages:
                continue
            row = _row(sample)
            for loss_scale in LOSS_SCALES:
                full = _encode(templates["left", None, loss_scale], row)
                for max_length in MAX_LENGTHS:
                    for strategy in STRATEGIES:
                        if (strategy, max_length, loss_scale) not in templates:
                            continue
                        got = _encode(templates[strategy, max_length, loss_scale], row)
                        rows.append(
                            {
                                "dataset": dataset,
                                "index": sample.index,
                                "max_length": max_length,
                                "strategy": strategy,
                                "loss_scale": loss_scale,
                                "full_length": full["length"],
                                "answer_tokens": full["labels"],
                                "image_tokens": full["image_tokens"],
                                **got,
                            }
                        )
    _write({"trainer": f"ms-swift {swift_version}", "model": MODEL}, rows)
    print(f"{len(rows)} cases written to {OUT}")


def _write(head: dict, rows: list[dict]) -> None:
    """The truth file: one case per line, so that a re-recording diffs case by case."""
    body = ",\n".join(json.dumps(row) for row in rows)
    OUT.write_text(json.dumps(head)[:-1] + ', "rows": [\n' + body + "\n]}\n")


if __name__ == "__main__":
    main()
