"""The video knobs' recommended settings against the real processors (reference venv only): for each mode of
tests/test_stats_video_families.py, the processor folder with each recommended value written into its
video_preprocessor_config.json (and the mode's own settings) is loaded by transformers itself, and every
video row of the dataset, as vlmlint renders it, goes through the real processor's __call__ with its clips
(blank frames of the clip's facts as transformers' default reader reports them, VideoMeta.as_torchcodec,
as the recorders in fixtures/reference give them; the reader itself is tests/test_video_probe.py's): the
input_ids are as long as vlmlint's scan of the same folder says, and a clip vlmlint refuses the real
processor refuses too."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from fixtures.reference._video import blank_clip  # noqa: E402
from tests.test_stats_video import _scanner, dataset  # noqa: E402, F401 (the module-scoped dataset fixture)
from tests.test_stats_video_families import IDS, MODES, _folder, _key, _stats, tmp  # noqa: E402, F401
from vlmlint.stats import video_knobs  # noqa: E402


def _processor(folder: Path):
    from transformers import AutoProcessor

    if folder.name.startswith("gemma-4"):  # the fixture has no audio feature extractor file
        from fixtures.reference import gemma4_video

        config = json.loads((folder / "video_preprocessor_config.json").read_text())
        return gemma4_video.processor(config, folder=str(folder))
    return AutoProcessor.from_pretrained(str(folder))


def _real_length(processor, text: str, metas) -> int | None:
    """len(input_ids) of the real processor's call, or None where it refuses the clips."""
    videos, metadata = [], []
    for meta in (meta.as_torchcodec() for meta in metas):  # as transformers' default reader reports the clip
        video, info = blank_clip(meta.frames, meta.height, meta.width, meta.fps)
        info.duration = meta.duration
        videos.append(video)
        metadata.append(info)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            output = processor(text=[text], videos=videos, video_metadata=metadata, return_tensors="pt")
    except Exception:  # noqa: BLE001 (the processor's own refusal)
        return None
    return int(output["input_ids"].shape[1])


def _compare(manifest: Path, folder: Path, limit: int) -> int:
    scanner = _scanner(manifest, folder, "hf", limit)
    processor = _processor(folder)
    compared = 0
    for outcome in scanner.scan():
        row = outcome.result
        metas = [info.video for info in row.media if info.kind == "video"]
        if not metas:
            continue
        assert all(meta is not None for meta in metas)
        text = scanner.encoder.render(row.sample.messages, videos=True)
        assert _real_length(processor, text, metas) == row.seq_len, (folder.name, row.sample.location)
        compared += 1
    return compared


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_recommended_settings_count_as_the_real_processor(dataset, mode, tmp):  # noqa: F811
    scanner, stats = _stats(dataset, mode, tmp)
    knobs = {knob.name: knob for knob in video_knobs(scanner)[0]}
    folders = {_folder(tmp, mode.model, mode.base)}
    for found in stats.video.knobs:
        knob = knobs[found.name]
        for item in found.recommendations:
            if item.value is not None:
                folders.add(
                    _folder(tmp, mode.model, mode.base + ((_key(found.name), item.value), *knob.also))
                )
    for folder in sorted(folders):
        assert _compare(dataset, folder, mode.limit) == 11
