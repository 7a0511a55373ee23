"""WebDataset tar shards: the same rows scanned from shards and from a JSONL give the same counts."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile

import orjson
import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.readers import DatasetError, iter_samples
from vlmlint.readers.webdataset import expand_braces, read_webdataset

MODEL = str(PROCESSORS / "qwen2-vl-small")
DEMO = DATASETS / "demo"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _demo_rows() -> list[dict]:
    rows = []
    for line in (DEMO / "data.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def make_shards(folder, rows, *, shards: int = 3, gzip_shard: int | None = 1) -> list[str]:
    """The demo's conversations as shards: KEY.json (the row without its images) and KEY.N.ext members."""
    paths = []
    per_shard = -(-len(rows) // shards)
    for number in range(shards):
        name = f"part-{number:03d}.tar" + (".gz" if number == gzip_shard else "")
        path = folder / name
        with tarfile.open(path, "w:gz" if number == gzip_shard else "w") as tar:
            for position, row in enumerate(rows[number * per_shard : (number + 1) * per_shard]):
                key = f"{number:03d}{position:05d}"
                row = dict(row)
                images = row.pop("image")
                images = images if isinstance(images, list) else [images]
                members = []
                for n, image in enumerate(images):
                    file = DEMO / image
                    if not file.is_file():
                        members.append(image)  # a missing file stays a path, resolved beside the shard
                        continue
                    member = f"{key}.{n}{os.path.splitext(image)[1]}"
                    _add(tar, member, file.read_bytes())
                    members.append(member)
                if len(images) > 1 or any(not (DEMO / image).is_file() for image in images):
                    row["image"] = members  # named; a single member is attached without a name
                _add(tar, f"{key}.json", json.dumps(row).encode())
                _add(tar, f"{key}.cls", b"0")
        paths.append(str(path))
    return paths


def _outcomes(target, **settings):
    config = build_config(str(target), {}, {"model": MODEL, **settings})
    return list(Scanner(config).scan())


def _counts(outcomes):
    return [(o.result.seq_len, o.result.image_tokens, [f.code for f in o.findings]) for o in outcomes]


@pytest.fixture()
def demo_copy(tmp_path):
    """The demo's images beside the shards (for the row whose image is missing: resolved the same way)."""
    shutil.copytree(DEMO / "images", tmp_path / "images")
    return tmp_path


def test_shards_equal_the_jsonl(demo_copy):
    rows = _demo_rows()
    make_shards(demo_copy, rows)
    (demo_copy / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    expected = _counts(_outcomes(demo_copy / "rows.jsonl"))
    for target in (demo_copy / "part-{000..002}.tar*", demo_copy / "part-*"):
        got = _outcomes(target)
        assert _counts(got) == expected
    codes = {code for _, _, found in expected for code in found}
    assert {"VLM103", "VLM201", "VLM301"} <= codes
    # Sources are the shards, positions count from 0 in each, locations name the key.
    got = _outcomes(demo_copy / "part-{000..002}.tar*")
    sources = [o.result.sample.source for o in got]
    assert sources == sorted(sources) and len(set(sources)) == 3
    first = got[0].result.sample
    assert first.line is None and first.index == 0 and first.location.endswith("part-000.tar:00000000")
    assert [o.result.sample.index for o in got if o.result.sample.source == sources[-1]][:2] == [0, 1]


def test_folder_of_shards(demo_copy, tmp_path):
    rows = _demo_rows()
    folder = tmp_path / "shards"
    folder.mkdir()
    make_shards(folder, rows, gzip_shard=None)
    samples = list(iter_samples(str(folder)))
    assert len(samples) == len(rows)
    assert [s.source for s in samples][0].endswith("part-000.tar")


def test_captions_from_txt_and_json(tmp_path):
    image = (DATASETS / "_images" / "vga_640x480.jpg").read_bytes()
    with tarfile.open(tmp_path / "caps.tar", "w") as tar:
        _add(tar, "dir/a.jpg", image)
        _add(tar, "dir/a.txt", b"A red square.\n")
        _add(tar, "b.png", (DATASETS / "_images" / "sq_56x56.png").read_bytes())
        _add(tar, "b.json", b'{"caption": "A small square.", "width": 56}')
        _add(tar, "c.webp.txt", b"not an image member")  # key c, extension webp.txt
        _add(tar, ".hidden.jpg", b"skipped")
    samples = list(
        read_webdataset(str(tmp_path / "caps.tar"), layout=None, image_root=None, source="caps.tar")
    )
    assert [s.key for s in samples] == ["dir/a", "b", "c"]
    a, b, c = samples
    assert a.layout == b.layout == "captions"
    assert a.messages[1].parts[0].text == "A red square." and b.messages[1].parts[0].text == "A small square."
    assert a.images[0].data == image and a.images[0].reference == "dir/a.jpg"
    assert c.problems[0].code == "VLM101" and "no image member" in c.problems[0].message
    assert a.fingerprint != b.fingerprint
    (tmp_path / "caps.jsonl").write_text(
        json.dumps({"image": str(DATASETS / "_images" / "vga_640x480.jpg"), "text": "A red square."}) + "\n"
    )
    tar_counts = _counts(_outcomes(tmp_path / "caps.tar"))[0][:2]
    jsonl_counts = _counts(_outcomes(tmp_path / "caps.jsonl", allow_outside_root=True))[0][:2]
    assert tar_counts == jsonl_counts and tar_counts[0]


def test_broken_and_missing_shards_are_rows_and_the_scan_goes_on(demo_copy):
    rows = _demo_rows()[:12]
    paths = make_shards(demo_copy, rows, shards=3, gzip_shard=None)
    whole = open(paths[1], "rb").read()
    with open(paths[1], "wb") as handle:
        handle.write(whole[: len(whole) // 2])  # cut inside a member
    (demo_copy / "part-003.tar").write_bytes(b"this is not a tar file at all" * 40)
    samples = list(iter_samples(str(demo_copy / "part-{000..004}.tar")))
    by_source: dict[str, list] = {}
    for sample in samples:
        by_source.setdefault(os.path.basename(sample.source), []).append(sample)
    assert len(by_source["part-000.tar"]) == 4 and not any(s.problems for s in by_source["part-000.tar"])
    truncated = by_source["part-001.tar"]
    assert 1 <= len(truncated) <= 4 and truncated[-1].problems[0].code == "VLM101"
    assert "truncated" in truncated[-1].problems[0].message
    assert not any(s.problems for s in truncated[:-1])
    assert len(by_source["part-002.tar"]) == 4
    assert [s.problems[0].code for s in by_source["part-003.tar"]] == ["VLM101"]
    assert "cannot be opened" in by_source["part-004.tar"][0].problems[0].message
    with pytest.raises(DatasetError, match="names no file"):
        list(iter_samples(str(demo_copy / "nothing-*.tar")))
    with pytest.raises(DatasetError, match="no such file"):
        list(iter_samples(str(demo_copy / "rows-{0..1}.jsonl")))


def test_oversized_member_and_duplicate_member(tmp_path, monkeypatch):
    import vlmlint.readers.webdataset as webdataset

    monkeypatch.setattr(webdataset, "MAX_IMAGE_MEMBER_BYTES", 100)
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        _add(tar, "a.jpg", b"x" * 200)
        _add(tar, "a.txt", b"cap")
        _add(tar, "b.txt", b"one")
        _add(tar, "b.txt", b"two")
    samples = list(read_webdataset(str(tmp_path / "s.tar"), layout=None, image_root=None, source="s.tar"))
    assert "above 100" in samples[0].problems[0].message
    assert "appears twice" in samples[1].problems[0].message


def test_brace_expansion():
    assert expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert expand_braces("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert expand_braces("{a,b}/x-{0..1}.tar") == ["a/x-0.tar", "a/x-1.tar", "b/x-0.tar", "b/x-1.tar"]
    assert expand_braces("plain.tar") == ["plain.tar"]


def test_cli_scans_a_shard_pattern(demo_copy):
    make_shards(demo_copy, _demo_rows())
    result = CliRunner().invoke(
        app,
        [
            "scan",
            str(demo_copy / "part-{000..002}.tar*"),
            "--model",
            MODEL,
            "-q",
            "--verify",
            "0",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 1, result.output
    report = orjson.loads(result.stdout)
    assert report["summary"]["samples"] == len(_demo_rows())
    assert {f["source"].rsplit("/", 1)[-1] for f in report["findings"]} <= {
        "part-000.tar",
        "part-001.tar.gz",
        "part-002.tar",
    }


def test_conversation_rows_get_their_image_members(tmp_path):
    png = (DATASETS / "_images" / "sq_56x56.png").read_bytes()
    jpg = (DATASETS / "_images" / "vga_640x480.jpg").read_bytes()
    openai = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "image": "k1.a.png"}, {"type": "text", "text": "hi"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
        ]
    }
    sharegpt = {
        "messages": [
            {"role": "user", "content": "<image><image>two"},
            {"role": "assistant", "content": "ok"},
        ],
        "images": ["jpg", "k2.b.png"],
    }
    with tarfile.open(tmp_path / "c.tar", "w") as tar:
        _add(tar, "k1.a.png", png)
        _add(tar, "k1.json", json.dumps(openai).encode())
        _add(tar, "k2.jpg", jpg)
        _add(tar, "k2.b.png", png)
        _add(tar, "k2.json", json.dumps(sharegpt).encode())
        _add(tar, "k3.jpg", jpg)
        _add(tar, "k3.json", b"{not json")
    first, second, third = read_webdataset(str(tmp_path / "c.tar"), layout=None, image_root=None, source="c")
    assert first.layout == "openai" and [i.data for i in first.images] == [png]
    assert second.layout == "openai"  # the shard's layout, from its first sample, as a file's
    assert [i.data for i in second.images] == [jpg, png] and not second.problems
    assert third.problems[0].code == "VLM101" and "not valid JSON" in third.problems[0].message


def test_an_empty_image_member_is_a_finding_not_a_path(tmp_path):
    (tmp_path / "a.jpg").write_bytes((DATASETS / "_images" / "vga_640x480.jpg").read_bytes())
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        _add(tar, "a.jpg", b"")  # not the a.jpg beside the shard
        _add(tar, "a.txt", b"cap")
    (sample,) = read_webdataset(str(tmp_path / "s.tar"), layout=None, image_root=None, source="s.tar")
    assert sample.problems[0].code == "VLM101" and "a.jpg is empty" in sample.problems[0].message
