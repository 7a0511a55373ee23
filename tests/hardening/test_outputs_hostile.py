"""Outputs: special files and folders as report targets, tampered baselines and checkpoints,
interruptions and closed pipes, untrusted file names in every report format.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.hardening.conftest import MODEL, run_guarded, shape
from vlmlint.report.formats import FORMAT_NAMES

SCAN = ("scan", "--model", MODEL, "-q", "--verify", "0", "--jobs", "1")
ROW = {
    "id": "r",
    "image": "missing.jpg",
    "conversations": [{"from": "human", "value": "<image>\nhi"}, {"from": "gpt", "value": "ok"}],
}
EVIL = "evil\n::error file=x::pwned.jsonl"  # a newline and a GitHub Actions command in a file name
BYTE = b"bad\xffname.jsonl"  # a byte that is not UTF-8 in a file name


def _dataset(tmp_path: Path) -> Path:
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "rows.jsonl").write_text("not json\n" + json.dumps(ROW) + "\n", encoding="utf-8")
    return dataset


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.jsonl").write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    return outside


def _guarded(tmp_path: Path, *args: str, **kwargs):
    outside = _outside(tmp_path)
    run = run_guarded(*SCAN, *args, cwd=tmp_path, **kwargs)
    assert run.touched(outside) == []
    assert run.peak_mb < 1024
    return run


# ---- special files and folders as output targets -----------------------------------------------


def _target(tmp_path: Path, kind: str) -> str:
    if kind == "/dev/null":
        return "/dev/null"
    if kind == "FIFO without a reader":
        os.mkfifo(tmp_path / "fifo")
        return str(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    return str(tmp_path / "folder")


@pytest.mark.parametrize("option", ["-o", "--report", "--write-baseline"])
@pytest.mark.parametrize("kind", ["/dev/null", "FIFO without a reader", "an existing folder"])
def test_special_targets(tmp_path, record, option, kind):
    dataset = _dataset(tmp_path)
    target = _target(tmp_path, kind)
    run = _guarded(tmp_path, str(dataset), "--format", "json", option, target, timeout=60)
    if kind == "/dev/null":
        assert run.exit_code in (0, 1), run.stderr
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # written to, not replaced by a file
        outcome = (
            f"written directly (no temporary file, no rename), exit {run.exit_code}; /dev/null stays a device"
        )
    else:
        assert run.exit_code == 2, run.stderr
        line = run.error_line(tmp_path)
        assert target.replace(str(tmp_path), "<tmp>") in line
        outcome = f"exit 2: {shape(line)}"
        if kind == "FIFO without a reader":
            assert stat.S_ISFIFO(os.stat(target).st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".vlmlint-")]  # no temporary file
    record("outputs", f"{option} {kind}", outcome)


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/fd/1"])
def test_stdout_as_output(tmp_path, record, target):
    dataset = _dataset(tmp_path)
    run = _guarded(tmp_path, str(dataset), "--format", "json", "-o", target, timeout=60)
    assert run.exit_code == 1, run.stderr
    assert run.codes() == ["VLM101", "VLM103"]  # the report arrived on stdout
    record("outputs", f"-o {target}", "the report is written to the process's stdout (a pipe here), exit 1")


def test_fifo_with_a_reader(tmp_path, record):
    dataset = _dataset(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read():
        with open(fifo, "rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    run = _guarded(tmp_path, str(dataset), "--format", "sarif", "-o", str(fifo), timeout=60)
    reader.join(10)
    assert run.exit_code == 1, run.stderr
    assert json.loads(received[0])["version"] == "2.1.0"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    record(
        "outputs",
        "-o a FIFO with a reader",
        "the reader receives the whole report; the FIFO stays a FIFO; exit 1",
    )


# ---- baselines ---------------------------------------------------------------------------------


def _baseline(tmp_path: Path, case: str) -> str:
    path = tmp_path / "baseline.json"
    if case == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif case == "FIFO":
        os.mkfifo(path)
    elif case == "folder":
        path.mkdir()
    elif case == "300 MB file (sparse)":
        with open(path, "wb") as handle:
            handle.truncate(300 * 2**20)
    elif case == "not JSON":
        path.write_text("{not json", encoding="utf-8")
    elif case == "a JSON list":
        path.write_text("[1, 2]", encoding="utf-8")
    elif case == "an entry with count true":
        path.write_text(json.dumps({"version": 1, "findings": [{"fingerprint": "x", "count": True}]}))
    elif case == "an entry that is a number":
        path.write_text(json.dumps({"version": 1, "findings": [7]}))
    return str(path)


@pytest.mark.parametrize(
    "case",
    [
        "symlink to /dev/zero",
        "FIFO",
        "folder",
        "300 MB file (sparse)",
        "not JSON",
        "a JSON list",
        "an entry with count true",
        "an entry that is a number",
    ],
)
def test_hostile_baseline(tmp_path, record, case):
    dataset = _dataset(tmp_path)
    run = _guarded(tmp_path, str(dataset), "--baseline", _baseline(tmp_path, case), timeout=60)
    assert run.exit_code == 2, run.stderr
    line = run.error_line(tmp_path)
    assert "baseline <tmp>/baseline.json" in line
    record("outputs", f"--baseline {case}", f"exit 2: {shape(line)}")


# ---- tampered checkpoints ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def genuine_checkpoint(tmp_path_factory) -> Path:
    """A genuine checkpoint, made once: a scan of two datasets whose second is unreadable keeps it."""
    folder = tmp_path_factory.mktemp("checkpoint")
    dataset = _dataset(folder)
    rows = dataset / "rows.jsonl"
    rows.write_text("".join(json.dumps({**ROW, "id": f"r{i}"}) + "\n" for i in range(50)) + "not json\n")
    run = _guarded(folder, *_checkpoint_args(folder), timeout=90)
    assert run.exit_code == 2 and (folder / "ck.json").exists(), run.stderr
    return folder


def _checkpoint_args(folder: Path) -> list[str]:
    dataset = folder / "dataset"
    return [str(dataset / "rows.jsonl"), str(dataset / "gone.jsonl"), "--resume", str(folder / "ck.json"),
            "--format", "json"]  # fmt: skip


def _checkpoint(tmp_path: Path, genuine: Path) -> tuple[Path, list[str]]:
    """A copy of the genuine checkpoint and its dataset (the key holds the dataset's path: same one)."""
    import shutil

    for name in ("ck.json", "ck.json.findings"):
        shutil.copyfile(genuine / name, tmp_path / name)
    args = _checkpoint_args(genuine)
    args[args.index("--resume") + 1] = str(tmp_path / "ck.json")
    return tmp_path / "ck.json", args


def _tamper(path: Path, case: str) -> None:
    state = json.loads(path.read_text())
    log = Path(str(path) + ".findings")
    if case == "state is a list":
        path.write_text("[1, 2, 3]")
        return
    if case == "state is a number":
        path.write_text("93009")
        return
    if case == "summary missing":
        del state["summary"]
    elif case == "findings_bytes negative":
        state["findings_bytes"] = -5
    elif case == "findings_bytes beyond the log":
        state["findings_bytes"] = 10**12
    elif case == "findings_bytes a string":
        state["findings_bytes"] = "12"
    elif case == "a log line that is not JSON":
        log.write_bytes(b"garbage\n" + log.read_bytes()[8:])
    elif case == "an unknown severity in the log":
        log.write_bytes(log.read_bytes().replace(b'"severity":"error"', b'"severity":"fatal"', 1))
    elif case == "an unknown severity in the totals":
        state["summary"]["by_severity"]["fatal"] = 1
    elif case == "row counts raised (93,009 rows of a 51-row file)":
        state["summary"]["samples"] = 93009
        state["position"] = {"dataset_index": 0, "rows": 93009}
    elif case == "finding counts raised":
        state["summary"]["by_code"]["VLM103"] = 93009
    elif case == "seq_lens not base64":
        state["summary"]["seq_lens"] = "!!!"
    elif case == "seq_lens cut to 7 bytes":
        state["summary"]["seq_lens"] = base64.b64encode(b"1234567").decode()
    elif case == "position a list":
        state["position"] = [0, 0]
    path.write_text(json.dumps(state))


@pytest.mark.parametrize(
    "case",
    [
        "state is a list",
        "state is a number",
        "summary missing",
        "findings_bytes negative",
        "findings_bytes beyond the log",
        "findings_bytes a string",
        "a log line that is not JSON",
        "an unknown severity in the log",
        "an unknown severity in the totals",
        "row counts raised (93,009 rows of a 51-row file)",
        "finding counts raised",
        "seq_lens not base64",
        "seq_lens cut to 7 bytes",
        "position a list",
    ],
)
def test_tampered_checkpoint(tmp_path, record, genuine_checkpoint, case):
    path, args = _checkpoint(tmp_path, genuine_checkpoint)
    _tamper(path, case)
    run = _guarded(tmp_path, *args, timeout=60)
    assert run.exit_code == 2, run.stderr
    line = run.error_line(tmp_path)
    assert "ck.json" in line and ("not a valid vlmlint checkpoint" in line or "start over" in line), line
    assert "93,009" not in run.stdout and "93009" not in run.stdout  # never a wrong total
    record("outputs", f"--resume checkpoint: {case}", f"exit 2: {shape(line)}")


def test_untampered_checkpoint_resumes(tmp_path, record, genuine_checkpoint):
    path, args = _checkpoint(tmp_path, genuine_checkpoint)
    run = _guarded(tmp_path, *args, timeout=60)
    assert run.exit_code == 1, run.stderr  # both datasets are behind the checkpoint: its report
    assert run.report["summary"]["samples"] == 51
    assert run.codes() == ["VLM101", "VLM103"]
    record(
        "outputs",
        "--resume an intact checkpoint",
        "resumed: the 51 rows and the findings of the first run, exit 1",
    )


@pytest.mark.parametrize("kind", ["/dev/null", "FIFO", "folder"])
def test_special_checkpoint(tmp_path, record, kind):
    dataset = _dataset(tmp_path)
    target = {"/dev/null": "/dev/null", "FIFO": str(tmp_path / "ck"), "folder": str(tmp_path / "ck")}[kind]
    if kind == "FIFO":
        os.mkfifo(target)
    elif kind == "folder":
        os.mkdir(target)
    run = _guarded(tmp_path, str(dataset), "--resume", target, timeout=60)
    assert run.exit_code == 2, run.stderr
    record("outputs", f"--resume {kind}", f"exit 2: {shape(run.error_line(tmp_path))}")


# ---- interruptions and pipes -------------------------------------------------------------------

# vlmlint's main() with a hook: a SIGINT sent to itself at a chosen moment (deterministic, no sleep).
_INTERRUPT = """
import os, signal, sys
when = sys.argv.pop(1)
if when == "scan":  # after the second row: the scan is interrupted, the report is partial
    import vlmlint.aggregate as summary
    real_add = summary.Summary.add
    def add(self, outcome):
        real_add(self, outcome)
        if self.samples == 2:
            os.kill(os.getpid(), signal.SIGINT)
    summary.Summary.add = add
else:  # while the report is being built
    import vlmlint.report.json_report as json_report
    real = json_report.build_report
    def build_report(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)
    json_report.build_report = build_report
    import vlmlint.report
    vlmlint.report.build_report = build_report
sys.argv = ["vlmlint", *sys.argv[1:]]
from vlmlint.cli import main
main()
"""


def _interrupted(tmp_path: Path, when: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", _INTERRUPT, when, *SCAN, *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _many_rows(tmp_path: Path) -> Path:
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "rows.jsonl").write_text("".join(json.dumps({**ROW, "id": f"r{i}"}) + "\n" for i in range(20)))
    return dataset


MARKERS = {
    "html": lambda text: "INCOMPLETE: interrupted by SIGINT after 2 rows" in text,
    "github": lambda text: text.splitlines()[-1].startswith("::warning title=vlmlint scan incomplete::"),
    "junit": lambda text: 'errors="1"' in text and "vlmlint scan incomplete" in text,
    "gitlab": lambda text: json.loads(text)[-1]["check_name"] == "vlmlint-incomplete",
    "jsonl": lambda text: json.loads(text.splitlines()[-1])["incomplete"]["rows_scanned"] == 2,
    "text": lambda text: "INCOMPLETE: interrupted by SIGINT" in text,
    "json": lambda text: json.loads(text)["incomplete"]["rows_scanned"] == 2,
    "sarif": lambda text: "interrupted by SIGINT" in text,
}


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_interrupted_report_is_marked(tmp_path, record, fmt):
    dataset = _many_rows(tmp_path)
    out = tmp_path / f"out.{fmt}"
    done = _interrupted(tmp_path, "scan", str(dataset), "--format", fmt, "-o", str(out))
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert MARKERS[fmt](out.read_text(encoding="utf-8")), out.read_text()[-500:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset", out.name]  # no temporary file
    how = {
        "html": "a banner",
        "github": "a final ::warning line",
        "junit": "an <error> test case and an incomplete property",
        "gitlab": "a vlmlint-incomplete entry",
        "jsonl": "a final {incomplete: ...} record",
        "text": "an INCOMPLETE line",
        "json": "an incomplete object",
        "sarif": "a failed invocation with the reason",
    }[fmt]
    record(
        "outputs",
        f"SIGINT during the scan, --format {fmt}",
        f"exit 130; the partial report is marked incomplete: {how}",
    )


def test_interrupt_while_the_report_is_built(tmp_path, record):
    dataset = _many_rows(tmp_path)
    out = tmp_path / "out.html"
    done = _interrupted(tmp_path, "report", str(dataset), "--format", "html", "-o", str(out))
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset"]  # no report, no temporary file
    line = done.stderr.strip().splitlines()[-1]
    record(
        "outputs",
        "SIGINT while the report is being built (-o)",
        f"exit 130, no report and no temporary file: {line}",
    )


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_closed_pipe(tmp_path, record, fmt):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "rows.jsonl").write_text("not json\n" * 3000)  # 3,000 findings: more than a pipe holds
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "vlmlint.cli", *SCAN, str(dataset), "--format", fmt, "--table-rows", "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    process.stdout.read(100)  # `| head -c 100`
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=90) == 1, stderr  # as the report would have: findings at error level
    assert stderr.strip() == "", stderr
    record(
        "outputs",
        f"--format {fmt} into a pipe closed after 100 bytes",
        "ends quietly: no message, exit 1 (as the report would have)",
    )


# ---- untrusted names in every format -----------------------------------------------------------


def _hostile_names(tmp_path: Path) -> Path:
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for name in (os.fsencode(EVIL), BYTE):
        with open(os.path.join(os.fsencode(dataset), name), "w", encoding="utf-8") as handle:
            handle.write("not json\n" + json.dumps(ROW) + "\n")
    return dataset


def _clean_stream(text: str) -> None:
    assert "pwned" not in text or "\n::error file=x" not in text
    assert not any(line.startswith("::error file=x") for line in text.splitlines())
    assert "\ufffd" not in text  # the byte is shown as \xff, not lost
    assert not any(ch in text for ch in "\x00\x1b\r\x7f")


# stdout with --report (the JSON report file) for each format; -o where the writer differs (rich, a file).
CASES = [(fmt, "stdout and --report") for fmt in FORMAT_NAMES]
CASES += [("text", "-o"), ("github", "-o"), ("json", "--write-baseline")]


@pytest.mark.parametrize(("fmt", "where"), CASES)
def test_untrusted_names(tmp_path, record, fmt, where):
    dataset = _hostile_names(tmp_path)
    target = tmp_path / "target"
    extra = {"stdout and --report": ["--report", str(target)], "-o": ["-o", str(target)],
             "--write-baseline": ["--write-baseline", str(target)]}[where]  # fmt: skip
    run = _guarded(tmp_path, str(dataset), "--format", fmt, *extra, timeout=90)
    assert run.exit_code == (0 if where == "--write-baseline" else 1), run.stderr
    _clean_stream(run.stdout)
    _clean_stream(run.stderr)
    written = target.read_bytes().decode("utf-8")  # valid UTF-8
    assert "\\xff" in written
    if where == "-o":
        _clean_stream(written)
    else:
        json.loads(written)
    if where != "--write-baseline" and fmt in ("json", "sarif", "gitlab"):
        json.loads(run.stdout or written)
    shown = written if where == "-o" else run.stdout
    if fmt == "github" and where != "--write-baseline":
        commands = [line for line in shown.splitlines() if line.startswith("::")]
        assert commands and all(
            line.startswith(("::error file=dataset/", "::warning", "::notice")) for line in commands
        )
    record(
        "outputs",
        f"file names holding a newline + '::error' and a byte 0xff, --format {fmt}, report on {where}",
        "no traceback; names shown escaped (\\n, \\xff), valid UTF-8; no line of stdout or stderr starts with an injected ::error",
    )
