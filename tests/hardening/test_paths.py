"""Paths out of the dataset folder are reported (VLM104) and not read; URLs are not fetched.

"Not read" is proven by an image outside the folder that would decode: every file PIL opens is
recorded, and the outside one must never be among them (nor any header fact about it reported).
"""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

import vlmlint.images
from tests.hardening.conftest import MODEL, shape, time_limit
from tests.test_remote import served  # noqa: F401 (the loopback HTTP server fixture)
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL)


@pytest.fixture()
def opened(monkeypatch):
    """Every path or file object PIL's Image.open is given during the test."""
    seen: list[str] = []
    real_open = vlmlint.images.Image.open

    def spy(source, *args, **kwargs):
        name = getattr(source, "name", None)  # vlmlint hands PIL the file it opened (os.open, O_NONBLOCK)
        if isinstance(source, str):
            seen.append(os.path.realpath(source))
        elif isinstance(name, int):
            seen.append(os.path.realpath(f"/proc/self/fd/{name}"))
        else:
            seen.append("<bytes>")
        return real_open(source, *args, **kwargs)

    monkeypatch.setattr(vlmlint.images.Image, "open", spy)
    return seen


@pytest.fixture()
def layout(tmp_path):
    """tmp/dataset (the scanned folder, with in.jpg) and tmp/outside/secret.jpg, a valid image."""
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    dataset.mkdir()
    outside.mkdir()
    Image.new("RGB", (320, 240), "red").save(dataset / "in.jpg")
    Image.new("RGB", (640, 480), "blue").save(outside / "secret.jpg")
    return dataset, outside


def llava(image: str, index: int = 0) -> dict:
    return {
        "id": f"r{index}",
        "image": image,
        "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}],
    }


def scan(target, model, **options):
    config = ScanConfig(dataset=str(target), model=MODEL, jobs=1, **options)
    with time_limit(30, "the scan"):
        return list(Scanner(config, model=model).scan())


def codes(outcome) -> list[str]:
    return sorted({finding.code for finding in outcome.findings})


@pytest.mark.parametrize(
    "case,reference",
    [
        ("absolute path to an image outside the folder", "{outside}/secret.jpg"),
        ("../ escape out of the folder", "../outside/secret.jpg"),
        ("many ../ and a path through the folder", "sub/../../{outside_name}/secret.jpg"),
        ("file:// URL of an image outside the folder", "file://{outside}/secret.jpg"),
        ("symlink inside the folder to an image outside it", "link.jpg"),
        ("image inside a symlinked folder that points outside", "linked/secret.jpg"),
    ],
)
def test_outside_paths_are_reported_and_not_read(layout, model, opened, case, reference, record):
    dataset, outside = layout
    os.symlink(outside / "secret.jpg", dataset / "link.jpg")
    os.symlink(outside, dataset / "linked")
    reference = reference.format(outside=outside, outside_name=outside.name)
    (dataset / "data.jsonl").write_text(json.dumps(llava(reference)) + "\n")
    (outcome,) = scan(dataset / "data.jsonl", model)
    assert codes(outcome) == ["VLM104"]
    assert outcome.result.images[0].width is None  # no header fact about the outside file
    assert str(outside / "secret.jpg") not in opened
    (allowed,) = scan(dataset / "data.jsonl", model, allow_outside_root=True)
    assert "VLM104" not in codes(allowed) and allowed.result.images[0].width == 640
    message = shape(outcome.findings[0].message, dataset.parent)
    record(
        "paths",
        case,
        f'VLM104 "{message}"; the file is never opened; with --allow-outside-root it is read (640x480)',
    )


def test_symlink_that_stays_inside_and_image_root(layout, model, opened, record):
    dataset, outside = layout
    os.symlink("in.jpg", dataset / "alias.jpg")
    (dataset / "data.jsonl").write_text(json.dumps(llava("alias.jpg")) + "\n")
    (outcome,) = scan(dataset / "data.jsonl", model)
    assert codes(outcome) == [] and outcome.result.images[0].width == 320
    record("paths", "symlink inside the folder to an image inside it", "read; no finding")
    (dataset / "data.jsonl").write_text(json.dumps(llava("secret.jpg")) + "\n")
    (outcome,) = scan(dataset / "data.jsonl", model, image_root=str(outside))
    assert codes(outcome) == [] and outcome.result.images[0].width == 640
    record(
        "paths",
        "--image-root naming the folder that holds the images",
        "read; no finding (the root is --image-root)",
    )


def test_data_files_symlinked_out_of_a_scanned_folder(layout, model, record):
    dataset, outside = layout
    (outside / "rows.jsonl").write_text(json.dumps(llava("in.jpg")) + "\n")
    (outside / "caption.txt").write_text("a secret caption")
    (dataset / "data.jsonl").write_text(json.dumps(llava("in.jpg")) + "\n")
    os.symlink(outside / "rows.jsonl", dataset / "more.jsonl")
    outcomes = scan(dataset, model)
    assert [codes(o) for o in outcomes] == [[], ["VLM104"]]
    message = shape(outcomes[1].findings[0].message, dataset.parent)
    record(
        "paths",
        "manifest in a scanned folder that is a symlink to a file outside it",
        f'VLM104 "{message}"; not read',
    )
    assert [codes(o) for o in scan(dataset, model, allow_outside_root=True)] == [[], []]

    sidecar = dataset.parent / "sidecar"
    sidecar.mkdir()
    Image.new("RGB", (320, 240)).save(sidecar / "cat.jpg")
    os.symlink(outside / "caption.txt", sidecar / "cat.txt")
    (outcome,) = scan(sidecar, model)
    assert codes(outcome) == ["VLM104"]
    message = shape(outcome.findings[0].message, dataset.parent)
    record(
        "paths",
        "sidecar caption cat.txt that is a symlink to a file outside the folder",
        f'VLM104 "{message}"; not read',
    )

    imagefolder = dataset.parent / "imagefolder"
    imagefolder.mkdir()
    (outside / "metadata.jsonl").write_text(json.dumps({"file_name": "cat.jpg", "text": "x"}) + "\n")
    os.symlink(outside / "metadata.jsonl", imagefolder / "metadata.jsonl")
    (outcome,) = scan(imagefolder, model)
    assert codes(outcome) == ["VLM104"]
    record("paths", "imagefolder metadata.jsonl that is a symlink out of the folder", "VLM104; not read")


def test_urls_are_not_fetched_unless_allowed(tmp_path, model, served, record):  # noqa: F811
    base, requests = served
    Image.new("RGB", (320, 240)).save(tmp_path / "in.jpg")
    (tmp_path / "data.jsonl").write_text(json.dumps(llava(f"{base}/a.jpg")) + "\n")
    (outcome,) = scan(tmp_path / "data.jsonl", model)
    assert codes(outcome) == ["VLM105"] and requests == []
    (outcome,) = scan(tmp_path / "data.jsonl", model, allow_remote=True)
    assert codes(outcome) == [] and len(requests) == 1
    record(
        "paths",
        "http:// image URL",
        "VLM105; the server sees no request; with --allow-remote it is fetched once",
    )
    for url in ("ftp://example.invalid/a.jpg", "s3://bucket/a.jpg"):
        (tmp_path / "data.jsonl").write_text(json.dumps(llava(url)) + "\n")
        (outcome,) = scan(tmp_path / "data.jsonl", model)
        assert codes(outcome) == ["VLM103"]
    record(
        "paths",
        "ftp:// and s3:// image references",
        "read as relative paths inside the folder: VLM103 (not found); nothing fetched",
    )
