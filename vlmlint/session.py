"""A scan session: one model, one or more datasets, one summary; never prints, never exits.

The CLI parses flags into a ScanConfig, opens a session, runs it with its progress bar and its own
per-row output, writes the report and exits with `ScanResult.exit_code`. What the session has to say
goes through the `say` callback; an error that stops the scan is a SessionError whose message is
the one line the CLI shows (exit 2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vlmlint.config import ScanConfig
    from vlmlint.records import RowOutcome

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # the shell's convention: 128 + the signal's number


class SessionError(Exception):
    """The scan cannot go on; the message is one line for the user (exit 2)."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as KeyboardInterrupt is for SIGINT."""


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While scanning, SIGTERM raises Terminated (CI runners and `timeout` send it before killing)."""
    import signal

    def terminate(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread (a test runner's worker thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def signal_name(exc: BaseException) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def signal_exit(name: str) -> int:
    return EXIT_SIGINT if name == "SIGINT" else EXIT_SIGTERM


class Progress(Protocol):
    """What a session tells about its progress (the CLI's bar; NullProgress in a script)."""

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> Any: ...
    def start(self, dataset: str) -> None: ...
    def advance(self) -> None: ...


class NullProgress(contextlib.nullcontext):
    def start(self, dataset: str) -> None:
        pass

    def advance(self) -> None:
        pass


def load_scanner(config: ScanConfig, rules=None, errors: tuple[type[Exception], ...] | None = None):
    """The Scanner for `config`; a model or pipeline that cannot be loaded is a SessionError."""
    from vlmlint.engine import Scanner
    from vlmlint.models import ModelError

    if errors is None:
        from vlmlint.pipelines import PipelineError

        errors = (ModelError, PipelineError)
    try:
        return Scanner(config) if rules is None else Scanner(config, rules=rules)
    except errors as exc:
        raise SessionError(str(exc)) from None
    except Exception as exc:  # a bug or an unexpected processor file: still exit 2, with one clear line
        raise SessionError(
            f"internal error while loading {config.model}: {type(exc).__name__}: {exc}"
        ) from None


@dataclass
class ScanResult:
    """What a session found: the summary (and what the report needs) and how the scan ended."""

    summary: Any
    scanner: Any
    config: ScanConfig
    datasets: Sequence[str]
    unreadable: list[str] = field(default_factory=list)  # datasets that could not be opened
    interrupted: str | None = None  # SIGINT or SIGTERM: the report is partial, marked incomplete
    finished: bool = False  # the scan ran to its end (a checkpoint is then removed)

    @property
    def error(self) -> str | None:
        """The line an incomplete multi-dataset scan ends with (exit 2)."""
        if not self.unreadable:
            return None
        return (
            f"{len(self.unreadable)} of {len(self.datasets)} datasets could not be read: "
            f"{', '.join(self.unreadable)}"
        )

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return signal_exit(self.interrupted)
        if self.unreadable:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.summary.failing(self.config.fail_on) else EXIT_CLEAN


class ScanSession:
    """One scan of `datasets` with `config`: model load, Ray swap, checkpoint, baseline, verify."""

    def __init__(
        self,
        config: ScanConfig,
        datasets: Sequence[str],
        *,
        baseline=None,
        verify: int = 32,
        verify_budget: float | None = None,
        resume: str | None = None,
        say: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.config = config
        self.datasets = list(datasets)
        self.baseline = baseline
        self.verify = verify
        # --verify-budget SECONDS; None: VERIFY_FRACTION of the scan's time (model load included)
        self.verify_budget = verify_budget
        self._began: float | None = None  # when load() began: the scan's time is counted from there
        self.resume = resume
        self.say = say
        self.scanner: Any = None  # the local Scanner: model, rules, context (reports and --verify read it)
        self.executor: Any = None  # what runs the scan (runner.Executor): this machine's processes, or Ray
        self.checkpoint = None
        self.start: Any = None

    def load(
        self,
        engine: str = "local",
        ray_address: str | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        """Load the model (`notice` hears its notice) and choose the executor (engine "ray": a Ray job)."""
        import time

        self._began = time.monotonic()
        self.scanner = load_scanner(self.config)
        if self.scanner.model.notice and notice is not None:
            notice(f"vlmlint: {self.scanner.model.notice}")
        from vlmlint.models.compat import untested

        past_range = untested()
        if notice is not None and past_range is not None:  # loaded past the proven range on request
            notice(f"vlmlint: warning: {past_range}")
        if engine == "ray":  # the same scan as a Ray Data job; a Ray it starts stops at exit
            from vlmlint.ray_engine import RayExecutor, RayUnavailable

            try:
                self.executor = RayExecutor(self.scanner, ray_address)
            except RayUnavailable as exc:
                raise SessionError(str(exc)) from None
        else:
            from vlmlint.runner import LocalExecutor

            self.executor = LocalExecutor(self.scanner)

    def _open_checkpoint(self, summary):
        """--resume FILE: the checkpoint and where to start; (None, start) without it."""
        from vlmlint.checkpoint import Checkpoint, CheckpointError, Position, scan_key
        from vlmlint.report.json_report import settings_record

        if not self.resume:
            return None, Position(0, 0)
        settings = settings_record(self.config, self.scanner.context.max_length)
        key = scan_key(self.datasets, settings, self.scanner.model.describe())
        checkpoint = Checkpoint(self.resume, key)
        try:
            return checkpoint, checkpoint.resume(summary, datasets=len(self.datasets))
        except CheckpointError as exc:
            raise SessionError(str(exc)) from None

    def run(
        self,
        progress: Progress | None = None,
        on_outcome: Callable[[RowOutcome], None] | None = None,
    ) -> ScanResult:
        """Scan every dataset in order (a SIGINT or SIGTERM ends it with a partial result)."""
        import time

        from vlmlint.readers import DatasetError
        from vlmlint.report import Summary
        from vlmlint.runner import LocalExecutor, ResumeMismatch
        from vlmlint.verify import ROW_PIXELS, Verifier, small_datasets

        if self._began is None:
            self._began = time.monotonic()
        if self.config.exact and self.scanner.model.exact_unavailable:
            raise SessionError(f"--exact cannot run: {self.scanner.model.exact_unavailable}")
        result = ScanResult(Summary(), self.scanner, self.config, self.datasets)
        # --exact already is the real image processor, and so is the fallback for every row
        exact = self.config.exact or not self.scanner.family.header_formula
        verifier = Verifier(0 if exact else self.verify, row_pixels=ROW_PIXELS)
        self.checkpoint, self.start = self._open_checkpoint(result.summary)
        if isinstance(self.executor, LocalExecutor) and small_datasets(self.datasets):
            verifier.fork(self.scanner)  # before the scan: its imports then run on another core
        try:
            with progress or NullProgress(), signals_raise():
                for index, dataset in enumerate(self.datasets):  # one model, one summary: one report
                    if index >= self.start.dataset_index:  # before: done before the interruption
                        self._scan_dataset(index, dataset, result, verifier, progress, on_outcome)
            if verifier.size:
                self._verify(verifier, result.summary)
            result.finished = True
        except DatasetError as exc:
            raise SessionError(str(exc)) from None
        except ResumeMismatch as exc:  # the checkpoint's row count is beyond the dataset's end
            raise SessionError(
                f"{exc}; delete {self.resume} and {self.resume}.findings to start over"
            ) from None
        except (KeyboardInterrupt, Terminated) as exc:
            # Why not just exit: hours of scanning are worth a partial report (rows so far, marked incomplete).
            result.interrupted = signal_name(exc)
            self.say(
                f"vlmlint: interrupted ({result.interrupted}) after {result.summary.samples} rows; "
                "writing a partial report"
            )
        except Exception as exc:  # an internal error must still end with exit code 2 and a clear line
            raise SessionError(f"internal error: {type(exc).__name__}: {exc}") from None
        finally:
            verifier.close()  # (a recheck process still waiting: the scan stopped before its recheck)
            if self.checkpoint is not None:  # the last periodic save stays for --resume if the scan stopped
                self.checkpoint.close()
        if self.checkpoint is not None and (self.start.dataset_index or self.start.rows):
            self.say(
                f"vlmlint: resumed from {self.resume}: {self.start.rows} row(s) of dataset "
                f"{self.start.dataset_index + 1} and {self.start.dataset_index} earlier dataset(s) were "
                "counted before the interruption"
            )
        return result

    def _scan_dataset(self, index, dataset, result, verifier, progress, on_outcome) -> None:
        from vlmlint.checkpoint import Position
        from vlmlint.readers import DatasetError

        if progress is not None:
            progress.start(dataset)
        rows = self.start.rows if index == self.start.dataset_index else 0
        summary, checkpoint, baseline = result.summary, self.checkpoint, self.baseline
        try:
            for outcome in self.executor.scan(dataset, skip=rows):
                if baseline is not None and outcome.findings:
                    outcome = replace(outcome, findings=baseline.filter(outcome.findings))
                summary.add(outcome)
                verifier.offer(outcome)
                if progress is not None:
                    progress.advance()
                rows += 1
                if checkpoint is not None:
                    checkpoint.record(outcome.findings)
                    checkpoint.maybe_save(summary, Position(index, rows))
                if on_outcome is not None:
                    on_outcome(outcome)
        except DatasetError as exc:
            if len(self.datasets) == 1:
                raise
            # Why go on: a pre-commit run should still report the other files' rows.
            result.unreadable.append(dataset)
            self.say(f"vlmlint: skipped: {exc}")
        if checkpoint is not None:
            checkpoint.maybe_save(summary, Position(index + 1, 0), force=True)

    def _verify(self, verifier, summary) -> None:
        import time

        from vlmlint.verify import VERIFY_FRACTION, VERIFY_MIN_SECONDS

        # Why a share of the scan's own time: the self-check then costs a tenth of any scan, whatever its size.
        scanned = time.monotonic() - (self._began or time.monotonic())
        verifier.seconds = (
            self.verify_budget
            if self.verify_budget is not None
            else max(VERIFY_MIN_SECONDS, VERIFY_FRACTION * scanned)
        )
        checked, disagreements = verifier.run(self.scanner)
        baseline = self.baseline
        kept = [
            (row, finding)
            for row, finding in disagreements
            if self.scanner.keep(finding) and not (baseline and baseline.suppresses(finding))
        ]
        summary.add_verification(
            checked,
            kept,
            skipped=verifier.skipped,
            coverage=verifier.coverage() if verifier.limited else None,
            video_rows=verifier.video_rows,
        )

    def finish(self, result: ScanResult) -> None:
        """After the report: a completed scan's checkpoint is removed (the report read its findings)."""
        if (
            self.checkpoint is not None
            and result.finished
            and not result.interrupted
            and not result.unreadable
        ):
            self.checkpoint.remove()
