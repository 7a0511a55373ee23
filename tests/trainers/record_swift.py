"""Record what ms-swift's own template does with the fixture rows: the truth tests/test_pipeline_swift.py
compares `--pipeline swift` with. Not a test: it needs torch and ms-swift, which vlmlint does not install.

    python -m venv /tmp/venv-swift
    /tmp/venv-swift/bin/pip install --no-deps ms-swift==4.6.0 qwen_vl_utils
    /tmp/venv-swift/bin/pip install accelerate "peft<0.21" addict attrdict binpacking dacite einops \
        json-repair modelscope simplejson sortedcontainers zstandard
    # torch, torchvision, transformers 5.24.0 and vlmlint's own dependencies from the reference venv
    # (swift 4.6.0 asks for transformers<5.20, which pip would install instead):
    /tmp/venv-swift/bin/pip uninstall -y torch transformers tokenizers numpy triton ...   # if pulled in
    echo $PWD/.venv-reference/lib/python3.11/site-packages \
        > /tmp/venv-swift/lib/python3.11/site-packages/zz_reference.pth
    /tmp/venv-swift/bin/python tests/trainers/record_swift.py [MODEL ...]   # from the repository root

For each row of the fixture datasets, each max_length in MAX_LENGTHS, each template truncation
strategy (raise: what `--truncation_strategy delete` hands the template, left, right) and, with left
and right, each loss_scale (default, last_round, all: which tokens are labels), the row goes
through `Template.encode` in train mode, as `swift sft` encodes it: MaxLengthError or the encoded
input_ids and labels. Token ids a template hard-codes (Qwen2-VL's image_token_id, GLM-4.1V's
begin_of_image_token, ...) are set to the fixture tokenizer's (the fixture's small vocabulary numbers
the model's tokens differently from the real model, whose ids the template holds). Where torchvision
cannot be imported (a CPU-only torch cannot load PyPI's torchvision), a stand-in module is installed for
Qwen2-VL, whose qwen_vl_utils imports it for videos only (images go through PIL; the records are the
same with the real torchvision); the other models' processors need the real one. vlmlint's reader
supplies the rows.

MODELS: the fixture processor, swift's model_type and template_type, and the truth file of each model
(Qwen2-VL's swift_truth.json, the others swift_truth_<name>.json).
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


try:
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001 (no torchvision, or one this torch cannot load)
    _TORCHVISION = False
else:
    _TORCHVISION = True

# swift, transformers and datasets first: without torchvision they must find none (PIL image backends)
from swift.model import get_processor  # noqa: E402
from swift.template import MaxLengthError, get_template  # noqa: E402
from swift.version import __version__ as swift_version  # noqa: E402

if not _TORCHVISION:
    _torchvision_stand_in()


def _no_video_processor() -> None:
    """The processor loads without its video processor where torchvision is missing (rows hold images
    only), and without its audio feature extractor (the fixtures have none)."""
    from transformers import ProcessorMixin
    from transformers.models.auto import feature_extraction_auto, video_processing_auto

    if not _TORCHVISION:
        video_processing_auto.AutoVideoProcessor.from_pretrained = classmethod(
            lambda cls, *args, **kwargs: None
        )
    feature_extraction_auto.AutoFeatureExtractor.from_pretrained = classmethod(
        lambda cls, *args, **kwargs: None
    )
    check = ProcessorMixin.check_argument_for_proper_class
    ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: (
        None if arg is None else check(self, name, arg)
    )


_no_video_processor()

from vlmlint.readers import iter_samples  # noqa: E402

# name: (fixture folder, swift model_type, template_type, truth file)
MODELS = {
    "qwen2-vl": ("qwen2-vl", "qwen2_vl", "qwen2_vl", "swift_truth.json"),
    "llama4": ("llama-4-scout-17b-16e-instruct", "llama4", "llama4", "swift_truth_llama4.json"),
    "glm4v": ("glm-4.1v-9b-thinking", "glm4v", "glm4v", "swift_truth_glm4v.json"),
    "glm4_5v": ("glm-4.6v", "glm4v_moe", "glm4_5v", "swift_truth_glm4_5v.json"),
    "minicpmv4_6": ("minicpm-v-4.6", "minicpmv4_6", "minicpmv4_6", "swift_truth_minicpmv4_6.json"),
    "minicpmv4_7": ("minicpm-v-4.7", "minicpmv4_7", "minicpmv4_7", "swift_truth_minicpmv4_7.json"),
}
DATASETS = ("llava/data.jsonl", "sharegpt", "openai")
MAX_LENGTHS = (18, 60, 200, 420, 1024)
STRATEGIES = ("raise", "left", "right")
LOSS_SCALES = ("default", "last_round", "all")  # the others only with left and right (they change labels)


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
    except Exception as exc:  # noqa: BLE001 (swift's own bugs: `swift sft` skips the row, --strict stops)
        return {"error": f"{type(exc).__name__}: {exc}"}
    ids = list(encoded["input_ids"])
    labels = list(encoded["labels"])
    protected = set(template.placeholder_tokens)  # what _truncate keeps: the image (and video) token ids
    return {
        "length": len(ids),
        "labels": sum(label != -100 for label in labels),
        "image_tokens": sum(token in protected for token in ids),
    }


# Token ids templates hard-code (the real model's), and the fixture token each stands for.
_HARD_CODED = {
    "begin_of_image_token": "<|begin_of_image|>",
    "end_of_image_token": "<|end_of_image|>",
    "begin_of_video_token": "<|begin_of_video|>",
    "end_of_video_token": "<|end_of_video|>",
}


def main(name: str) -> None:
    folder, model_type, template_type, out = MODELS[name]
    processor = get_processor(
        str(ROOT / "fixtures/processors" / folder), model_type=model_type, download_model=False
    )
    templates = {
        (strategy, max_length, loss_scale): get_template(
            processor,
            max_length=max_length,
            truncation_strategy=strategy,
            loss_scale=loss_scale,
            template_type=template_type,
        )
        for strategy in STRATEGIES
        for max_length in (None, *MAX_LENGTHS)
        for loss_scale in LOSS_SCALES
        if loss_scale == "default" or strategy != "raise"
    }
    tokenizer = processor.tokenizer
    for template in templates.values():
        template.set_mode("train")
        # Qwen2VLTemplate hard-codes Qwen's ids (151655...), GLM4VTemplate GLM's (151339...); the fixture's
        # small vocabulary numbers the same tokens differently.
        for attribute, token in _HARD_CODED.items():
            if hasattr(template, attribute):
                setattr(template, attribute, tokenizer.convert_tokens_to_ids(token))
        if isinstance(getattr(type(template), "image_token_id", None), int):
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
    head = {"trainer": f"ms-swift {swift_version}", "model": folder}
    if name != "qwen2-vl":  # the first truth file's head is kept as it was recorded
        head["template"] = template_type
    path = Path(__file__).with_name(out)
    _write(path, head, rows)
    print(f"{len(rows)} cases written to {path}")


def _write(path: Path, head: dict, rows: list[dict]) -> None:
    """The truth file: one case per line, so that a re-recording diffs case by case."""
    body = ",\n".join(json.dumps(row) for row in rows)
    path.write_text(json.dumps(head)[:-1] + ', "rows": [\n' + body + "\n]}\n")


if __name__ == "__main__":
    for model_name in sys.argv[1:] or MODELS:
        main(model_name)
