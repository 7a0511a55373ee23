"""`vlmlint stats` for video rows (issue 20, part 4): the video knobs each sampling mode names, recommended
values that really fit (a fresh scan with the setting applied as a user applies it: a --pipeline-option, or
the key written into the processor folder's file), lengths at the current value equal to the scan's, and
the share sweep against brute force.

The clips are the fixture clips of fixtures/datasets/media/clips (MP4, MOV, MKV, WebM, AVI; 5 to 40 frames)
and two larger ones encoded here with fixtures/clips.py's encoder (448x252 x 48 frames, 320x240 x 90).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fixtures.clips import encode
from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.pipelines import load_pipeline
from vlmlint.records import VideoMeta
from vlmlint.stats import (
    KEEP_SHARES,
    VideoKnob,
    VideoRowLength,
    _KnobSearch,
    _RowLengths,
    collect,
    rows_to_keep,
    video_knobs,
)

CLIPS = DATASETS / "media" / "clips"
FIXTURE_CLIPS = (
    "h264_320x240_24fps.mp4",
    "mpeg4_64x48_29.97fps.mp4",
    "h264_48x32_60fps.mov",
    "mpeg4_90x60_25fps.mov",
    "h264_64x48_25fps.mkv",
    "mpeg4_96x64_60fps.mkv",
    "vp9_64x36_29.97fps.webm",
    "mpeg4_64x48_25fps.avi",
)
ENCODED = {"h264_448x252_24fps_48.mp4": (448, 252, 24, 48), "h264_320x240_30fps_90.mp4": (320, 240, 30, 90)}
runner = CliRunner()


def _row(text: str, videos: list[str]) -> dict:
    return {
        "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Something moves."}],
        "videos": videos,
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """One row per clip, a row with two clips and a text-only row (not a video row)."""
    folder = tmp_path_factory.mktemp("videos")
    names = list(FIXTURE_CLIPS)
    for name in names:
        shutil.copy(CLIPS / name, folder / name)
    for name, (width, height, rate, frames) in ENCODED.items():
        (folder / name).write_bytes(encode("mp4", "libx264", width, height, rate, frames))
        names.append(name)
    rows = [_row("<video>What happens in this clip?", [name]) for name in names]
    rows.append(_row("<video><video>Compare them.", [names[0], names[-1]]))
    rows.append(
        {"messages": [{"role": "user", "content": "No video."}, {"role": "assistant", "content": "Fine."}]}
    )
    manifest = folder / "videos.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return manifest


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _scanner(
    manifest: Path, model: str | Path, pipeline: str, limit: int, options: dict | None = None
) -> Scanner:
    config = ScanConfig(
        dataset=str(manifest),
        model=str(model if isinstance(model, Path) else PROCESSORS / model),
        max_length=limit,
        pipeline=pipeline,
        pipeline_options=options or {},
    )
    return Scanner(config, model=None if isinstance(model, Path) else _model(model), rules=())


@dataclass(frozen=True)
class Mode:
    model: str
    pipeline: str
    limit: int
    names: tuple[str, ...]  # the knobs, as the mode names them


MODES = (
    Mode("qwen2.5-vl", "hf", 1000, ("max_pixels",)),
    Mode("qwen3-vl", "hf", 300, ("fps", "max_frames", "size.longest_edge")),
    Mode("qwen2.5-vl", "llamafactory", 150, ("video_fps", "video_maxlen", "video_max_pixels")),
    Mode("qwen3-vl", "llamafactory", 150, ("video_fps", "video_maxlen", "video_max_pixels")),
    Mode("qwen2.5-vl", "swift", 400, ("FPS", "FPS_MAX_FRAMES", "VIDEO_MAX_PIXELS")),
    Mode("qwen3-vl", "swift", 400, ("FPS", "FPS_MAX_FRAMES", "VIDEO_MAX_PIXELS")),
)
IDS = [f"{m.model}-{m.pipeline}" for m in MODES]


@cache
def _stats(manifest: Path, mode: Mode):
    scanner = _scanner(manifest, mode.model, mode.pipeline, mode.limit)
    return scanner, collect(scanner, scanner.scan(), str(manifest))


# File keys that set each transformers knob (the video processor reads preprocessor_config.json here:
# neither fixture folder ships a video_preprocessor_config.json).
HF_KEYS = {"max_pixels": ("max_pixels",), "size.longest_edge": ("size", "longest_edge"), "fps": ("fps",)}
HF_KEYS["max_frames"] = ("max_frames",)


def _with_setting(tmp: Path, model: str, name: str, value) -> Path:
    folder = tmp / f"{model}-{name}-{value}"
    if not folder.exists():
        shutil.copytree(PROCESSORS / model, folder)
        path = folder / "preprocessor_config.json"
        config = json.loads(path.read_text())
        keys = HF_KEYS[name]
        if len(keys) == 2:
            config.setdefault(keys[0], {})[keys[1]] = value
        else:
            config[keys[0]] = value
        path.write_text(json.dumps(config))
    return folder


def _video_rows_within(manifest: Path, mode: Mode, name: str, value, tmp: Path) -> int:
    """Video rows within the limit in a fresh scan with the knob set as a user sets it."""
    if mode.pipeline == "hf":
        scanner = _scanner(manifest, _with_setting(tmp, mode.model, name, value), "hf", mode.limit)
    else:
        scanner = _scanner(manifest, mode.model, mode.pipeline, mode.limit, {name: value})
    return sum(
        1
        for outcome in scanner.scan()
        if any(info.kind == "video" for info in outcome.result.media)
        and outcome.result.seq_len is not None
        and outcome.result.seq_len <= mode.limit
    )


# -- names and notes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_knobs_are_named_as_the_sampling_mode_names_them(dataset, mode):
    _, stats = _stats(dataset, mode)
    video = stats.video
    assert video is not None and video.rows == 11 and video.rows_uncounted == 0
    assert tuple(knob.name for knob in video.knobs) == mode.names
    assert all(knob.limit == mode.limit for knob in video.knobs)


def test_video_row_count_excludes_rows_without_video(dataset):
    _, stats = _stats(dataset, MODES[0])
    assert stats.rows_counted == 12 and stats.video.rows == 11


def test_modes_without_a_knob_say_why(dataset):
    scanner = _scanner(dataset, "qwen2.5-vl", "hf", 1000)
    _, notes = video_knobs(scanner)
    assert any("do_sample_frames is false" in note and "fps, max_frames" in note for note in notes)
    # the other families under transformers have their knobs too (tests/test_stats_video_families.py)
    scanner = _scanner(dataset, "internvl3-1b-hf", "hf", 1000)
    knobs, notes = video_knobs(scanner)
    assert [k.name for k in knobs] == ["num_frames with do_sample_frames: true"]
    assert not any("not searched yet" in note for note in notes)
    scanner = _scanner(dataset, "qwen2.5-vl", "trl", 1000)
    knobs, notes = video_knobs(scanner)
    assert not knobs and "not counted" in notes[0]
    scanner = _scanner(dataset, "qwen2.5-vl", "swift", 1000, {"VIDEO_MAX_TOKEN_NUM": 256})
    knobs, _ = video_knobs(scanner)
    assert [k.name for k in knobs] == ["FPS", "FPS_MAX_FRAMES"]  # VIDEO_MAX_PIXELS is ignored then


# -- exact lengths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_lengths_at_the_current_values_are_the_scanned_lengths(dataset, mode):
    """Both ways of counting a row at a knob value (the run-length shortcut, and composing and tokenizing
    again) give the scan's own length at the current value of every knob."""
    scanner, _ = _stats(dataset, mode)
    knobs, _ = video_knobs(scanner)
    measure = VideoRowLength(scanner)
    checked = 0
    for outcome in scanner.scan():
        row = outcome.result
        if row.seq_len is None or not row.media:
            continue
        lengths = _RowLengths(measure, row)
        current = measure.counts(row, scanner.pipeline, scanner.model.video_settings)
        assert [c.tokens for c in current] == [info.tokens for info in row.media]
        assert measure.composed(row, current, scanner.model.video_settings) == row.seq_len
        for knob in knobs:
            pipeline, video_settings = knob.at(knob.current)
            assert lengths(pipeline, video_settings) == row.seq_len, (row.sample.location, knob.name)
            checked += 1
    assert checked >= 10 * len(knobs)


@pytest.mark.parametrize("mode", MODES[2:4], ids=IDS[2:4])
def test_the_shortcut_equals_a_full_recount_at_every_grid_value(dataset, mode):
    """Where the expansions' shape is unchanged the length is the scanned one plus the runs' change; checked
    against composing and tokenizing again at every grid value of every knob."""
    scanner, _ = _stats(dataset, mode)
    knobs, _ = video_knobs(scanner)
    measure = VideoRowLength(scanner)
    for outcome in list(scanner.scan())[:4]:
        row = outcome.result
        lengths = _RowLengths(measure, row)
        for knob in knobs:
            for value in knob.values:
                pipeline, video_settings = knob.at(value)
                found = lengths(pipeline, video_settings)
                counts = measure.counts(row, pipeline, video_settings)
                assert found == measure.composed(row, counts, video_settings), (knob.name, value)


def test_lengths_are_not_monotone_in_the_pixel_knob():
    """Why no binary search: LLaMA-Factory's pre-resize, then smart_resize's rounding, gives a 1 s 448x252 clip
    under Qwen3-VL more tokens at video_max_pixels 24576 (10x16 patches) than at 32768 (8x16)."""
    model = _model("qwen3-vl")
    meta = VideoMeta(
        frames=24, fps=24.0, duration=1.0, width=448, height=252, header_frames=24, stream_duration=1.0
    )
    tokens = {}
    for value in (24576, 32768):
        pipeline = load_pipeline("llamafactory", {"video_max_pixels": value})
        pipeline.bind(model)
        tokens[value] = pipeline.count_video(model.family, meta, model.video_settings).tokens
    assert (tokens[24576], tokens[32768]) == (40, 32)


# -- the recommendations fit ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_recommendations_fit_in_a_fresh_scan_and_are_the_largest(dataset, mode, tmp_path_factory):
    """Each recommended value, applied as a user applies it, keeps the rows it says in a fresh scan; the next
    grid value up keeps fewer than the share needs (the recommendation is the largest on the grid)."""
    scanner, stats = _stats(dataset, mode)
    tmp = tmp_path_factory.mktemp("settings")
    knobs = {knob.name: knob for knob in video_knobs(scanner)[0]}
    checked = 0
    for found in stats.video.knobs:
        values = knobs[found.name].values
        seen = set()
        for item in found.recommendations:
            if item.value is None or item.value in seen:
                continue
            seen.add(item.value)
            assert _video_rows_within(dataset, mode, found.name, item.value, tmp) == item.rows_kept
            assert item.rows_kept >= item.rows_required
            following = [v for v in values if v > item.value]
            assert item.top == (not following)
            if following:
                assert _video_rows_within(dataset, mode, found.name, following[0], tmp) < item.rows_required
            checked += 1
        # the current value: the scan's own rows within the limit, less the rows no value fits
        assert found.rows_at_current <= found.rows_fittable
    assert checked >= len(mode.names)


# -- the sweep ---------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=40))
def test_share_recommendation_is_the_largest_value_keeping_the_share(fits):
    """_KnobSearch against brute force over the rows' fit sets on a 6-value grid."""
    values = (1, 2, 3, 4, 5, 6)
    knob = VideoKnob("k", "test", 3, values, "1 to 6", lambda value: (value, value))

    class Lengths:  # a row that fits where its fit set says
        def __init__(self, row_fits):
            self.row_fits = row_fits
            self.row = type(
                "Row", (), {"seq_len": 0 if row_fits[2] else 9, "sample": type("S", (), {"location": "x"})}
            )

        def __call__(self, pipeline, video_settings):
            return 0 if self.row_fits[values.index(pipeline)] else 9

    search = _KnobSearch(knob)
    for row_fits in fits:
        search.add(Lengths(row_fits), 5)
    result = search.result(5)
    fittable = [row for row in fits if any(row)]
    assert result.rows_fittable == len(fittable) and result.unfittable == len(fits) - len(fittable)
    assert result.rows_at_current == sum(row[2] for row in fittable)
    for (label, share), item in zip(KEEP_SHARES, result.recommendations, strict=True):
        need = rows_to_keep(share, len(fittable))
        kept = [sum(row[i] for row in fittable) for i in range(len(values))]
        best = max((i for i in range(len(values)) if kept[i] >= need and kept[i]), default=None)
        assert item.keep == label and item.rows_required == need
        if best is None:
            assert item.value is None
        else:
            assert (item.value, item.rows_kept, item.top) == (
                values[best],
                kept[best],
                best == len(values) - 1,
            )


# -- the command ----------------------------------------------------------------------------------------


def test_cli_text_and_json(dataset):
    arguments = ["stats", str(dataset), "--model", str(PROCESSORS / "qwen2.5-vl"), "--max-length", "150"]
    arguments += ["--pipeline", "llamafactory", "-q"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    for expected in ("Videos: 11 counted row(s) with video", "video_fps (now 2)", "video_maxlen (now 128)"):
        assert expected in result.stdout
    assert "video_max_pixels (now 65536)" in result.stdout
    result = runner.invoke(app, [*arguments, "--format", "json"])
    assert result.exit_code == 0, result.output
    video = orjson.loads(result.stdout)["video"]
    assert video["rows"] == 11 and [k["name"] for k in video["knobs"]] == list(MODES[2].names)
    assert [r["keep"] for r in video["knobs"][0]["recommendations"]] == ["100%", "99.9%", "99%"]


def test_a_dataset_without_video_has_no_video_part():
    scanner = _scanner(DATASETS / "demo", "qwen2-vl-small", "hf", 400)
    assert collect(scanner, scanner.scan(), "demo").video is None
