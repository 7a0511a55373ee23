"""`vlmlint stats` video knobs of the families besides Qwen-VL under transformers' own video processor (issue
20, part 4): Gemma 4, GLM-4.1V / 4.6V, SmolVLM2, InternVL, LLaVA-OneVision and LLaVA-NeXT-Video.

As tests/test_stats_video.py (whose dataset and helpers this reuses): each recommended value, written as a
user writes it into the processor folder's video_preprocessor_config.json (a copy of the file the video
processor reads, with the knob's key and any key it needs with it, e.g. do_sample_frames: true), keeps
exactly the rows it says in a fresh scan, and the next grid value keeps fewer than the share needs; the
lengths at the current settings are the scan's own.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROCESSORS
from tests.test_stats_video import _scanner, dataset  # noqa: F401 (the module-scoped dataset fixture)
from vlmlint.stats import VideoRowLength, _RowLengths, collect, video_knobs


@dataclass(frozen=True)
class Mode:
    model: str
    limit: int
    names: tuple[str, ...]  # the knobs, as the file names them
    base: tuple[tuple[str, Any], ...] = field(
        default=()
    )  # keys written before the scan (the mode's settings)
    notes: tuple[str, ...] = ()  # words a note must hold

    @property
    def id(self) -> str:
        return self.model + "".join(f"-{key}={value}" for key, value in self.base)


EVERY = " with do_sample_frames: true"
MODES = (
    Mode("gemma-4-e4b-it", 2500, ("num_frames", "max_soft_tokens"), notes=("fps applies with num_frames: null",)),
    Mode(
        "gemma-4-e4b-it", 600, ("fps", "max_soft_tokens"), base=(("num_frames", None), ("fps", 4)),
        notes=("mutually exclusive",),
    ),
    Mode("glm-4.1v-9b-thinking", 250, ("fps", "max_duration", "size.longest_edge")),
    Mode("glm-4.6v", 300, ("size.longest_edge",), notes=("does not read them",)),
    Mode("smolvlm2-256m-video-instruct", 250, ("video_sampling.max_frames" + EVERY,), notes=("no size setting",)),
    Mode(
        "smolvlm2-256m-video-instruct", 400, ("video_sampling.fps", "video_sampling.max_frames"),
        base=(("do_sample_frames", True), ("video_sampling.fps", 4)),
    ),
    Mode("internvl3-1b-hf", 3000, ("num_frames" + EVERY,), notes=("no size setting",)),
    Mode("internvl3-1b-hf", 5000, ("fps",), base=(("do_sample_frames", True), ("fps", 8))),
    Mode("llava-onevision-qwen2-7b-ov", 4000, ("num_frames" + EVERY,), notes=("no size setting",)),
    # fps set but ignored (do_sample_frames off): the frame count is written with fps: null (both refused)
    Mode("llava-onevision-qwen2-7b-ov", 4000, ("num_frames" + EVERY + ", fps: null",), base=(("fps", 2),)),
    Mode("llava-next-video-7b-hf", 3000, ("num_frames" + EVERY,), notes=("vision tower's input size",)),
)  # fmt: skip
IDS = [mode.id for mode in MODES]


def _write(config: dict, key: str, value: Any) -> None:
    """A key as the knob names it (video_sampling.fps: fps inside video_sampling) set in the file's dict."""
    *path, last = key.split(".")
    for part in path:
        config = config.setdefault(part, {})
    config[last] = value


def _folder(tmp: Path, model: str, keys: tuple[tuple[str, Any], ...]) -> Path:
    """A copy of the fixture folder whose video_preprocessor_config.json is the file its video processor
    reads (video_preprocessor_config.json, else preprocessor_config.json; neither: the class defaults) with
    these keys written in."""
    folder = tmp / (model + "".join(f"-{k}={v}" for k, v in keys))
    if not folder.exists():
        shutil.copytree(PROCESSORS / model, folder)
        source = next(
            (folder / name for name in ("video_preprocessor_config.json", "preprocessor_config.json") if (folder / name).exists()),
            None,
        )  # fmt: skip
        config = json.loads(source.read_text()) if source is not None else {}
        for key, value in keys:
            _write(config, key, value)
        (folder / "video_preprocessor_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("families")


@cache
def _stats(manifest: Path, mode: Mode, tmp: Path):
    model: str | Path = _folder(tmp, mode.model, mode.base) if mode.base else mode.model
    scanner = _scanner(manifest, model, "hf", mode.limit)
    return scanner, collect(scanner, scanner.scan(), str(manifest))


def _within(scanner, limit: int | None) -> frozenset[str]:
    """The video rows a scan counts (limit None), or those within the limit."""
    return frozenset(
        outcome.result.sample.location
        for outcome in scanner.scan()
        if any(info.kind == "video" for info in outcome.result.media)
        and outcome.result.seq_len is not None
        and (limit is None or outcome.result.seq_len <= limit)
    )


@cache
def _video_rows_within(manifest: Path, mode: Mode, keys: tuple[tuple[str, Any], ...], tmp: Path) -> int:
    """Video rows within the limit in a fresh scan with the keys written as a user writes them, of the rows
    the mode's own scan counts (the shares are of those: a row whose clip the current setting refuses, e.g.
    one shorter than Gemma 4's num_frames 32, is not searched)."""
    searched = _within(_stats(manifest, mode, tmp)[0], None)
    scanner = _scanner(manifest, _folder(tmp, mode.model, mode.base + keys), "hf", mode.limit)
    return len(_within(scanner, mode.limit) & searched)


def _key(name: str) -> str:
    """The file key a knob's name leads with (its other keys are the knob's `also`)."""
    return name.split(" with ")[0]


# -- names and notes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_knobs_are_named_as_the_file_names_them(dataset, mode, tmp):  # noqa: F811
    scanner, stats = _stats(dataset, mode, tmp)
    video = stats.video
    assert video is not None and video.rows >= 3 and video.rows_uncounted == 0
    assert tuple(knob.name for knob in video.knobs) == mode.names
    assert all(knob.mode.startswith("transformers (") and knob.limit == mode.limit for knob in video.knobs)
    for words in mode.notes:
        assert any(words in note for note in video.notes), (words, video.notes)
    assert not any("not searched yet" in note for note in video.notes)


def test_a_knob_that_is_not_in_effect_now_says_so(dataset, tmp):  # noqa: F811
    """Where every frame is kept, the frame count is written with do_sample_frames: true; it has no current
    value, and the report says the current setting keeps every frame."""
    scanner, stats = _stats(dataset, MODES[6], tmp)
    (knob,) = video_knobs(scanner)[0]
    assert knob.current is None and knob.also == (("do_sample_frames", True),)
    assert stats.video.knobs[0].current is None
    from rich.console import Console

    from vlmlint.report.stats_text import _video

    console = Console(record=True, width=200)
    _video(stats.video, console)
    text = console.export_text()
    assert "num_frames with do_sample_frames: true (now every frame)" in text
    assert "the current setting (every frame kept) keeps" in text


def test_frame_knobs_follow_each_sampler_rule():
    """models/knobs.frame_knobs on the settings the fixtures do not hold: the knob in effect, the other a note."""
    from dataclasses import replace

    from vlmlint.models import gemma4, internvl
    from vlmlint.models.knobs import frame_knobs

    gemma = gemma4.Gemma4VideoSettings(num_frames=None)  # do_sample_frames on, neither set: every frame
    (knob,), (note,) = frame_knobs(gemma, None, "Gemma4VideoProcessor", "either")
    assert (knob.name, knob.current, knob.also) == ("num_frames", None, ())
    assert note == "fps: unset, Gemma4VideoProcessor keeps every frame"
    assert knob.at(8)[1] == replace(gemma, num_frames=8)
    intern = internvl.InternVLVideoSettings(448, 448, True, True, 8, 2.0, True, 256)
    (knob,), (note,) = frame_knobs(intern, None, "InternVLVideoProcessor", "frames first")
    assert (knob.name, knob.current) == ("num_frames", 8) and "num_frames wins over fps" in note
    (knob,), (note,) = frame_knobs(
        replace(intern, num_frames=None), None, "InternVLVideoProcessor", "frames first"
    )
    assert (knob.name, knob.current) == ("fps", 2.0) and "replaces the fps sampling" in note
    assert (
        frame_knobs(replace(intern, num_frames=None, fps=None), None, "X", "frames first")[0][0].current
        is None
    )


# -- exact lengths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_lengths_at_the_current_values_are_the_scanned_lengths(dataset, mode, tmp):  # noqa: F811
    """Every knob with a current value, set to it, gives each video row the scan's own length (the run-length
    shortcut and composing and tokenizing again agree with it)."""
    scanner, _ = _stats(dataset, mode, tmp)
    knobs = [knob for knob in video_knobs(scanner)[0] if knob.current is not None]
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
            assert video_settings == scanner.model.video_settings
            assert lengths(pipeline, video_settings) == row.seq_len, (row.sample.location, knob.name)
            counts = measure.counts(row, pipeline, video_settings)
            assert measure.composed(row, counts, video_settings) == row.seq_len
            checked += 1
        checked += not knobs
    assert checked >= 3


# -- the recommendations fit ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_recommendations_fit_in_a_fresh_scan_and_are_the_largest(dataset, mode, tmp):  # noqa: F811
    """Each recommended value, written into video_preprocessor_config.json with the keys it needs, keeps the
    rows it says in a fresh scan; the next grid value up keeps fewer than the share needs."""
    scanner, stats = _stats(dataset, mode, tmp)
    knobs = {knob.name: knob for knob in video_knobs(scanner)[0]}
    checked = 0
    for found in stats.video.knobs:
        knob = knobs[found.name]
        seen = set()
        for item in found.recommendations:
            if item.value is None or item.value in seen:
                continue
            seen.add(item.value)
            keys = ((_key(found.name), item.value), *knob.also)
            assert _video_rows_within(dataset, mode, keys, tmp) == item.rows_kept, (found.name, item)
            assert item.rows_kept >= item.rows_required
            following = [v for v in knob.values if v > item.value]
            assert item.top == (not following)
            if following:
                keys = ((_key(found.name), following[0]), *knob.also)
                assert _video_rows_within(dataset, mode, keys, tmp) < item.rows_required, (
                    found.name,
                    following[0],
                )
            checked += 1
        assert found.rows_at_current <= found.rows_fittable
    assert checked >= len(mode.names)
