"""vlmlint/video.py's header probe against a full PyAV decode and transformers' own PyAV reader.

Every clip of fixtures/datasets/media/clips/ (fixtures/clips.py; manifest.yaml holds the encoder's
settings): the probe's frames, fps, size and rotation equal the settings; a full decode yields
exactly `frames` frames, each of the probed size and rotation, whose display matrix is the one read
from the header; transformers 5.24's `read_video_pyav` (transformers/video_utils.py, numpy only:
no torch) gives the same metadata where the header has a frame count and total_num_frames=0 (then
fails to sample) where it has none. Clips that cannot be probed raise VideoProbeError, which
vlmlint/media.py turns into VLM201; readable videos fill MediaInfo.video.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import yaml

from vlmlint import video as probe_module
from vlmlint.media import media_info
from vlmlint.records import ImageError, ImageInfo, ImageRef, MediaRef, VideoMeta
from vlmlint.video import VideoProbeError, probe_video

ROOT = Path(__file__).resolve().parent.parent
CLIPS = ROOT / "fixtures" / "datasets" / "media" / "clips"
DOC = yaml.safe_load((CLIPS / "manifest.yaml").read_text(encoding="utf-8"))
MANIFEST = DOC["clips"]
READABLE = sorted(name for name, spec in MANIFEST.items() if spec["error"] is None)
BROKEN = sorted(name for name, spec in MANIFEST.items() if spec["error"] is not None)


def _decoded(path: Path) -> list:
    with av.open(str(path)) as container:
        return list(container.decode(video=0))


def _frame_matrix(frame) -> tuple[int, ...] | None:
    """The DISPLAYMATRIX side data FFmpeg attached to a decoded frame (9 int32), None if none."""
    for data in frame.side_data:
        if data.type == av.sidedata.sidedata.Type.DISPLAYMATRIX:
            return struct.unpack("<9i", bytes(data))
    return None


def test_the_manifest_lists_every_clip_and_the_fixture_is_small():
    on_disk = {path.name for path in CLIPS.iterdir() if path.name != "manifest.yaml"}
    assert on_disk == set(MANIFEST)
    assert len(READABLE) >= 20 and len(BROKEN) >= 4
    assert sum(path.stat().st_size for path in CLIPS.iterdir()) < 100_000
    containers = {MANIFEST[name]["container"] for name in READABLE}
    assert containers == {"mp4", "mov", "mkv", "webm", "avi"}
    assert {MANIFEST[name]["rotation"] for name in READABLE} == {0, 90, 180, 270}


@pytest.mark.parametrize("name", READABLE)
def test_probe_gives_the_encoder_settings(name):
    spec = MANIFEST[name]
    meta = probe_video(str(CLIPS / name))
    fps = Fraction(*spec["fps"])
    assert (meta.frames, meta.header_frames, meta.frames_from) == (
        spec["frames"],
        spec["header_frames"],
        spec["frames_from"],
    )
    assert meta.fps == float(fps) and meta.duration == spec["frames"] / float(fps)
    assert (meta.width, meta.height, meta.rotation) == (spec["width"], spec["height"], spec["rotation"])
    data = (CLIPS / name).read_bytes()
    with open(CLIPS / name, "rb") as handle:
        assert probe_video(data) == probe_video(handle) == meta  # bytes, an open file, a path alike


@pytest.mark.parametrize("name", READABLE)
def test_probe_equals_a_full_decode(name):
    meta = probe_video(CLIPS / name)
    frames = _decoded(CLIPS / name)
    assert len(frames) == meta.frames  # packets counted (MKV/WebM) or header frames (MP4/MOV/AVI)
    assert {(frame.width, frame.height) for frame in frames} == {(meta.width, meta.height)}
    assert {frame.rotation % 360 for frame in frames} == {meta.rotation}
    # The matrix read from the header is the one FFmpeg's demuxer gives the frames, bit for bit.
    with open(CLIPS / name, "rb") as handle:
        fmt = MANIFEST[name]["container"]
        if fmt in ("mp4", "mov"):
            header = probe_module._bmff_matrix(handle)
        elif fmt in ("mkv", "webm"):
            header = probe_module._matroska_matrix(handle)
        else:
            header = None
    assert header == _frame_matrix(frames[0])


@pytest.mark.parametrize("name", READABLE)
def test_probe_equals_transformers_read_video_pyav(name):
    from transformers.video_utils import load_video, read_video_pyav

    meta = probe_video(CLIPS / name)
    seen = []

    def every_frame(metadata, **kwargs):
        seen.append(metadata)
        return np.arange(metadata.total_num_frames)

    if meta.frames_from == "header":
        video, metadata = read_video_pyav(str(CLIPS / name), every_frame)
        assert metadata.total_num_frames == meta.frames == len(video)
        assert metadata.fps == meta.fps and metadata.duration == pytest.approx(meta.duration, rel=1e-12)
        assert (metadata.width, metadata.height) == (meta.width, meta.height)
        assert video.shape[1:] == (meta.height, meta.width, 3)  # the stored frames: no rotation applied
        return
    # MKV/WebM: the header has no frame count; transformers' PyAV reader sees 0 frames (VLM210).
    with pytest.raises(IndexError):
        read_video_pyav(str(CLIPS / name), every_frame)
    assert seen[0].total_num_frames == meta.header_frames == 0 and seen[0].fps == meta.fps
    with pytest.raises(IndexError):
        load_video(str(CLIPS / name), backend="pyav")
    with pytest.raises(ValueError, match="exceeds total_num_frames=0"):
        load_video(str(CLIPS / name), backend="pyav", fps=2)


@pytest.mark.parametrize("name", BROKEN)
def test_clips_that_cannot_be_probed_raise_and_are_vlm201(name):
    with pytest.raises(VideoProbeError, match=MANIFEST[name]["error"]):
        probe_video(CLIPS / name)
    info = media_info(
        MediaRef("video", name, path=str(CLIPS / name)), allow_outside_root=False, image_header=None
    )
    assert info.error_code == ImageError.UNREADABLE and info.video is None
    assert info.error.startswith(f"{name}: ") and MANIFEST[name]["error"] in info.error


def test_a_cut_fast_start_mp4_still_says_its_frames_but_decodes_fewer():
    """Why the index is checked: the header's count is a promise the cut file cannot keep."""
    path = CLIPS / "cut_faststart.mp4"
    with av.open(str(path)) as container:
        assert container.streams.video[0].frames == 12
        decoded = 0
        with pytest.raises(av.InvalidDataError):  # the decoder meets the cut after the frames it has
            for _ in container.decode(video=0):
                decoded += 1
    assert decoded < 12


def test_a_cut_mkv_probes_to_the_frames_it_still_has():
    meta = probe_video(CLIPS / "cut_clusters.mkv")
    assert meta.frames == len(_decoded(CLIPS / "cut_clusters.mkv")) == MANIFEST["cut_clusters.mkv"]["frames"]
    assert 0 < meta.frames < 20


def test_other_errors():
    with pytest.raises(VideoProbeError, match="cannot open the file"):
        probe_video("/nonexistent/clip.mp4")
    with pytest.raises(VideoProbeError, match="not a video container"):
        probe_video(b"")
    png = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (8, 8)).save(png, "PNG")
    meta = probe_video(png.getvalue())  # FFmpeg reads an image as a 1-frame stream without a count
    assert (meta.frames, meta.header_frames, meta.frames_from) == (1, 0, "packets")


def test_media_info_fills_the_video_of_files_and_embedded_bytes():
    name = "h264_320x240_24fps.mp4"
    path = CLIPS / name
    meta = probe_video(path)
    from_file = media_info(
        MediaRef("video", name, path=str(path)), allow_outside_root=False, image_header=None
    )
    embedded = media_info(
        MediaRef("video", "data:video/mp4;base64,...", data=path.read_bytes()),
        allow_outside_root=False,
        image_header=None,
    )
    assert from_file.error_code is None and from_file.video == meta == embedded.video
    audio = media_info(
        MediaRef("audio", "a.wav", path=str(CLIPS / "audio_only.wav")),
        allow_outside_root=False,
        image_header=None,
    )
    assert audio.error_code is None and audio.video is None  # audio is only sniffed


def test_media_info_of_a_frame_list_reads_its_first_frame_header():
    frames = tuple(ImageRef(f"f/{i}.jpg", path=f"/data/f/{i}.jpg") for i in range(3))
    sizes = {"f/0.jpg": (64, 48), "f/1.jpg": (32, 24), "f/2.jpg": (64, 48)}

    def header(ref: ImageRef) -> ImageInfo:
        width, height = sizes[ref.reference]
        return ImageInfo(ref.reference, width=width, height=height, format="JPEG")

    info = media_info(
        MediaRef("video", "[3 frames]", frames=frames), allow_outside_root=False, image_header=header
    )
    assert info.frames == 3 and info.error_code is None
    assert info.video == VideoMeta(
        frames=3, fps=None, duration=None, width=64, height=48, frames_from="frame list"
    )


def test_importing_vlmlint_does_not_import_av():
    code = "import sys, vlmlint, vlmlint.media, vlmlint.video, vlmlint.engine; print('av' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_rebuilding_the_clips_gives_the_same_bytes():
    """fixtures/clips.py is deterministic with this PyAV (the committed bytes were made by it)."""
    sys.path.insert(0, str(ROOT / "fixtures"))
    try:
        import clips
    finally:
        sys.path.remove(str(ROOT / "fixtures"))
    recorded = DOC["av"]
    if av.__version__ != recorded:
        pytest.skip(f"the clips were encoded with PyAV {recorded}, this is {av.__version__}")
    for name, container, codec, width, height, rate, frames, extra in clips.CLIPS:
        assert (
            clips.encode(container, codec, width, height, rate, frames, **extra)
            == (CLIPS / name).read_bytes()
        ), name


TORCHCODEC = yaml.safe_load((ROOT / "fixtures" / "clips_torchcodec.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", READABLE)
def test_probe_equals_transformers_torchcodec_reader_as_recorded(name):
    """read_video_torchcodec (torchcodec 0.17; fixtures/clips_torchcodec.py recorded it): the same frames.

    Where they differ, the record says how: torchcodec turns a 90/270 clip upright (its width and
    height swap), its fps is frames / the span of the stream's timestamps (content_fps; not
    average_rate: 60.06 for a 60 fps MKV), and it cannot decode the last frame of an AVI with B-frames.
    """
    meta = probe_video(CLIPS / name)
    record = TORCHCODEC["clips"][name]
    if name.endswith(".avi"):
        assert "no more frames left to decode" in record["error"]
        return
    width, height = (meta.height, meta.width) if meta.rotation in (90, 270) else (meta.width, meta.height)
    assert record["total_num_frames"] == meta.frames == record["decoded"][0]
    assert (record["width"], record["height"]) == (width, height)
    assert record["decoded"][2:] == [height, width]
    # torchcodec's fps is content_fps to the bit (frames over the timestamps' span), which average_rate
    # is not always (the 29.97 fps MP4 in its last bits, MKV/WebM by up to 1%)
    assert record["fps"] == meta.content_fps
    assert record["fps"] == pytest.approx(meta.fps, rel=0.02)
    if meta.frames_from == "header":
        assert record["duration"] == pytest.approx(meta.duration, rel=1e-9)


@pytest.mark.parametrize("name", BROKEN)
def test_torchcodec_refuses_the_clips_the_probe_refuses(name):
    assert "error" in TORCHCODEC["clips"][name]
