"""Record what TRL's own SFT collator does with the fixture rows: the truth tests/test_pipeline_trl.py
compares `--pipeline trl` with. Not a test: it needs torch and trl, which vlmlint does not install.

    python -m venv /tmp/venv-trl
    /tmp/venv-trl/bin/pip install torch transformers==5.24.0 trl==1.16.0 pillow orjson ijson pytest
    /tmp/venv-trl/bin/python tests/trainers/record_trl.py   # from the repository root

For each row of the fixture datasets and each max_length in MAX_LENGTHS, one batch of that row goes
through trl.trainer.sft_trainer.DataCollatorForVisionLanguageModeling, as SFTTrainer builds it for a
vision dataset (truncation_mode keep_start): the default (every token a label) says whether the row
crashes and how long it becomes; assistant_only_loss=True with TRL's training chat template for the
model (TRL's chat_templates/*_training.jinja; the model's own template where TRL has none, which then
counts every token) says how many assistant (label) tokens the cut removes. vlmlint's reader supplies
the rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402
import trl  # noqa: E402
from PIL import Image, ImageOps  # noqa: E402
from trl.chat_template_utils import get_training_chat_template  # noqa: E402
from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling  # noqa: E402

from tests.conftest import real_processor  # noqa: E402
from vlmlint.readers import iter_samples  # noqa: E402

MODELS = ("qwen2-vl", "smolvlm-256m-instruct", "gemma-3-4b-it")  # plain runs, tile markers, a BOS
DATASETS = ("llava/data.jsonl", "sharegpt", "openai")
MAX_LENGTHS = (18, 60, 200, 420, 1024)
OUT = Path(__file__).with_name("trl_truth.json")


def _messages(sample) -> list[dict]:
    return [
        {
            "role": message.role.value,
            "content": [
                {"type": "image"} if part.is_image else {"type": "text", "text": part.text}
                for part in message.parts
            ],
        }
        for message in sample.messages
    ]


def _run(collator, example) -> dict:
    try:
        out = collator([json_copy(example)])
    except (ValueError, TypeError) as exc:  # Idefics3's processor fails with a TypeError on a cut image
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    labels = out["labels"][0]
    return {"length": int(out["input_ids"].shape[1]), "labels": int((labels != -100).sum())}


def json_copy(example: dict) -> dict:
    return {"messages": json.loads(json.dumps(example["messages"])), "images": list(example["images"])}


def main() -> None:
    rows = []
    for model in MODELS:
        # The real processor class built from the fixture's files without its video processor, as the
        # tests build it (tests/conftest.py): Qwen's needs torchvision, whose compiled ops do not load
        # against a CPU-only torch.
        processor = real_processor(ROOT / "fixtures/processors" / model)
        try:
            training_template = get_training_chat_template(processor) or processor.chat_template
        except ValueError:  # TRL has no training template for it: no assistant labels to compare
            training_template = None
        print(model, "training template:", "yes" if training_template else "none")
        for dataset in DATASETS:
            for sample in iter_samples(str(ROOT / "fixtures/datasets" / dataset)):
                if sample.problems or not sample.messages:
                    continue
                rows.extend(_cases(processor, training_template, model, dataset, sample))
    _write({"trainer": f"TRL {trl.__version__}", "transformers": transformers.__version__}, rows)
    print(f"{len(rows)} cases written to {OUT}")


def _cases(processor, training_template, model, dataset, sample) -> list[dict]:
    # As a datasets Image column decodes them (datasets/features/image.py): EXIF orientation applied.
    images = [ImageOps.exif_transpose(Image.open(ref.path)).convert("RGB") for ref in sample.images]
    example = {"messages": _messages(sample), "images": images}
    full = _run(DataCollatorForVisionLanguageModeling(processor, max_length=None), example)
    answers = {}
    if training_template is not None:
        answers = _run(
            DataCollatorForVisionLanguageModeling(
                processor, max_length=None, assistant_only_loss=True, chat_template=training_template
            ),
            example,
        )
    cases = []
    for max_length in MAX_LENGTHS:
        cut = _run(DataCollatorForVisionLanguageModeling(processor, max_length=max_length), example)
        cut_answers = {}
        if training_template is not None:
            cut_answers = _run(
                DataCollatorForVisionLanguageModeling(
                    processor,
                    max_length=max_length,
                    assistant_only_loss=True,
                    chat_template=training_template,
                ),
                example,
            )
        cases.append(
            {
                "model": model,
                "dataset": dataset,
                "index": sample.index,
                "max_length": max_length,
                "full_length": full["length"],
                "length": cut.get("length"),
                "error": cut.get("error"),
                "answer_tokens": answers.get("labels"),
                "answer_tokens_kept": cut_answers.get("labels"),
            }
        )
    return cases


def _write(head: dict, rows: list[dict]) -> None:
    """The truth file: one case per line, so that a re-recording diffs case by case."""
    body = ",\n".join(json.dumps(row) for row in rows)
    OUT.write_text(json.dumps(head)[:-1] + ', "rows": [\n' + body + "\n]}\n")


if __name__ == "__main__":
    main()
