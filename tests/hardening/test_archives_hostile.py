"""Hostile WebDataset tars, image folders, sidecar captions and folder trees: each meets a stated bound.

Huge inputs are cheap here: sparse files (a header that declares 1.5 GB, then a hole), header blocks
repeated, and gzip members of zeros concatenated (a few MB that decompress to gigabytes).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

from PIL import Image

from tests.hardening.conftest import read_isolated, run_guarded, shape, time_limit

GIB = 2**30


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), "red").save(buffer, "PNG")
    return buffer.getvalue()


def _header(name: bytes, size: int, kind: bytes = b"0", *, checksum: bool = True) -> bytes:
    """One ustar header block (name up to 100 bytes), its checksum computed."""
    block = bytearray(512)
    block[: len(name[:100])] = name[:100]
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    if size < 8**11:
        block[124:136] = b"%011o\0" % size
    else:  # GNU base-256
        block[124:136] = b"\x80" + size.to_bytes(11, "big")
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    value = sum(block) if checksum else sum(block) + 1
    block[148:156] = b"%06o\0 " % value
    return bytes(block)


def _member(name: bytes, data: bytes) -> bytes:
    return _header(name, len(data)) + data + bytes(-len(data) % 512)


def _good(key: str) -> bytes:
    return _member(f"{key}.png".encode(), _png()) + _member(f"{key}.txt".encode(), b"a red square")


def _sparse_tar(path: Path, parts: list) -> None:
    """parts: bytes written as they are, or an int: a hole of that many bytes (then padding)."""
    with open(path, "wb") as handle:
        for part in parts:
            if isinstance(part, int):
                handle.seek(part + (-part % 512), os.SEEK_CUR)
            else:
                handle.write(part)
        handle.truncate()


def _scan(target: Path, tmp: Path, *extra: str):
    run = run_guarded("scan", str(target), "-f", "json", "-q", "--verify", "0", *extra, cwd=tmp)
    assert run.peak_mb < 1024, run.peak_mb
    return run


def _messages(run, code: str = "VLM101") -> list[str]:
    return [f["message"] for f in run.report["findings"] if f["code"] == code]


def _dataset(tmp_path: Path) -> tuple[Path, Path]:
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    dataset.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("not to be read")
    return dataset, outside


# ---- WebDataset tars ----


def test_one_key_repeated_20k_times(tmp_path, record):
    dataset, outside = _dataset(tmp_path)
    block = _header(b"a.png", 0)
    with open(dataset / "s.tar", "wb") as handle:
        handle.write(_good("first"))
        handle.write(block * 20_000)
        handle.write(_good("last"))
    run = _scan(dataset / "s.tar", tmp_path)
    assert run.touched(outside) == []
    (message,) = _messages(run)
    assert "appears twice" in message and "more than 1,024 members" in message and "more" in message
    assert run.report["summary"]["samples"] == 3
    record(
        "bounds",
        "WebDataset tar: one key repeated in 20,000 members",
        f"one VLM101 on that sample, its problems listed up to 5 then counted ({shape(message[:150])}...);"
        " the samples around it are read; peak memory below 1 GiB",
    )


def test_100k_members_are_streamed_not_listed(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    with open(dataset / "s.tar", "wb") as handle:
        for chunk in range(10):
            handle.write(b"".join(_header(b"noext%07d" % (chunk * 10_000 + i), 0) for i in range(10_000)))
        handle.write(_good("k"))
    with time_limit(120):
        result = read_isolated(dataset / "s.tar", timeout=110)
    assert len(result.rows) == 1 and not result.rows[0][2] and result.peak_mb < 300, result.peak_mb
    record(
        "bounds",
        "WebDataset tar with 100,000 members (names without an extension, skipped as webdataset skips them)",
        "read as a stream: no list of members is kept (peak memory below 300 MB); the one sample is read",
    )


def test_members_per_shard_bound(tmp_path, record, monkeypatch):
    from vlmlint.readers import webdataset

    monkeypatch.setattr(webdataset, "MAX_SHARD_MEMBERS", 10)
    path = tmp_path / "s.tar"
    path.write_bytes(b"".join(_good(f"k{i}") for i in range(8)))
    with time_limit(20):
        samples = list(webdataset.read_webdataset(str(path), layout=None, image_root=None, source="s"))
    assert [bool(s.problems) for s in samples] == [False] * 5 + [True]
    message = samples[-1].problems[0].message
    assert "more than 10 members" in message
    record(
        "bounds",
        "WebDataset tar with more members than MAX_SHARD_MEMBERS (1,000,000; 10 in the test)",
        f"the samples before are read; VLM101 {shape(message)}",
    )


def test_gnu_longname_declaring_1_5_gb(tmp_path, record):
    dataset, outside = _dataset(tmp_path)
    long_name = b"x" * 90 + b"/sample.png"  # the member's own header keeps the name's first 100 bytes
    _sparse_tar(
        dataset / "whole.tar",
        [
            _good("before"),
            _header(b"././@LongLink", 1_500_000_000, b"L"),
            1_500_000_000,
            _member(long_name, _png()),
            _good("after"),
        ],
    )
    _sparse_tar(
        dataset / "cut.tar", [_good("before"), _header(b"././@LongLink", 1_500_000_000, b"L"), b"x" * 4096]
    )
    with time_limit(60):
        run = _scan(dataset, tmp_path)
    assert run.touched(outside) == []
    messages = _messages(run)
    whole = next(m for m in messages if "above 65,536" in m)
    cut = next(m for m in messages if "truncated" in m)
    assert "GNU long name header is 1,500,000,000 bytes" in whole and "x" * 90 in whole
    assert run.report["summary"]["samples"] == 5  # before, the bad one, after; before, the cut
    record(
        "bounds",
        "WebDataset tar: a GNU long name header declaring 1.5 GB (sparse), then its member",
        f"refused by its declared size, not read: VLM101 on that sample, named by its header's first 100 bytes"
        f" ({shape(whole[-95:])}); the next sample is read; peak memory below 1 GiB",
    )
    record(
        "bounds",
        "WebDataset tar: a GNU long name header declaring 1.5 GB, the file cut after 4 KB",
        f"the samples before are read; VLM101 {shape(cut)}",
    )


def test_pax_header_declaring_1_5_gb_and_malformed_pax(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    _sparse_tar(
        dataset / "s.tar",
        [
            _header(b"PaxHeader/a", 1_500_000_000, b"x"),
            1_500_000_000,
            _member(b"a.png", _png()),
            _header(b"PaxHeader/b", 20, b"x"),
            b"99 path=nothing\n" + bytes(496),
            _member(b"b.png", _png()),
            _good("c"),
        ],
    )
    with time_limit(60):
        run = _scan(dataset / "s.tar", tmp_path)
    big, bad = _messages(run)
    assert "pax header is 1,500,000,000 bytes, above 65,536" in big and "pax header is malformed" in bad
    assert run.report["summary"]["samples"] == 3
    record(
        "bounds",
        "WebDataset tar: a pax header declaring 1.5 GB (sparse)",
        f"refused by its declared size: VLM101 {shape(big)}; the next sample is read",
    )
    record(
        "manifests",
        "WebDataset tar: a pax header whose record length is wrong",
        f"VLM101 {shape(bad)}; the next sample is read",
    )


def _gzip_zeros(handle, total: int) -> None:
    """`total` zero bytes as concatenated gzip members: a few KB each for 16 MiB."""
    piece = gzip.compress(bytes(16 * 2**20), compresslevel=9)
    for _ in range(total // (16 * 2**20)):
        handle.write(piece)


def test_gzip_bombs(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    with open(dataset / "longname.tar.gz", "wb") as handle:
        handle.write(gzip.compress(_good("before") + _header(b"././@LongLink", 1_500_000_000, b"L")))
        _gzip_zeros(handle, 1_500_000_000)
    with open(dataset / "member.tar.gz", "wb") as handle:
        handle.write(gzip.compress(_good("before") + _header(b"zeros.cls", 10 * GIB)))
        _gzip_zeros(handle, 10 * GIB)
    sizes = sorted(os.path.getsize(dataset / name) for name in ("longname.tar.gz", "member.tar.gz"))
    assert sizes[-1] < 12 * 2**20
    with time_limit(120):
        run = _scan(dataset, tmp_path)
    messages = _messages(run)
    assert len(messages) == 2 and all("decompresses to more than 100 times its size" in m for m in messages)
    assert run.report["summary"]["samples"] == 4
    record(
        "bounds",
        "WebDataset .tar.gz of 1.4 MB: a GNU long name header declaring 1.5 GB of zeros",
        "refused by its declared size; skipping it stops at MAX_EXPANSION (100 times the file, at least 256 MiB"
        " decompressed): VLM101 'shard cannot be read from sample ... on: it decompresses to more than 100 times"
        " its size'; the sample before is read",
    )
    record(
        "bounds",
        "WebDataset .tar.gz of 10 MB holding a 10 GB member of zeros (gzip bomb)",
        "decompression stops at MAX_EXPANSION (100 times the file's size, at least 256 MiB): VLM101 on the rest"
        " of the shard; the samples before are read; bounded time, peak memory below 1 GiB",
    )


def test_twenty_200_mb_image_members_and_big_texts(tmp_path, record):
    dataset, outside = _dataset(tmp_path)
    parts: list = []
    for i in range(20):
        parts += [_header(b"k%02d.png" % i, 200_000_000), 200_000_000]
    parts += [_header(b"t.png", 1000), 1000, _header(b"t.json", 100_000_000), 100_000_000]
    parts += [_header(b"m.0.png", 30 * 2**20), 30 * 2**20, _header(b"m.1.png", 30 * 2**20), 30 * 2**20]
    parts += [_header(b"m.2.png", 30 * 2**20), 30 * 2**20, _good("z")]
    _sparse_tar(dataset / "s.tar", parts)
    with time_limit(90):
        run = _scan(dataset / "s.tar", tmp_path)
    assert run.touched(outside) == []
    messages = _messages(run)
    assert sum("the most an image member may hold" in m for m in messages) == 20
    text = next(m for m in messages if "t.json" in m)
    many = next(m for m in messages if "m.2.png" in m)
    assert "16,777,216" in text and "add up to more than 67,108,864" in many
    record(
        "bounds",
        "WebDataset tar: 20 samples with a 200 MB image member each (sparse; the issue's 2-4.5 GB)",
        f"not read: 20 VLM101 ({shape(messages[0])}); peak memory below 1 GiB",
    )
    record(
        "bounds",
        "WebDataset tar: a 100 MB .json member",
        f"not read: VLM101 {shape(text)}",
    )
    record(
        "bounds",
        "WebDataset tar: one sample of three 30 MiB image members",
        f"the third is not read: VLM101 {shape(many)}",
    )


def test_bad_checksum_and_sparse_member(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    (dataset / "a.tar").write_bytes(_good("a") + _header(b"b.png", 0, checksum=False) + _good("c"))
    (dataset / "b.tar").write_bytes(_header(b"s.png", 0, b"S") + _good("c"))
    run = _scan(dataset, tmp_path)
    bad, sparse = _messages(run)
    assert "not a valid tar header" in bad and "sparse" in sparse
    record("manifests", "WebDataset tar: a header with a wrong checksum mid-shard", f"VLM101 {shape(bad)}")
    record(
        "manifests", "WebDataset tar: a GNU sparse member", f"VLM101 {shape(sparse)}; the next sample is read"
    )


def test_long_names_are_read_not_lost(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    key = "d" * 150 + "/" + "n" * 120
    for fmt, name in ((tarfile.GNU_FORMAT, "gnu.tar"), (tarfile.PAX_FORMAT, "pax.tar")):
        with tarfile.open(dataset / name, "w", format=fmt) as tar:
            for ext, data in (("png", _png()), ("txt", b"a red square")):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    run = _scan(dataset, tmp_path)
    assert run.report["summary"]["samples"] == 2 and not _messages(run)
    record(
        "manifests",
        "WebDataset tar: a 270-character sample name, as GNU long name and as pax path",
        "read as one sample each, keyed by the whole name (no sample lost)",
    )


# ---- image folders, sidecar captions, folder trees ----


def test_3_gb_sidecar_captions(tmp_path, record):
    dataset, outside = _dataset(tmp_path)
    for stem, ext in (("a", ".txt"), ("b", ".json")):
        (dataset / f"{stem}.png").write_bytes(_png())
        with open(dataset / f"{stem}{ext}", "wb") as handle:
            handle.truncate(3 * GIB)
    (dataset / "c.png").write_bytes(_png())
    (dataset / "c.txt").write_text("a red square")
    with time_limit(60):
        run = _scan(dataset, tmp_path)
    assert run.touched(outside) == []
    messages = _messages(run)
    assert len(messages) == 2 and all(
        "3,221,225,472 bytes, above 16,777,216: not read" in m for m in messages
    )
    assert run.report["summary"]["samples"] == 3
    record(
        "bounds",
        "image folder: 3 GB sidecar captions (a.txt, b.json; sparse) beside their images",
        f"not read: VLM101 on that row ({shape(messages[0])}); the other rows are read; peak memory below 1 GiB",
    )


def test_folders_deeper_than_the_recursion_limit(tmp_path, record):
    dataset, outside = _dataset(tmp_path)
    (dataset / "top.png").write_bytes(_png())
    deep = str(dataset)
    for _ in range(1500):  # 3,000 characters: within PATH_MAX (os.makedirs would recurse)
        deep = os.path.join(deep, "a")
        os.mkdir(deep)
    Path(deep, "bottom.png").write_bytes(_png())
    (dataset / "loop").symlink_to(dataset, target_is_directory=True)  # a symlink loop
    try:
        with time_limit(60):
            run = _scan(dataset, tmp_path)
    finally:  # pytest's cleanup (shutil.rmtree) recurses: take the tree down here, bottom up
        os.remove(os.path.join(deep, "bottom.png"))
        while deep != str(dataset):
            os.rmdir(deep)
            deep = os.path.dirname(deep)
    assert run.touched(outside) == []
    (message,) = _messages(run)
    assert "64 folders deep" in message and run.report["summary"]["samples"] == 2
    record(
        "bounds",
        "image folder nested 1,500 levels deep (beyond Python's recursion limit), and a symlink loop",
        "walked without recursion; folders below 64 levels are not entered: one VLM101 'folder a/a/.../a: it is"
        " 64 folders deep; its subfolders are not read'; the symlinked folder is not followed (no loop)",
    )


def test_100k_files_in_one_folder(tmp_path, record):
    dataset, _ = _dataset(tmp_path)
    files = dataset / "many"
    files.mkdir()
    for i in range(100_000):
        (files / f"{i}.cls").touch()
    (dataset / "a.png").write_bytes(_png())
    with time_limit(120):
        run = _scan(dataset, tmp_path)
    assert run.report["summary"]["samples"] == 1
    record(
        "bounds",
        "image folder with 100,000 other files in one subfolder",
        "listed once per walk, one folder at a time (at most 2,000,000 names a folder); the image is read;"
        " peak memory below 1 GiB",
    )


def _imagefolder(dataset: Path, csv_text: str) -> None:
    (dataset / "a.png").write_bytes(_png())
    (dataset / "metadata.csv").write_text(csv_text, encoding="utf-8")


def test_hostile_metadata_csv(tmp_path, record):
    cases = {
        "a field over the csv module's limit (200,000 characters)": f"file_name,text\na.png,ok\na.png,{'x' * 200_000}\na.png,ok\n",
        "an unclosed quote": 'file_name,text\na.png,ok\na.png,"never closed\na.png,ok\n' + "x,y\n" * 50_000,
        "a 20 MB line without a newline": "file_name,text\na.png,ok\n" + "y" * 20_000_000,
        "more fields than the header names": "file_name,text\na.png,ok,extra,more\n",
    }
    for number, (case, text) in enumerate(cases.items()):
        dataset = tmp_path / f"d{number}"
        dataset.mkdir()
        _imagefolder(dataset, text)
        with time_limit(60):
            run = _scan(dataset, tmp_path)
        messages = _messages(run)
        if case.startswith("more fields"):
            assert not messages and run.report["summary"]["samples"] == 1
            outcome = "read as a row (the extra values are kept under __extra_fields__)"
        else:
            (message,) = messages
            assert "the rest is not read" in message and run.report["summary"]["samples"] >= 2
            outcome = f"the rows before it are read; VLM101 {shape(message)}"
        record("manifests", f"imagefolder metadata.csv: {case}", outcome)
