"""Every report vlmlint writes for the fixture datasets, to show a refactor changed none of them.

    python bench/report_identity.py --out /tmp/before          # on the old commit
    python bench/report_identity.py --out /tmp/after           # on the new one
    python bench/report_identity.py --compare /tmp/before /tmp/after

`--out` runs the CLI in this process (typer's CliRunner) on every dataset under fixtures/datasets/ with
the default model in each of the eight formats (and `--all-rows` JSONL, `--report FILE`, `stats` text and
JSON), and with five more processor folders in text and JSON, and writes each stdout, exit code and report
file under DIR. `--compare` lists every file that differs, byte for byte, and exits 1 if any does. The
only thing masked is the fallback's measured milliseconds per row (a timing, not a result), which no
fixture processor uses.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DATASETS = ROOT / "fixtures" / "datasets"
PROCESSORS = ROOT / "fixtures" / "processors"
FORMATS = ("text", "json", "jsonl", "sarif", "github", "gitlab", "junit", "html")
OTHER_MODELS = (
    "llava-v1.6-mistral-7b",
    "idefics3-8b-llama3",
    "gemma-3-4b-it",
    "paligemma-3b-pt-224",
    "qwen2.5-vl",
)
_TIMING = re.compile(rb"[0-9.]+ ms/row")


def _datasets() -> list[Path]:
    return sorted(p for p in DATASETS.iterdir() if p.is_dir() and not p.name.startswith("_"))


def _run(runner, app, args: list[str], out: Path, name: str) -> None:
    result = runner.invoke(app, args, catch_exceptions=False)
    data = _TIMING.sub(b"<ms>/row", result.stdout_bytes)
    (out / f"{name}.out").write_bytes(data)
    (out / f"{name}.rc").write_text(f"{result.exit_code}\n")


def write_all(out: Path) -> int:
    from typer.testing import CliRunner

    from vlmlint.cli import app

    out.mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    os.chdir(ROOT)  # reports name datasets as given: relative paths, the same in any checkout
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in _datasets():
            path = str(dataset.relative_to(ROOT))
            base = ["scan", path, "-q", "-j", "1"]
            for fmt in FORMATS:
                _run(runner, app, [*base, "-f", fmt], out, f"{dataset.name}.default.{fmt}")
                count += 1
            _run(runner, app, [*base, "-f", "jsonl", "--all-rows"], out, f"{dataset.name}.default.allrows")
            report = Path(tmp) / "report.json"
            _run(runner, app, [*base, "--report", str(report)], out, f"{dataset.name}.default.withreport")
            if report.exists():
                data = _TIMING.sub(b"<ms>/row", report.read_bytes())
                (out / f"{dataset.name}.default.report.json").write_bytes(data)
                report.unlink()
            _run(runner, app, ["stats", path, "-q"], out, f"{dataset.name}.stats.text")
            _run(runner, app, ["stats", path, "-q", "-f", "json"], out, f"{dataset.name}.stats.json")
            count += 4
            for model in OTHER_MODELS:
                folder = str((PROCESSORS / model).relative_to(ROOT))
                for fmt in ("text", "json"):
                    _run(runner, app, [*base, "-m", folder, "-f", fmt], out, f"{dataset.name}.{model}.{fmt}")
                    count += 1
        _run(
            runner, app, ["scan", "fixtures/datasets/demo", "-q", "-j", "2", "-f", "json"], out, "demo.jobs2"
        )
        count += 1
    return count


def compare(before: Path, after: Path) -> list[str]:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    return [
        name
        for name in names
        if not (before / name).exists()
        or not (after / name).exists()
        or not filecmp.cmp(before / name, after / name, shallow=False)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.out:
        print(f"{write_all(args.out)} runs written to {args.out}")
    if args.compare:
        differ = compare(*args.compare)
        total = len(list(args.compare[0].iterdir()))
        print(f"{total} files compared, {len(differ)} differ")
        for name in differ:
            print(f"  differs: {name}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
