"""Videos and audio clips: read from every shape they come in, checked like images, never passed in silence.

vlmlint does not count video or audio tokens yet (issue 20 brings exact counts): every row naming a
video or an audio clip gets VLM109 and its lengths are lower bounds; missing, unreadable, outside and
remote clips and placeholder counts are the image rules' findings. fixtures/datasets/media holds the
rows (fixtures/media.py; test_fixtures.py checks each row's exact codes).
"""

from __future__ import annotations

import json
import pickle
import shutil

import orjson
import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.readers import iter_samples
from vlmlint.readers.layouts import ImageResolver, row_to_sample, split_placeholders
from vlmlint.records import MediaRef, Part
from vlmlint.report import row_record
from vlmlint.template_cache import conversation_for_template, without_media

MEDIA = DATASETS / "media"
MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()


def _sample(row, layout=None):
    return row_to_sample(row, layout=layout, resolve=ImageResolver("/data"), source="m.jsonl", index=0)


def _turns(text="<video>What?"):
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "This."}]


@pytest.fixture(scope="module")
def scanner():
    return Scanner(ScanConfig(dataset=str(MEDIA), model=MODEL, jobs=1))


# -- readers --------------------------------------------------------------------------------------


def test_video_and_audio_placeholders_become_media_parts():
    assert split_placeholders("<image><video>a<audio>b") == (
        Part(is_image=True),
        Part(media="video"),
        Part(text="a"),
        Part(media="audio"),
        Part(text="b"),
    )
    assert split_placeholders("<image>\nWhat?") == (Part(is_image=True), Part(text="\nWhat?"))


def test_sharegpt_videos_audios_and_frame_lists():
    sample = _sample(
        {
            "messages": _turns("<video><video><audio>?"),
            "videos": ["a.mp4", ["f/1.jpg", "f/2.jpg"]],
            "audios": ["a.wav"],
        }
    )
    assert sample.layout == "sharegpt" and not sample.problems
    kinds = [(ref.kind, ref.path, len(ref.frames)) for ref in sample.media]
    assert kinds == [("video", "/data/a.mp4", 0), ("video", None, 2), ("audio", "/data/a.wav", 0)]
    assert [frame.path for frame in sample.media[1].frames] == ["/data/f/1.jpg", "/data/f/2.jpg"]
    assert sample.media[1].reference == "f/1.jpg ... (2 frames)"
    assert [p.media for p in sample.messages[0].parts] == ["video", "video", "audio", ""]


def test_conversations_with_videos_is_sharegpt_not_llava():
    row = {
        "conversations": [{"from": "human", "value": "<video>Hi"}, {"from": "gpt", "value": "Yo"}],
        "videos": ["a.mp4"],
    }
    sample = _sample(row)
    assert sample.layout == "sharegpt" and [ref.kind for ref in sample.media] == ["video"]


def test_llava_video_field_and_llava_video_image_placeholder():
    qwen = _sample(
        {
            "video": "a.mp4",
            "conversations": [{"from": "human", "value": "<video>\nHi"}, {"from": "gpt", "value": "Yo"}],
        }
    )
    assert qwen.layout == "llava" and [ref.path for ref in qwen.media] == ["/data/a.mp4"]
    # LLaVA-Video writes <image> for its video: without an `image`, those placeholders are the video's.
    llava_video = _sample(
        {
            "video": "a.mp4",
            "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
        }
    )
    assert [p.media for p in llava_video.messages[0].parts] == ["video", ""] and not llava_video.images
    both = _sample(
        {
            "image": "a.jpg",
            "video": "a.mp4",
            "conversations": [{"from": "human", "value": "<image><video>Hi"}, {"from": "gpt", "value": "Yo"}],
        }
    )
    assert [p.is_image for p in both.messages[0].parts] == [True, False, False] and len(both.images) == 1


def test_alpaca_reads_videos_and_audios():
    sample = _sample({"instruction": "<audio>What?", "output": "Rain.", "audios": ["r.wav"]})
    assert sample.layout == "alpaca" and [ref.kind for ref in sample.media] == ["audio"]


@pytest.mark.parametrize(
    "part,kind,reference",
    [
        ({"type": "video", "video": "a.mp4"}, "video", "a.mp4"),
        ({"type": "video", "path": "a.mp4"}, "video", "a.mp4"),
        ({"type": "video_url", "video_url": {"url": "https://x.org/a.mp4"}}, "video", "https://x.org/a.mp4"),
        ({"type": "video", "video": ["f/1.jpg", "f/2.jpg"]}, "video", "f/1.jpg ... (2 frames)"),
        ({"type": "audio", "audio": "a.wav"}, "audio", "a.wav"),
        ({"type": "audio_url", "audio_url": {"url": "https://x.org/a.wav"}}, "audio", "https://x.org/a.wav"),
        (
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            "audio",
            "<input_audio wav>",
        ),
    ],
)
def test_openai_typed_media_parts(part, kind, reference):
    row = {
        "messages": [
            {"role": "user", "content": [part, {"type": "text", "text": "What?"}]},
            {"role": "assistant", "content": "This."},
        ]
    }
    sample = _sample(row)
    assert sample.layout == "openai" and not sample.problems, sample.problems
    assert [(ref.kind, ref.reference) for ref in sample.media] == [(kind, reference)]
    assert sample.messages[0].parts[0] == Part(media=kind)
    if part["type"] == "input_audio":
        assert sample.media[0].data == b"RIFF"


def test_openai_media_given_inline_and_listed_is_malformed():
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "video", "video": "a.mp4"}]},
            {"role": "assistant", "content": "x"},
        ],
        "videos": ["b.mp4"],
    }
    assert _sample(row).problems[0].code == "VLM101"


@pytest.mark.parametrize(
    "videos,message",
    [(3, '"videos" must be a string or a list'), ([[]], "has no frames"), ([""], "video reference must be")],
)
def test_malformed_video_fields_are_vlm101(videos, message):
    problems = _sample({"messages": _turns(), "videos": videos}).problems
    assert problems and problems[0].code == "VLM101" and message in problems[0].message


def test_samples_with_media_pickle_and_compare():
    sample = _sample({"messages": _turns("<video><audio>"), "videos": [["f/1.jpg"]], "audios": ["a.wav"]})
    copy = pickle.loads(pickle.dumps(sample))
    assert (
        copy == sample
        and isinstance(copy.media[0], MediaRef)
        and copy.media[0].frames == sample.media[0].frames
    )


def test_llamafactory_dataset_info_reads_videos_and_audios():
    from vlmlint.readers.llamafactory import read_llamafactory

    rows = list(read_llamafactory(str(MEDIA), "mllm_video_demo,mllm_audio_demo,mllm_video_audio_demo"))
    assert len(rows) == 9 and all(not row.problems for row in rows)
    assert [[ref.kind for ref in row.media] for row in rows] == [["video"]] * 3 + [["audio"]] * 3 + [
        ["video", "audio"]
    ] * 3
    assert rows[0].media[0].path == str(MEDIA / "mllm_demo_data" / "1.mp4")  # media_dir: the data folder


# -- the scan -------------------------------------------------------------------------------------


def _has_media(sample) -> bool:
    return bool(sample.media) or any(part.media for message in sample.messages for part in message.parts)


def test_no_video_or_audio_row_passes_without_a_count_or_a_finding(scanner):
    rows = counted = 0
    for outcome in scanner.scan_samples(iter_samples(str(MEDIA))):
        result = outcome.result
        sample = result.sample
        if not _has_media(sample):
            continue
        rows += 1
        codes = {finding.code for finding in outcome.findings}
        if result.seq_len is not None and result.media and not result.lengths_lower_bound:
            counted += 1  # every clip counted (videos: Qwen2-VL's video processor), in seq_len
            assert all(info.kind == "video" and info.tokens > 0 for info in result.media), sample.location
            media_tokens = sum(info.tokens for info in result.media)
            assert result.seq_len == result.text_tokens + sum(result.image_tokens) + media_tokens
            assert "VLM109" not in codes
            continue
        assert codes, sample.location
        if any(info.tokens is None for info in result.media):
            assert "VLM109" in codes and result.lengths_lower_bound, sample.location
    assert rows == 33  # every row of the media fixture but its one image-only row
    assert counted == 13


def test_media_are_left_out_of_the_rendered_text(scanner):
    sample = _sample({"messages": _turns("Look: <video> and tell."), "videos": ["a.mp4"]})
    plain = _sample({"messages": _turns("Look:  and tell.")})
    assert scanner.render(sample.messages) == scanner.render(plain.messages)
    # what the template is given: video parts left out where videos are not counted, in place where they are
    assert conversation_for_template(without_media(sample.messages)) == conversation_for_template(
        plain.messages
    )
    assert {"type": "video"} in conversation_for_template(sample.messages)[0]["content"]


def test_llamafactory_video_demo_is_counted():
    result = runner.invoke(
        app,
        ["scan", str(MEDIA), "--dataset", "mllm_video_demo", "--model", MODEL, "-f", "json", "--verify", "0"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (
        report["findings"] == []
        and "media_not_counted" not in report["summary"]
        or (report["summary"]["media_not_counted"]["rows"] == 0)
    )


def test_llamafactory_audio_demos_get_vlm109_on_every_row_and_exit_0_at_the_default_fail_level():
    for name in ("mllm_audio_demo", "mllm_video_audio_demo"):
        result = runner.invoke(
            app, ["scan", str(MEDIA), "--dataset", name, "--model", MODEL, "-f", "json", "--verify", "0"]
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert [f["code"] for f in report["findings"]] == ["VLM109"] * 3, name
        assert report["summary"]["media_not_counted"]["rows"] == 3
        failing = runner.invoke(
            app, ["scan", str(MEDIA), "--dataset", name, "--model", MODEL, "--fail-on", "warning", "-q"]
        )
        assert failing.exit_code == 1, failing.output


def test_llamafactory_pipeline_on_the_video_demo():
    result = runner.invoke(
        app,
        [
            "scan",
            str(MEDIA),
            "--dataset",
            "mllm_video_demo",
            "--pipeline",
            "llamafactory",
            "--model",
            MODEL,
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # counted as LLaMA-Factory samples them (tests/test_pipeline_llamafactory.py)
    assert report["findings"] == []
    assert report["summary"].get("media_not_counted", {"rows": 0})["rows"] == 0


def test_broken_media_rows_exit_1_and_the_summary_says_so():
    result = runner.invoke(app, ["scan", str(MEDIA / "broken.jsonl"), "--model", MODEL, "--verify", "0"])
    assert result.exit_code == 1, result.output
    # (the two rows whose one readable video has two or no placeholder are counted, and refused: VLM301)
    assert "media not counted: 7 row(s) hold 6 videos and 1 audio clip" in " ".join(result.output.split())
    report = json.loads(
        runner.invoke(app, ["scan", str(MEDIA / "broken.jsonl"), "--model", MODEL, "-f", "json"]).output
    )
    assert report["summary"]["media_not_counted"] == {"rows": 7, "videos": 6, "audios": 1}
    for code in ("VLM103", "VLM104", "VLM105", "VLM201", "VLM301", "VLM109"):
        assert report["summary"]["by_code"].get(code), code


@pytest.mark.parametrize("case", ["a 0-byte clip", "two <video> for one video", "a missing video"])
def test_each_broken_clip_alone_exits_1(case, tmp_path):
    doc = json.loads((DATASETS.parent / "expected" / "media.json").read_text())
    line = next(r["line"] for r in doc["manifests"]["broken.jsonl"]["rows"] if r["note"] == case)
    shutil.copytree(MEDIA / "mllm_demo_data", tmp_path / "mllm_demo_data")
    row = (MEDIA / "broken.jsonl").read_text().splitlines()[line - 1]
    (tmp_path / "one.jsonl").write_text(row + "\n")
    result = runner.invoke(app, ["scan", str(tmp_path / "one.jsonl"), "--model", MODEL, "-f", "json"])
    assert result.exit_code == 1, result.output
    codes = {f["code"] for f in json.loads(result.output)["findings"]}
    # the video of the two-placeholder row is readable and counted; its placeholders are the error
    assert ("VLM301" if case == "two <video> for one video" else "VLM109") in codes


def test_a_lower_bound_is_never_said_to_fit(tmp_path):
    shutil.copytree(MEDIA / "mllm_demo_data", tmp_path / "mllm_demo_data")
    words = "lorem " * 150
    rows = [  # audio: not counted, so the lengths are lower bounds
        {"messages": _turns(f"<audio>{words}"), "audios": ["mllm_demo_data/1.mp3"]},
        {"messages": _turns("<audio>" + "lorem " * 90), "audios": ["mllm_demo_data/1.mp3"]},
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=MODEL, max_length=300, jobs=1))
    outcomes = list(scanner.scan())
    lengths = [o.result.seq_len for o in outcomes]
    assert lengths[0] > 300 >= lengths[1] > 0.9 * 300, lengths
    too_long = [f for f in outcomes[0].findings if f.code == "VLM401"]
    assert too_long and "a lower bound" in too_long[0].message and f"at least {lengths[0]}" in too_long[0].fix
    assert "max_pixels" not in too_long[0].fix  # no image setting can be said to make it fit
    near = [f for f in outcomes[1].findings if f.code == "VLM405"]
    assert near and "may not fit at all" in near[0].message


def test_stats_say_lengths_are_lower_bounds(tmp_path):
    from vlmlint.stats import collect

    shutil.copytree(MEDIA / "mllm_demo_data", tmp_path / "mllm_demo_data")
    rows = [  # two audio rows (not counted: lower bounds) and a counted video row
        {"messages": _turns("<audio>Transcribe."), "audios": ["mllm_demo_data/1.mp3"]},
        {"messages": _turns("<audio>Transcribe."), "audios": ["mllm_demo_data/2.wav"]},
        {"messages": _turns("<video>Describe."), "videos": ["mllm_demo_data/1.mp4"]},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scanner = Scanner(ScanConfig(dataset=str(path), model=MODEL, jobs=1))
    stats = collect(scanner, scanner.scan(), str(path))
    assert stats.rows_lower_bound == 2 and stats.to_dict()["rows_lower_bound"] == 2
    result = runner.invoke(app, ["stats", str(path), "--model", MODEL])
    assert "2 counted row(s) hold video or audio that vlmlint does not count" in " ".join(
        result.output.split()
    )


def test_two_workers_give_the_same_media_findings_as_one_process(tmp_path):
    shutil.copytree(MEDIA / "mllm_demo_data", tmp_path / "mllm_demo_data")
    lines = []
    for name in ("broken.jsonl", "frames.jsonl", "mixed.jsonl"):
        lines += (MEDIA / name).read_text().splitlines()
    (tmp_path / "rows.jsonl").write_text("\n".join(lines * 12) + "\n")

    def run(jobs):
        config = build_config(str(tmp_path / "rows.jsonl"), {}, {"model": MODEL, "jobs": jobs})
        scanner = Scanner(ScanConfig(**{**config.__dict__, "batch_size": 16}))
        return [
            (orjson.dumps(row_record(o)), [f.to_dict() for f in o.findings], o.result.media)
            for o in scanner.scan()
        ]

    one, two = run(1), run(2)
    assert len(one) == 15 * 12 and one == two
    assert sum(bool(media) for _, _, media in two) == 13 * 12


def test_the_fallback_says_why_its_videos_are_not_counted(tmp_path):
    """The real-processor fallback counts images only: a video row is VLM109 with the reason (no crash);
    a video processor that drops patches by pixel content (Video-LLaMA3's use_token_compression) is
    said to be impossible to count from headers."""
    from vlmlint.models import _fallback_video_refusal, load_model

    model = load_model(MODEL, force_fallback=True)
    # without torchvision its video processor is a stand-in (tests/test_fallback_video.py); with it the
    # real processor counts the videos (tests/reference/test_fallback_video.py)
    assert model.video_refusal.startswith(
        "Qwen2VLProcessor's videos are not counted: install torch and torchvision to count "
        "Qwen2VLProcessor videos through its real processor"
    )
    scanner = Scanner(ScanConfig(dataset="", model=MODEL), model=model)
    outcome = next(iter(scanner.scan_samples(iter_samples(str(MEDIA / "openai.jsonl")))))
    assert [f.code for f in outcome.findings] == ["VLM109"]
    assert "install torch and torchvision" in outcome.findings[0].message
    folder = tmp_path / "videollama3"
    folder.mkdir()
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps({"video_processor_type": "VideoLlama3VideoProcessor", "use_token_compression": True})
    )
    refusal = _fallback_video_refusal(str(folder), "VideoLlama3Processor", "video_llama_3")
    assert "cannot be predicted from headers" in refusal and "pixel content" in refusal
