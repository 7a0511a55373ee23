"""Helpers of the hardening suite: time bounds, the CLI and readers in a subprocess, the outcome records."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import PROCESSORS, ROOT
from tests.hardening import reliability

MODEL = str(PROCESSORS / "qwen2-vl-small")

# Fuzzing: bounded and reproducible (derandomize: CI and the generated page see the same examples).
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DESELECTED: list[str] = []  # nodeids deselected this session (-k, --deselect): the page check is partial


def pytest_deselected(items):
    DESELECTED.extend(item.nodeid for item in items)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(reliability.WRITE_ENV) and exitstatus == 0 and reliability.RECORDS:
        reliability.DOC.write_text(reliability.render(reliability.RECORDS), encoding="utf-8")


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str = "the case"):
    """Fail (not block) when the body runs longer than `seconds`: SIGALRM interrupts blocking calls too."""

    def expire(signum, frame):
        raise Hang(f"{what} did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except Hang as exc:
        pytest.fail(str(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _limit_memory(megabytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes * 2**20, megabytes * 2**20))

    return apply


@dataclass(frozen=True)
class CliRun:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict:
        return json.loads(self.stdout)

    def codes(self) -> list[str]:
        return sorted({finding["code"] for finding in self.report["findings"]})

    def error_line(self, tmp: Path | None = None) -> str:
        """The last stderr line, temporary paths replaced: what the user reads for an exit 2."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
        return text.replace(str(tmp), "<tmp>") if tmp is not None else text


def run_cli(*args: str, timeout: float = 90, cwd: Path | None = None) -> CliRun:
    """`vlmlint ARGS` in a subprocess, so that a hang fails the test instead of blocking the suite."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vlmlint.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or ROOT,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"vlmlint {' '.join(args)} did not finish within {timeout} s")
    assert "Traceback" not in done.stderr, done.stderr
    return CliRun(done.returncode, done.stdout, done.stderr)


_READER = textwrap.dedent(
    """
    import json, sys
    from vlmlint.readers import DatasetError, iter_samples
    rows = []
    try:
        for sample in iter_samples(sys.argv[1]):
            rows.append([sample.line, sample.id, [[p.code, p.message] for p in sample.problems]])
        error = None
    except DatasetError as exc:
        error = str(exc)
    # VmHWM, not ru_maxrss: the child was forked from pytest (preexec_fn) and ru_maxrss keeps the
    # forked image's size across exec; VmHWM belongs to the new program's memory only.
    peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) // 1024
    print(json.dumps({"rows": rows, "error": error, "peak_mb": peak}))
    """
)


@dataclass(frozen=True)
class ReadResult:
    rows: list  # [line, id, [[code, message], ...]] per sample
    error: str | None  # a DatasetError's message
    peak_mb: int  # the reading process's peak resident memory


def read_isolated(path: Path, *, timeout: float = 60, memory_mb: int = 3072) -> ReadResult:
    """Read a dataset with vlmlint's readers in a subprocess with a time and an address-space limit."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _READER, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=_limit_memory(memory_mb),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {path.name} did not finish within {timeout} s")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    return ReadResult(result["rows"], result["error"], result["peak_mb"])


def problem_codes(rows: list) -> list[str]:
    return sorted({code for _, _, problems in rows for code, _ in problems})


def shape(message: str, tmp: Path | None = None) -> str:
    """A message as the page shows it: temporary paths replaced, quotes that would break the table kept."""
    if tmp is not None:
        message = message.replace(str(tmp), "<tmp>")
    return message.replace("|", "/")


@pytest.fixture(scope="session")
def record():
    return reliability.record


# ---- the guarded run: vlmlint in a subprocess whose opens, listings and program starts are audited ----

_GUARD = textwrap.dedent(
    r"""
    import json, os, sys
    log = os.open(os.environ.pop("VLMLINT_AUDIT_LOG"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    # Opens under the interpreter's own folders (stdlib, site-packages) are imports: not recorded.
    quiet = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    STARTS = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "pty.spawn",
              "os.startfile", "ctypes.dlopen"}
    def write(kind, value):
        os.write(log, (json.dumps([kind, os.getpid(), value]) + "\n").encode())
    def hook(event, args):
        if event == "open" or event in ("os.listdir", "os.scandir"):
            path = args[0] if args else None
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if isinstance(path, str) and path:
                full = os.path.abspath(path)
                if not full.startswith(quiet):
                    write("open" if event == "open" else "list", full)
        elif event in STARTS:
            if event == "ctypes.dlopen":
                return
            write("start", repr(args)[:500])
    sys.addaudithook(hook)
    def peak():
        import resource
        own = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        write("peak_kb", max(own, children))
    import atexit
    atexit.register(peak)
    sys.argv = ["vlmlint", *sys.argv[1:]]
    from vlmlint.cli import main
    main()
    """
)

# Programs an image library might start: on PATH in a guarded run, each records that it was called.
_DECOYS = (
    "gs",
    "gsc",
    "gswin32c",
    "gswin64c",
    "convert",
    "magick",
    "identify",
    "ffmpeg",
    "ffprobe",
    "xdg-open",
)


@dataclass(frozen=True)
class GuardedRun:
    exit_code: int
    stdout: str
    stderr: str
    opened: tuple[str, ...]  # absolute paths opened (outside the interpreter's folders), any process
    listed: tuple[str, ...]  # folders listed
    started: tuple[str, ...]  # programs started (audit events and decoys called)
    peak_mb: int  # peak resident memory of vlmlint and its workers

    @property
    def report(self) -> dict:
        return json.loads(self.stdout)

    def codes(self) -> list[str]:
        return sorted({finding["code"] for finding in self.report["findings"]})

    def error_line(self, tmp: Path | None = None) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
        return text.replace(str(tmp), "<tmp>") if tmp is not None else text

    def touched(self, folder: Path) -> list[str]:
        """Paths under `folder` (resolved) that were opened or listed."""
        prefix = os.path.realpath(folder)
        return [
            path
            for path in (*self.opened, *self.listed)
            if os.path.realpath(path) == prefix or os.path.realpath(path).startswith(prefix + os.sep)
        ]


def run_guarded(
    *args: str,
    timeout: float = 120,
    cwd: Path | None = None,
    memory_mb: int | None = None,
    env: dict | None = None,
) -> GuardedRun:
    """`vlmlint ARGS` in a subprocess with every open, listing and program start recorded.

    A guarded run also asserts what every hostile case must give: an exit code 0, 1 or 2, no
    traceback, no "internal error", and no program started. Callers check `touched(outside)`,
    `peak_mb` and the outcome. `memory_mb` sets an address-space limit (RLIMIT_AS) as a backstop.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vlmlint-guard-") as scratch:
        scratch_path = Path(scratch)
        decoys = scratch_path / "bin"
        decoys.mkdir()
        called = scratch_path / "called"
        for name in _DECOYS:
            program = decoys / name
            program.write_text(f'#!/bin/sh\necho {name} "$@" >> "{called}"\nexit 1\n')
            program.chmod(0o755)
        audit = scratch_path / "audit.log"
        run_env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "PATH": f"{decoys}{os.pathsep}{os.environ.get('PATH', '')}",
            "VLMLINT_AUDIT_LOG": str(audit),
            **(env or {}),
        }
        try:
            done = subprocess.run(
                [sys.executable, "-c", _GUARD, *args],
                capture_output=True,
                timeout=timeout,
                cwd=cwd or ROOT,
                env=run_env,
                preexec_fn=_limit_memory(memory_mb) if memory_mb else None,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"vlmlint {' '.join(args)} did not finish within {timeout} s")
        opened, listed, started, peak_kb = [], [], [], 0
        for line in (
            audit.read_text(encoding="utf-8", errors="replace").splitlines() if audit.exists() else ()
        ):
            try:
                kind, _pid, value = json.loads(line)
            except ValueError:
                continue
            if kind == "open":
                opened.append(value)
            elif kind == "list":
                listed.append(value)
            elif kind == "start":
                started.append(value)
            elif kind == "peak_kb":
                peak_kb = max(peak_kb, int(value))
        if called.exists():
            started.extend(called.read_text().splitlines())
        ignored = (str(scratch_path),)
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    run = GuardedRun(
        done.returncode,
        stdout,
        stderr,
        tuple(p for p in opened if not p.startswith(ignored)),
        tuple(p for p in listed if not p.startswith(ignored)),
        tuple(started),
        peak_kb // 1024,
    )
    assert run.exit_code in (0, 1, 2), f"exit {run.exit_code}: {stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "internal error" not in stderr, stderr[-3000:]
    assert not run.started, f"programs started: {run.started}"
    return run
