"""The command line: flags -> ScanConfig -> Scanner -> report -> exit code. Only this module prints.

Exit codes: 0 no finding at or above --fail-on; 1 such findings; 2 usage or internal error.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import os
import sys
import typing
from collections.abc import Callable
from enum import Enum
from types import SimpleNamespace
from typing import Annotated, Any

import typer
from rich.console import Console

from vlmlint.report.formats import FORMAT_NAMES
from vlmlint.rules import ALL_RULES, RULES_BY_CODE
from vlmlint.settings import SETTINGS, Setting
from vlmlint.version import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # interrupted: a partial report marked incomplete was written

app = typer.Typer(
    name="vlmlint",
    help="Lint image+text datasets for vision-language models before training.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # -h as --help on every command, as ruff, black and pip take it.
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    # Plain click help: usable at 80 columns, boolean flags shown as flags, and no rich markup to eat
    # the brackets of "pip install 'vlmlint[ray]'".
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"vlmlint {__version__}")
        raise typer.Exit(EXIT_CLEAN)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print vlmlint's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Lint image+text datasets for vision-language models before training."""


# text, json, jsonl, sarif, github, junit, gitlab, html (vlmlint/report/formats.py is the registry)
OutputFormat = Enum("OutputFormat", {name: name for name in FORMAT_NAMES}, type=str)


class FailLevel(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


class Engine(str, Enum):
    local = "local"
    ray = "ray"


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str) -> typer.Exit:
    from rich.markup import escape

    from vlmlint.report.safe import printable

    # Why escape: messages hold brackets ("folder[train]", "vlmlint[ray]") that are not markup; and
    # file names from the dataset may hold newlines or escape sequences (printable: one safe line).
    _stderr().print(
        f"[bold red]vlmlint:[/] {escape(printable(message))}", markup=True, highlight=False, soft_wrap=True
    )
    return typer.Exit(EXIT_ERROR)


def _say(message: str) -> None:
    """One line on stderr, as it is (no markup), with the dataset's names made printable."""
    from vlmlint.report.safe import printable

    _stderr().print(printable(message), markup=False, highlight=False, soft_wrap=True)


def _progress(enabled: bool):
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed} rows"),
        TimeElapsedColumn(),
        console=_stderr(),
        transient=True,
        disable=not enabled,
    )


class _Bar:
    """A session's progress on the bar above (one task per dataset)."""

    def __init__(self, enabled: bool, verb: str, escape: bool = True) -> None:
        self.progress = _progress(enabled)
        self.verb, self.escape, self.task = verb, escape, None

    def __enter__(self) -> _Bar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def start(self, dataset: str) -> None:
        text = f"{self.verb} {dataset}"
        self.task = self.progress.add_task(_escaped_markup(text) if self.escape else text, total=None)

    def advance(self) -> None:
        self.progress.advance(self.task)


def _option(setting: Setting, help: str | None = None):
    """A setting's typer option (vlmlint/settings.py: its flags and help): None when not given."""
    kind = {"bool": bool, "whole": int, "severity": FailLevel}.get(setting.check, str)
    if setting.check in ("thresholds", "pipeline_options", "processor_options"):  # KEY=VALUE, repeatable
        kind = list[str]
    extra = {"min": setting.bounds[0]} if setting.check == "whole" else {}
    return Annotated[kind | None, typer.Option(*setting.flags, help=help or setting.help, **extra)]


def _as_scan(setting: Setting) -> str:
    """`vlmlint config`'s help for a setting's flag: the same flag as scan's."""
    return "As for scan: NAME=VALUE." if setting.check == "thresholds" else "As for scan."


_BY_PARAM: dict[str, Setting] = {s.param: s for s in SETTINGS if s.param}


def setting_options(placed: dict[str, tuple[str, ...]], help: Callable[[Setting], str] | None = None):
    """Give a command the settings table's options, declared once in vlmlint/settings.py.

    `placed`: one of the command's own parameters -> the setting parameters that follow it (in --help as
    here); `help`: their help reworded. Typer reads the command's `__signature__`, which gets them; the
    command gets their values as one keyword, `flags` (setting name -> value, None: not given, as
    build_config merges them), instead of a parameter each.
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)  # typer reads the annotations, not their text
        added = {
            anchor: [
                inspect.Parameter(
                    param,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=None,
                    annotation=_option(_BY_PARAM[param], help(_BY_PARAM[param]) if help else None),
                )
                for param in params
            ]
            for anchor, params in placed.items()
        }
        parameters = [
            parameter
            for own_parameter in own.parameters.values()
            if own_parameter.name != "flags"
            for parameter in (own_parameter, *added.get(own_parameter.name, ()))
        ]
        given = [param for params in placed.values() for param in params]

        @functools.wraps(command)
        def run(**values) -> None:
            flags = _flags({param: values.pop(param) for param in given})
            return command(**values, flags=flags)

        run.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": own.return_annotation}
        return run

    return decorate


# The setting options of scan and stats: the model and dataset's, how rows are rendered, safety switches.
_MODEL_OPTIONS = (
    "model",
    "processor_option",
    "layout",
    "columns",
    "image_root",
    "split",
    "streaming",
    "max_length",
)
_SAFETY_OPTIONS = ("trust_remote_code", "allow_remote", "allow_outside_root")
_RENDER_OPTIONS = ("exact", "chat_template", "add_generation_prompt", *_SAFETY_OPTIONS)


@app.command()
@setting_options(
    {
        "datasets": (*_MODEL_OPTIONS, "truncation_side", *_RENDER_OPTIONS, "select", "ignore", "threshold"),
        "all_rows": ("fail_on",),
        "ray_address": ("jobs", "pipeline", "pipeline_option", "dataset_name"),
    }
)
def scan(
    datasets: Annotated[
        list[str],
        typer.Argument(
            help="Manifest (.json/.jsonl), parquet/arrow file, folder, or hub dataset id; several "
            "make one report (as pre-commit passes them).",
            metavar="DATASET",
            show_default=False,
        ),
    ],
    config_file: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="A vlmlint.toml or pyproject.toml (default: the nearest one found, which cannot turn on "
            "trust-remote-code, allow-remote, allow-outside-root, an image-root or model folder outside its "
            "folder, or more jobs than cores: a pull request could).",
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help=f"Report format: {', '.join(FORMAT_NAMES)}."),
    ] = OutputFormat.text,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write the report to this file (atomically) instead of stdout."),
    ] = None,
    report: Annotated[str | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    all_rows: Annotated[
        bool, typer.Option(help="With --format jsonl: one line per row (counts and codes), not per finding.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    table_rows: Annotated[int, typer.Option(help="Most findings the text table shows.", min=0)] = 200,
    root: Annotated[
        str | None,
        typer.Option(
            help="The folder sarif, github, gitlab and junit paths are relative to (default: the git "
            "toplevel of the working folder, else the working folder).",
            show_default=False,
        ),
    ] = None,
    verify: Annotated[
        int,
        typer.Option(
            help="Recheck at most this many rows (fixed seed, drawn from every image size class; none above "
            "1.5 MP) with the real image processor; 0 to skip.",
            min=0,
        ),
    ] = 32,
    verify_budget: Annotated[
        float | None,
        typer.Option(
            help="Seconds the --verify recheck may take, its image processor's load included (default: a tenth of the scan's time, at least 0.5).",
            min=0,
        ),
    ] = None,
    baseline_file: Annotated[
        str | None,
        typer.Option("--baseline", help="Do not report the findings listed in this baseline file."),
    ] = None,
    write_baseline: Annotated[
        str | None,
        typer.Option(help="Record every finding in this baseline file and exit 0 (accept them as they are)."),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            help="local: this machine's processes; ray: a Ray Data job, same report "
            "(pip install 'vlmlint[ray]')."
        ),
    ] = Engine.local,
    ray_address: Annotated[
        str | None,
        typer.Option(help="With --engine ray: the cluster (default: RAY_ADDRESS, else a local instance)."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Keep a checkpoint in this file; if it holds an interrupted run of the same scan, "
            "continue from it (removed when the scan completes)."
        ),
    ] = None,
    *,
    flags: dict[str, Any],
) -> None:
    """Scan datasets and report the rows that would overflow or mismatch for the model.

    Several DATASETs make one report with one model load; an unreadable one is skipped, exit code 2.
    """
    from vlmlint.report.formats import EmitOptions, emitter
    from vlmlint.session import ScanSession, SessionError

    if root is not None and not os.path.isdir(root):  # a typo would silently give absolute paths
        raise _fail(f"--root {root}: no such folder")
    config = _load_config(datasets[0], flags, config_file, defaults={"jobs": 0})
    baseline = _load_baseline(baseline_file, write_baseline)
    for option, target in (("--report", report), ("--write-baseline", write_baseline)):
        _check_target(option, target)  # a folder or a missing folder: refused before hours of scanning
    session = ScanSession(
        config,
        datasets,
        baseline=baseline,
        verify=verify,
        verify_budget=verify_budget,
        resume=resume,
        say=_say,
    )
    try:
        session.load(engine.value, ray_address, notice=None if quiet else _say)
    except SessionError as exc:
        raise _fail(str(exc)) from None
    stdout = _OutputFile(output) if output else sys.stdout
    rows = _Rows(
        emitter(output_format.value, stdout, EmitOptions(all_rows=all_rows, table_rows=table_rows)), stdout
    )
    try:
        result = session.run(_Bar(not quiet and sys.stderr.isatty(), "scanning"), rows)
    except SessionError as exc:
        _discard(stdout)
        raise _fail(str(exc)) from None
    _write_reports(
        stdout, rows, result, session.scanner, config, datasets, baseline, report, output_format, root
    )  # fmt: skip
    session.finish(result)  # after the report: it read the findings restored from the checkpoint
    if result.error and not result.interrupted:
        raise _fail(result.error)
    if write_baseline and not result.interrupted:  # never an incomplete scan as a baseline
        _write_baseline(write_baseline, result.summary.findings)
        raise typer.Exit(EXIT_CLEAN)
    raise typer.Exit(result.exit_code)


class _Rows:
    """What the scan hands each row's outcome to: the emitter (jsonl writes its lines as the scan goes).

    `closed`: the reader of stdout went away (`| head`); nothing more is written there, the scan goes on
    for the exit code.
    """

    def __init__(self, emit, stdout) -> None:
        self.emit, self.stdout, self.closed = emit, stdout, False

    def __call__(self, outcome) -> None:
        if not self.closed:
            try:
                self.emit.row(outcome)
            except BrokenPipeError:
                self.closed = _silence(self.stdout)


def _write_reports(
    stdout, rows, result, scanner, config, datasets, baseline, report, output_format, root=None
) -> None:  # fmt: skip
    """The reports of a finished (or interrupted) scan; a signal while they are written exits 130/143
    with no report file half written, and nothing is left behind when the report was not committed."""
    from vlmlint.session import Terminated, signal_exit, signal_name, signals_raise

    try:
        with signals_raise():
            _emit_reports(
                stdout, result.summary, scanner, config, datasets, result.unreadable,
                result.interrupted, baseline, report, output_format, rows.emit, rows.closed, root,
            )  # fmt: skip
    except (KeyboardInterrupt, Terminated) as exc:
        name = signal_name(exc)
        _say(f"vlmlint: interrupted ({name}) while writing the report; no report written")
        raise typer.Exit(signal_exit(name)) from None
    finally:
        _discard(stdout)


def _emit_reports(
    stdout, summary, scanner, config, datasets, unreadable, interrupted, baseline, report,
    output_format, emit, pipe_closed, root=None,
) -> None:  # fmt: skip
    """The report on stdout (or -o) and in --report FILE; exit 2 on a target that cannot be written."""
    from vlmlint.fileio import OutputError
    from vlmlint.report import build_report, write_report_file
    from vlmlint.report.json_report import settings_record

    settings = settings_record(config, scanner.context.max_length)
    if len(datasets) > 1:  # "dataset" stays the first one's, as with one dataset
        settings["datasets"] = list(datasets)
        settings["unreadable"] = unreadable
    full_report = build_report(summary, scanner.model.describe(timing=True), settings)
    if interrupted:
        full_report["incomplete"] = {
            "reason": f"interrupted by {interrupted}",
            "rows_scanned": summary.samples,
        }
    if baseline is not None:
        full_report["summary"]["baseline"] = baseline.to_dict()
        _say(
            f"vlmlint: baseline {baseline.path}: {baseline.suppressed} finding(s) suppressed, "
            f"{baseline.stale} stale (no longer found)"
        )
    if report:
        try:
            write_report_file(report, full_report)
        except OutputError as exc:  # a folder, a FIFO nobody reads: one line, exit 2
            raise _fail(f"--report: {exc}") from None
        except OSError as exc:  # a missing folder, a full disk: one line, exit 2, no partial file left
            raise _fail(f"--report {report}: cannot write: {exc.strerror or exc}") from None
    if pipe_closed:
        return  # nobody reads stdout any more
    try:
        _render(emit, output_format.value, full_report, summary, scanner, config, root)
    except BrokenPipeError:  # `| head`: the reader has what it wanted; exit as the report would
        _silence(stdout)
        return
    if isinstance(stdout, _OutputFile):
        stdout.commit()
    else:
        try:
            stdout.flush()
        except BrokenPipeError:
            _silence(stdout)


def _render(emit, output_format, full_report, summary, scanner, config, root=None) -> None:
    """The report in its format on stdout or -o (jsonl was streamed: only its incomplete record)."""
    from vlmlint.report.formats import ReportInput
    from vlmlint.report.safe import unicode_safe

    rendered = ReportInput(
        report=full_report,
        summary=summary,
        model_name=unicode_safe(config.model),
        text_tokens_estimated=scanner.model.text_tokens_estimated,
        counted_by=scanner.model.counted_by(timing=True),
        root=root,
    )
    try:
        emit.finish(rendered)
    except BrokenPipeError:
        raise
    except Exception as exc:  # a renderer bug still ends with exit 2 and one line
        raise _fail(f"internal error writing {output_format}: {type(exc).__name__}: {exc}") from None


class _OutputFile:
    """`-o FILE`: the report goes to a temporary file beside FILE, renamed into place when complete.

    The temporary file exists only while the report is written (it is made on the first write), so
    an interruption or an error before leaves nothing; discard() removes it after. A special target
    (/dev/null, /dev/stdout, /dev/fd/N, a FIFO) is written directly: a rename would replace it.
    """

    def __init__(self, path: str) -> None:
        from vlmlint.fileio import OutputError, check_target, open_special

        self.path = path
        self.temporary: str | None = None
        self.done = False
        try:
            special = open_special(path)
            if special is None:
                check_target(path)
        except OutputError as exc:
            raise _fail(f"--output: {exc}") from None
        # backslashreplace: the last guard for a name's non-UTF-8 bytes (report/safe.py does the rest)
        self.stream = (
            None
            if special is None
            else io.TextIOWrapper(special, encoding="utf-8", errors="backslashreplace")
        )

    def _open(self):
        if self.stream is None:
            from vlmlint.fileio import open_temporary

            handle, self.temporary = open_temporary(self.path)
            self.stream = open(handle, "w", encoding="utf-8", errors="backslashreplace", closefd=True)  # noqa: SIM115
        return self.stream

    def write(self, text: str) -> int:
        return self._open().write(text)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()

    def fileno(self) -> int:
        return self._open().fileno()

    def isatty(self) -> bool:
        return False

    def commit(self) -> None:
        self._open().close()
        if self.temporary is not None:
            os.replace(self.temporary, self.path)
        self.done = True

    def discard(self) -> None:
        if self.done:
            return
        self.done = True
        if self.stream is not None:
            with contextlib.suppress(OSError):  # a FIFO whose reader left: nothing to keep anyway
                self.stream.close()
        if self.temporary is not None and os.path.exists(self.temporary):
            os.unlink(self.temporary)


def _discard(stdout) -> None:
    if isinstance(stdout, _OutputFile):
        stdout.discard()


def _check_target(option: str, path: str | None) -> None:
    """Refuse, before the scan, an output path that can never be written (a folder, no such folder)."""
    from vlmlint.fileio import OutputError, check_target

    if path:
        try:
            check_target(path)
        except OutputError as exc:
            raise _fail(f"{option}: {exc}") from None


def _silence(stream) -> bool:
    """The reader of a pipe went away: point the stream's descriptor at /dev/null (nothing more is
    written, and the interpreter's last flush does not raise again). Returns True (pipe_closed)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    return True


def _escaped_markup(text: str) -> str:
    """A progress description: a file name's brackets are not rich markup, its controls escaped."""
    from rich.markup import escape

    from vlmlint.report.safe import printable

    return escape(printable(text))


def _flag_value(raw: str) -> bool | int | float | str:
    """A KEY=VALUE flag's VALUE (--pipeline-option, --threshold), by one rule: true or false in any case
    is a boolean; else what Python's int(), then float() reads is a number (2048, 1_000, 0.5, .5, 1e3, and
    nan or inf, which the checks refuse); else the text itself, stripped."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def _parse_pipeline_options(values: list[str] | None) -> dict[str, object] | None:
    """KEY=VALUE pairs (VALUE read by _flag_value), checked as a config file's pipeline-options are."""
    from vlmlint.config import ConfigError, check_setting

    if not values:
        return None
    parsed: dict[str, object] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--pipeline-option takes KEY=VALUE, got {item!r}")
        parsed[key.strip().replace("-", "_")] = _flag_value(raw)
    try:
        return dict(check_setting("pipeline_options", parsed))  # nan, inf: refused here
    except ConfigError as exc:
        raise _fail(f"--pipeline-option: {exc}") from None


def _parse_processor_options(values: list[str] | None) -> dict[str, object] | None:
    """KEY=VALUE pairs (VALUE read by _flag_value, or as JSON when it is a list or table: image_mean=[0.5,
    0.5,0.5]), checked as a config file's processor-options are; the model checks the keys at load."""
    import json

    from vlmlint.config import ConfigError, check_setting

    if not values:
        return None
    parsed: dict[str, object] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--processor-option takes KEY=VALUE, got {item!r}")
        value: object = _flag_value(raw)
        if isinstance(value, str) and value[:1] in "[{":
            try:
                value = json.loads(value)
            except ValueError:
                raise _fail(
                    f"--processor-option {key.strip()}: {value!r} is not a JSON list or table"
                ) from None
        parsed[key.strip()] = value
    try:
        return dict(check_setting("processor_options", parsed))
    except ConfigError as exc:
        raise _fail(f"--processor-option: {exc}") from None


def _parse_thresholds(values: list[str] | None) -> dict[str, float] | None:
    """NAME=NUMBER pairs (NUMBER read by _flag_value), each checked as a config file's threshold is
    (known name, finite, in range)."""
    from vlmlint.config import ConfigError, check_threshold

    if not values:
        return None
    parsed = {}
    for item in values:
        name, sep, raw = item.partition("=")
        value = _flag_value(raw)
        if not sep or isinstance(value, (bool, str)):
            raise _fail(f"--threshold takes NAME=NUMBER, got {item!r}")
        try:
            parsed[name.strip()] = check_threshold(name.strip(), value)
        except ConfigError as exc:
            raise _fail(f"--threshold {item}: {exc}") from None
    return parsed


# How a flag's value becomes its setting's, by the setting's check (the rest are taken as they are).
_FLAG_VALUE: dict[str, typing.Callable] = {
    "severity": lambda level: level.value,
    "thresholds": lambda values: _parse_thresholds(values),
    "pipeline_options": lambda values: _parse_pipeline_options(values),
    "processor_options": lambda values: _parse_processor_options(values),
}


def _flags(params: dict[str, Any]) -> dict[str, Any]:
    """A command's setting options (by parameter) as the flags build_config merges, by the settings
    table: every setting that has a flag, None where not given (or not an option of this command)."""
    flags = {}
    for setting in SETTINGS:
        if setting.param is not None:
            value = params.get(setting.param)
            parse = _FLAG_VALUE.get(setting.check)
            flags[setting.name] = parse(value) if parse is not None and value is not None else value
    return flags


def _load_config(dataset: str, flags: dict, config_file: str | None, defaults: dict | None = None):
    """Defaults < [tool.vlmlint] / vlmlint.toml < flags; a bad file or value exits 2.

    `defaults`: the command's own defaults where they differ from ScanConfig's (scan: every core).
    """
    return _config_with_sources(dataset, flags, config_file, defaults)[0]


def _config_with_sources(dataset: str, flags: dict, config_file: str | None, defaults: dict | None = None):
    """(config, config file or None, its settings): a file found by search, not named with --config,
    cannot relax safety (config.refuse_relaxed_safety: it may be a pull request's own)."""
    from pathlib import Path

    from vlmlint.config import (
        ConfigError,
        build_config,
        find_config_file,
        read_config_file,
        refuse_relaxed_safety,
    )

    try:
        path = Path(config_file) if config_file else find_config_file()
        settings = read_config_file(path) if path else {}
        if path and not config_file:
            refuse_relaxed_safety(path, settings, flags)
        file_settings = {**(defaults or {}), **settings}
        config = build_config(dataset, file_settings, flags, config_root=path.parent if path else None)
        return config, path, settings
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _load_baseline(path: str | None, write_path: str | None):
    """--baseline FILE as a Baseline (None without it); a missing or bad file exits 2."""
    from vlmlint.baseline import BaselineError, load_baseline

    if path and write_path:
        raise _fail("--baseline and --write-baseline cannot be combined (--write-baseline records all)")
    if not path:
        return None
    try:
        return load_baseline(path)
    except BaselineError as exc:
        raise _fail(str(exc)) from None


def _write_baseline(path: str, findings) -> None:
    from vlmlint.baseline import write_baseline
    from vlmlint.fileio import OutputError

    try:
        written = write_baseline(path, findings)
    except OutputError as exc:
        raise _fail(f"--write-baseline: {exc}") from None
    except OSError as exc:
        raise _fail(f"--write-baseline {path}: {exc.strerror or exc}") from None
    _say(f"vlmlint: wrote {written} finding(s) to baseline {path}")


# Why: `vlmlint stats` takes scan's model and dataset options as they are (same flags, same help).
_SCAN = SimpleNamespace(**typing.get_type_hints(scan, include_extras=True))


class StatsFormat(str, Enum):
    text = "text"
    json = "json"


@app.command()
@setting_options(
    {"datasets": (*_MODEL_OPTIONS, *_RENDER_OPTIONS, "jobs", "pipeline", "pipeline_option", "dataset_name")}
)
def stats(
    datasets: Annotated[
        list[str],
        typer.Argument(
            help="Manifest (.json/.jsonl), parquet/arrow file, folder, or hub dataset id; several make one "
            "set of statistics.",
            metavar="DATASET",
        ),
    ],
    config_file: _SCAN.config_file = None,
    output_format: Annotated[
        StatsFormat, typer.Option("--format", "-f", help="text (histograms) or json (for CI).")
    ] = StatsFormat.text,
    quiet: _SCAN.quiet = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Histograms and percentiles of sequence lengths and image tokens, and the --max-length and image
    setting (Qwen-VL max_pixels, Idefics3 size.longest_edge) that keep 100% / 99.9% / 99% of rows."""
    from vlmlint.models import ModelError
    from vlmlint.readers import DatasetError
    from vlmlint.session import SessionError, load_scanner
    from vlmlint.stats import StatsCollector

    config = _load_config(datasets[0], flags, config_file, defaults={"jobs": 0})
    try:
        scanner = load_scanner(config, rules=(), errors=(ModelError,))  # counts only: no rule runs
    except SessionError as exc:
        raise _fail(str(exc)) from None
    if scanner.model.notice and not quiet:
        _stderr().print(f"vlmlint: {scanner.model.notice}", highlight=False)
    try:
        collector = StatsCollector(scanner, ", ".join(datasets))
        with _Bar(not quiet and sys.stderr.isatty(), "counting", escape=False) as progress:
            for dataset in datasets:  # one model load, one set of statistics
                progress.start(dataset)
                for outcome in scanner.scan(dataset):
                    collector.add(outcome)
                    progress.advance()
        result = collector.result()
    except DatasetError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted") from None
    except Exception as exc:  # an internal error must still end with exit code 2 and a clear line
        raise _fail(f"internal error: {type(exc).__name__}: {exc}") from None
    if output_format is StatsFormat.json:
        sys.stdout.write(orjson_dumps(result.to_dict()))
    else:
        from vlmlint.report.stats_text import render_stats

        width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 160))
        render_stats(result, Console(width=width), model_name=config.model)
    sys.stdout.flush()


def orjson_dumps(record: dict) -> str:
    import orjson

    return orjson.dumps(record, option=orjson.OPT_INDENT_2).decode() + "\n"


@app.command("rules")
def list_rules() -> None:
    """List every rule: code, name, default severity and what it finds."""
    console = Console()
    for rule in ALL_RULES:
        console.print(
            f"{rule.code}  {rule.name:<28} {rule.severity.value:<8} {rule.summary()}", highlight=False
        )


@app.command("rule")
def show_rule(code: Annotated[str, typer.Argument(help="A rule code such as VLM301.")]) -> None:
    """Print one rule's documentation."""
    rule = RULES_BY_CODE.get(code.upper())
    if rule is None:
        raise _fail(f"unknown rule {code!r}; see 'vlmlint rules'")
    print(f"{rule.code} {rule.name} ({rule.severity.value})\n\n{rule.documentation()}")


@app.command("config")
@setting_options(
    {
        "config_file": (
            "model",
            "max_length",
            "truncation_side",
            "select",
            "ignore",
            "fail_on",
            "threshold",
            "columns",
            "image_root",
            "jobs",
            *_SAFETY_OPTIONS,
        )
    },
    help=_as_scan,
)
def show_config(
    context: typer.Context,
    config_file: Annotated[
        str | None, typer.Option("--config", help="A vlmlint.toml or pyproject.toml.")
    ] = None,
    *,
    flags: dict[str, Any],
) -> None:
    """Print the effective settings (defaults < config file < flags), each with where it came from.

    A config file found by search is refused as scan refuses it when it relaxes safety.
    """
    from vlmlint.config import THRESHOLDS

    config, path, settings = _config_with_sources(".", flags, config_file, defaults={"jobs": 0})

    def origin(setting: Setting) -> str:
        # click's parameter source (by name: typer may bring its own copy of click's enum)
        source = context.get_parameter_source(setting.param) if setting.param else None
        if source is not None and source.name == "COMMANDLINE":
            return "flag"
        return "file" if setting.name in settings else "default"

    # Valid TOML, pasteable under [tool.vlmlint] (or at the top of a vlmlint.toml): keys as the docs
    # write them, each value's origin as a comment, unset settings as comments.
    if path is None:
        print("# config file: none found")
    elif config_file:
        print(f"# config file: {path} (named with --config: trusted like flags)")
    else:
        print(f"# config file: {path} (found by search: it cannot relax safety)")
    print("# the settings a scan here would use; each comment says where the value comes from")
    print("[tool.vlmlint]")
    for setting in SETTINGS:  # a config file's settings, in ScanConfig's order; thresholds below
        if setting.in_file and setting.check != "thresholds":
            value = _shown(getattr(config, setting.name))
            if value is None:
                print(f"# {setting.key} =  # unset ({origin(setting)})")
            else:
                print(f"{setting.key} = {_toml(value)}  # {origin(setting)}")
    print()
    print("[tool.vlmlint.thresholds]  # each comment: where it comes from, what it means")
    file_thresholds = {k.replace("-", "_") for k in settings.get("thresholds") or {}}
    flag_thresholds = {k.replace("-", "_") for k in flags["thresholds"] or {}}
    for name, (_, meaning) in THRESHOLDS.items():
        source = "flag" if name in flag_thresholds else "file" if name in file_thresholds else "default"
        print(f"{name.replace('_', '-')} = {_toml(config.thresholds[name])}  # {source}: {meaning}")


def _toml(value: Any) -> str:
    """A value as TOML: strings quoted (JSON's escapes are TOML's), booleans lower-case, arrays, inline tables."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def _shown(value):
    """A setting as plain data: enums by value, tuples as lists, tables as dicts."""
    from collections.abc import Mapping

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_shown(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _shown(v) for k, v in value.items()}
    return value


def _support_table(console: Console) -> None:
    """`vlmlint models --all`: the support matrix of the installed transformers (vlmlint.models.support)."""
    from rich.table import Table

    from vlmlint.models import support

    entries = support.support_matrix()
    table = Table(show_lines=False, pad_edge=False)
    # The model type is what a reader looks up (and greps for): never folded, whatever the width.
    width = max((len(entry.model_type) for entry in entries), default=10)
    table.add_column("model type", no_wrap=True, min_width=width)
    for column in ("processor class", "route", "family / reason", "proven"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            entry.model_type,
            entry.processor_class,
            entry.route,
            entry.family or entry.reason or "",
            support.proven_text(entry),
        )
    console.print(table)
    console.print(support.totals_line(entries))


@app.command("models")
def list_models(
    all_models: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every model type of the installed transformers whose processor takes images: "
            "its route (formula / fallback / refused) and whether its counts are proven.",
        ),
    ] = False,
) -> None:
    """List the built-in model profiles (offline, no download): source checkpoint and settings."""
    from vlmlint.models.profiles import DEFAULT_PROFILE, PROFILES, profile_settings
    from vlmlint.models.registry import family_for_class

    console = Console(highlight=False, soft_wrap=True)
    if all_models:
        _support_table(console)
        return
    for profile in PROFILES.values():
        files = profile_settings(profile)
        image = files.get("preprocessor_config.json") or (files.get("processor_config.json") or {}).get(
            "image_processor", {}
        )
        keys = (
            "size",
            "min_pixels",
            "max_pixels",
            "patch_size",
            "merge_size",
            "crop_size",
            "image_seq_length",
        )
        shown = ", ".join(f"{k}={image[k]}" for k in keys if k in image)
        config = files.get("config.json", {})
        limit = (config.get("text_config") or {}).get("max_position_embeddings") or config.get(
            "max_position_embeddings"
        )
        default = " (default)" if profile.name == DEFAULT_PROFILE else ""
        bpe = {
            "qwen": "real Qwen BPE",
            "tekken": "real Tekken BPE",
            "mistral-v1": "real Mistral-7B SentencePiece",
        }.get(profile.tokenizer)
        text = f"text tokens exact ({bpe})" if profile.exact_text else "text tokens estimated"
        processor_class = next(
            (
                c["processor_class"]
                for c in files.values()
                if isinstance(c, dict) and c.get("processor_class")
            ),
            None,
        )
        family = family_for_class(processor_class)
        route = f"formula (family {family.name})" if family else "real processor (fallback)"
        console.print(f"[bold]{profile.name}[/]{default}  {profile.title}  from {profile.checkpoint}")
        console.print(f"    {image.get('image_processor_type', '?')}: {shown}")
        console.print(f"    max_position_embeddings={limit}; {text}; counted by: {route}")
    console.print(
        "A local folder or a hub id passed to --model always wins over a profile of the same name; "
        "--model omitted means the qwen2-vl profile."
    )


@app.command()
def version() -> None:
    """Print vlmlint's version."""
    print(f"vlmlint {__version__}")


def main() -> None:
    # transformers prints backend advice ("PyTorch was not found") at import; vlmlint needs no torch.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # The last guard for a file name's non-UTF-8 bytes (report/safe.py escapes them first).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
    except BrokenPipeError:
        # A closed pipe outside the scan's own handling (stats, rules): end quietly, as `| head` wants.
        _silence(sys.stdout)
        sys.exit(EXIT_CLEAN)


if __name__ == "__main__":
    main()
