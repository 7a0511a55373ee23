"""The real-processor fallback counts videos through the real processor (issue 20, part 3): Video-LLaMA3.

Video-LLaMA3's video processor drops patches by their pixel content (use_token_compression), so no
header formula can count it. vlmlint's fallback runs VideoLlama3Processor itself on each clip as
transformers 5.24's default reader gives it (models/fallback.decode_video). Here every readable fixture
clip, in three settings (the class defaults: every frame, compression on; fps sampling; compression
off), is scanned by vlmlint and compared with the real processor called directly: the chat template
through `processor.apply_chat_template`, the clip through torchcodec where it is usable (the default
reader itself), else through transformers' own `read_video_pyav` with torchcodec's recorded metadata
(fixtures/clips_torchcodec.yaml: its frame count and fps), for the clips PyAV decodes to the frames
torchcodec records (rotated clips need torchcodec). seq_len and each video's tokens must agree.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.readers import iter_samples

FOLDER = PROCESSORS / "videollama3-tiny"
CLIPS = DATASETS / "media" / "clips"
RECORD = yaml.safe_load((Path(__file__).parents[2] / "fixtures" / "clips_torchcodec.yaml").read_text())[
    "clips"
]
READABLE = sorted(name for name, facts in RECORD.items() if "error" not in facts)
VARIANTS = {
    "defaults": {},
    "fps1": {"do_sample_frames": True, "fps": 1, "min_frames": 2},
    "no-compression": {"use_token_compression": False},
}


def _torchcodec() -> bool:
    from transformers.utils import is_torchcodec_usable

    return is_torchcodec_usable(decode="video")


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def folder(request, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp(request.param) / "videollama3"
    shutil.copytree(FOLDER, path)
    config = json.loads((path / "video_preprocessor_config.json").read_text())
    (path / "video_preprocessor_config.json").write_text(json.dumps({**config, **VARIANTS[request.param]}))
    return path


def _direct(processor, clips: list[str]) -> list[int]:
    """input_ids of the real processor called directly on one user turn with the clips."""
    from transformers.video_utils import VideoMetadata, read_video_pyav

    content = [{"type": "video"} for _ in clips] + [{"type": "text", "text": "Describe it"}]
    conversation = [
        {"role": "user", "content": content},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    text = processor.apply_chat_template(conversation, tokenize=False)
    kwargs = {}
    if _torchcodec():
        kwargs["videos"] = [str(CLIPS / clip) for clip in clips]
    else:
        videos, metadata = [], []
        for clip in clips:
            facts = RECORD[clip]
            frames, _ = read_video_pyav(
                str(CLIPS / clip), lambda metadata, n=facts["total_num_frames"], **kw: np.arange(n)
            )
            assert list(frames.shape) == [facts["decoded"][0], facts["decoded"][2], facts["decoded"][3], 3]
            videos.append(frames)
            metadata.append(
                VideoMetadata(
                    total_num_frames=facts["total_num_frames"],
                    fps=facts["fps"],
                    width=facts["width"],
                    height=facts["height"],
                    duration=facts["duration"],
                    video_backend="torchcodec",
                    frames_indices=np.arange(facts["total_num_frames"]),
                )
            )
        kwargs = {"videos": videos, "video_metadata": metadata}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = processor(text=[text], **kwargs)
    return [int(i) for i in output["input_ids"][0]]


def _comparable(clip: str) -> bool:
    """Without torchcodec: the clips PyAV decodes to torchcodec's frames (header frame count, no rotation)."""
    if _torchcodec():
        return True
    facts = RECORD[clip]
    import av

    with av.open(str(CLIPS / clip)) as container:
        stream = container.streams.video[0]
        same = stream.frames == facts["total_num_frames"] and (stream.height, stream.width) == (
            facts["height"],
            facts["width"],
        )
    return same


def _scan(folder: Path, tmp_path: Path, rows: list[list[str]]):
    for clips in {clip for row in rows for clip in row}:
        shutil.copy(CLIPS / clips, tmp_path / clips)
    lines = [
        {
            "messages": [
                {"role": "user", "content": "<video>" * len(row) + "Describe it"},
                {"role": "assistant", "content": "ok"},
            ],
            "videos": row,
        }
        for row in rows
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    model = load_model(str(folder))
    assert model.video_refusal is None
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)), model=model)
    return model, [
        outcome.result for outcome in scanner.scan_samples(iter_samples(str(tmp_path / "rows.jsonl")))
    ]


def test_fallback_counts_every_clip_as_the_real_processor(folder, tmp_path):
    clips = [clip for clip in READABLE if _comparable(clip)]
    assert len(clips) == len(READABLE) if _torchcodec() else len(clips) >= 8
    pairs = [[clips[0], clips[1]], [clips[2], clips[-1]]]
    model, results = _scan(folder, tmp_path, [[clip] for clip in clips] + pairs)
    processor = model.settings.processor
    video_id = processor.video_token_id
    compared = 0
    for row, result in zip([[clip] for clip in clips] + pairs, results, strict=True):
        try:
            ids = _direct(processor, row)
        except Exception as exc:  # the real processor refuses the clip: so does the row's count
            assert result.count_error == f"processor: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            compared += 1
            continue
        assert result.count_error is None, (row, result.count_error)
        assert result.seq_len == len(ids), row
        tokens = [info.tokens for info in result.media]
        assert sum(tokens) == ids.count(video_id), row
        if len(row) == 1:
            assert tokens == [ids.count(video_id)]
        else:  # each video alone, as the real processor counts it alone
            assert tokens == [_direct(processor, [clip]).count(video_id) for clip in row]
        assert result.text_tokens == len(ids) - ids.count(video_id)
        assert all("fallback: real processor" in info.counted_by for info in result.media)
        compared += 1
    assert compared == len(clips) + 2


def test_compression_drops_tokens_of_a_still_clip(tmp_path):
    """The reason no header formula can count Video-LLaMA3: the same clip size and frame count give
    fewer tokens where frames repeat (compression) than where they change."""
    import av

    for name, still in (("still.mp4", True), ("moving.mp4", False)):
        with av.open(str(tmp_path / name), "w") as container:
            stream = container.add_stream("libx264", rate=8)
            stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
            rng = np.random.default_rng(0)
            base = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
            for _ in range(8):
                pixels = base if still else rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": "<video>x"}], "videos": [name]}) + "\n"
            for name in ("still.mp4", "moving.mp4")
        )
    )
    model = load_model(str(FOLDER))
    scanner = Scanner(ScanConfig(dataset="", model=str(FOLDER)), model=model)
    still, moving = (
        outcome.result.media[0].tokens for outcome in scanner.scan_samples(iter_samples(str(rows)))
    )
    assert still < moving
