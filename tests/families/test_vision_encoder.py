"""Differential tests: vlmlint's ViT / CLIP / SigLIP counts against the real transformers classes.

The real image processors (ViTImageProcessorPil, CLIPImageProcessorPil, SiglipImageProcessorPil) give
the processed size (pixel_values' height and width); the encoder sequence is (H // patch) x (W // patch)
patches plus CLS (ViT, CLIP), and the vision model's position table is (image_size // patch)^2 (+ CLS),
which the real config classes and the processed hub-size image must both give. The real CLIPProcessor /
SiglipProcessor give the text input_ids a caption becomes.
"""

from __future__ import annotations

import io
import json
import warnings
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, load_model, vision_encoder
from vlmlint.readers import iter_samples

VIT = PROCESSORS / "vit-base-patch16-224"
VIT_NORESIZE = PROCESSORS / "vit-base-patch16-224-noresize"
CLIP = PROCESSORS / "clip-vit-large-patch14-336"
SIGLIP = PROCESSORS / "siglip-so400m-patch14-384"
FOLDERS = {VIT: 197, VIT_NORESIZE: 197, CLIP: 577, SIGLIP: 729}


def _processor_class(variant: str):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    return {"vit": ViTImageProcessorPil, "clip": CLIPImageProcessorPil, "siglip": SiglipImageProcessorPil}[
        variant
    ]


def make(variant: str, model_config: dict, **kwargs):
    """The real PIL image processor with `kwargs`, and vlmlint's settings read from it."""
    processor = _processor_class(variant)(**kwargs)
    return processor, vision_encoder.settings_from(processor, {}, model_config)


def real_size(processor, height: int, width: int) -> tuple[int, int]:
    image = Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))
    pixels = processor(images=[image])["pixel_values"][0]
    return tuple(int(v) for v in pixels.shape[-2:])


def assert_same(processor, settings_, height: int, width: int) -> None:
    got = vision_encoder.count(height, width, settings_)
    resized = real_size(processor, height, width)
    assert (got.resized_height, got.resized_width) == resized, (height, width, settings_)
    rows, cols = resized[0] // settings_.patch_size, resized[1] // settings_.patch_size
    assert got.grid == (rows, cols)
    assert got.tokens == rows * cols + settings_.cls_tokens


VIT_CONFIG = json.loads((VIT / "config.json").read_text())
CLIP_CONFIG = json.loads((CLIP / "config.json").read_text())
SIGLIP_CONFIG = json.loads((SIGLIP / "config.json").read_text())

EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (15, 15),
    (16, 16),
    (17, 17),
    (223, 224),
    (224, 224),
    (225, 224),
    (335, 336),
    (336, 336),
    (337, 336),
    (384, 384),
    (480, 640),
    (1080, 1920),
    (3000, 4000),
]


@pytest.mark.parametrize("height,width", EDGES)
@pytest.mark.parametrize("do_resize", [True, False])
def test_vit_hub_edges(height, width, do_resize):
    processor, settings_ = make("vit", VIT_CONFIG, do_resize=do_resize, size={"height": 224, "width": 224})
    assert_same(processor, settings_, height, width)


@pytest.mark.parametrize("height,width", EDGES)
def test_siglip_hub_edges(height, width):
    processor, settings_ = make("siglip", SIGLIP_CONFIG, size={"height": 384, "width": 384}, resample=3)
    assert_same(processor, settings_, height, width)
    assert vision_encoder.count(height, width, settings_).tokens == 729  # 27x27, no CLS


@pytest.mark.parametrize("height,width", [e for e in EDGES if max(e) / min(e) <= 40])
@pytest.mark.parametrize("do_center_crop", [True, False])
def test_clip_hub_edges(height, width, do_center_crop):
    processor, settings_ = make(
        "clip",
        CLIP_CONFIG,
        size={"shortest_edge": 336},
        crop_size={"height": 336, "width": 336},
        do_center_crop=do_center_crop,
    )
    assert_same(processor, settings_, height, width)


@pytest.mark.parametrize("height,width", [e for e in EDGES if max(e) / min(e) > 40])
def test_clip_shortest_edge_of_extreme_shapes(height, width):
    """1x4000 with shortest_edge 336 is a 336x1344000 image: compare with the real size function only."""
    from transformers.image_transforms import get_resize_output_image_size
    from transformers.image_utils import ChannelDimension

    _, settings_ = make("clip", CLIP_CONFIG, size={"shortest_edge": 336}, do_center_crop=False)
    got = vision_encoder.count(height, width, settings_)
    dummy = np.empty((3, height, width), dtype=np.uint8)
    expected = get_resize_output_image_size(
        dummy, size=336, default_to_square=False, input_data_format=ChannelDimension.FIRST
    )
    assert (got.resized_height, got.resized_width) == tuple(expected)
    _, cropped = make(
        "clip", CLIP_CONFIG, size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
    )
    assert vision_encoder.count(height, width, cropped).tokens == 577


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 600),
    width=st.integers(1, 600),
    variant=st.sampled_from(["vit", "clip", "siglip"]),
    do_resize=st.booleans(),
    size=st.integers(8, 400),
    square=st.booleans(),
    do_center_crop=st.booleans(),
    crop=st.integers(8, 400),
    patch_size=st.sampled_from([8, 14, 16, 32]),
)
def test_random_sizes_and_settings(
    height, width, variant, do_resize, size, square, do_center_crop, crop, patch_size
):
    if do_resize and not square:  # keep the shortest-edge resize of a thin strip small in memory
        assume(size * max(height, width) / min(height, width) <= 20000)
    kwargs = {
        "do_resize": do_resize,
        "do_center_crop": do_center_crop,
        "crop_size": {"height": crop, "width": crop},
    }
    kwargs["size"] = {"height": size, "width": size + 7} if square else {"shortest_edge": size}
    if variant == "vit":
        config = {"image_size": 224, "patch_size": patch_size}
    else:
        config = {"vision_config": {"image_size": 224, "patch_size": patch_size}}
    processor, settings_ = make(variant, config, **kwargs)
    assert_same(processor, settings_, height, width)


def test_count_exact_equals_the_formula():
    processor, settings_ = make("clip", CLIP_CONFIG, size={"shortest_edge": 336}, do_center_crop=False)
    sizes = [(480, 640), (1, 40), (337, 336), (1080, 1920)]
    images = [Image.new("RGB", (w, h)) for h, w in sizes]
    assert vision_encoder.count_exact(processor, images, settings_) == [
        vision_encoder.count(h, w, settings_) for h, w in sizes
    ]


def test_position_tables_are_the_real_config_classes():
    """(image_size // patch)^2 + CLS, with the real config classes' defaults where config.json is silent."""
    from transformers import CLIPVisionConfig, SiglipVisionConfig, ViTConfig

    _, vit = make("vit", {}, size={"height": 224, "width": 224})
    default = ViTConfig()
    assert vit.vision_max_positions == (default.image_size // default.patch_size) ** 2 + 1 == 197
    _, clip = make("clip", {}, size={"shortest_edge": 224})
    default = CLIPVisionConfig()
    assert clip.vision_max_positions == (default.image_size // default.patch_size) ** 2 + 1 == 50
    _, siglip = make("siglip", {}, size={"height": 224, "width": 224})
    default = SiglipVisionConfig()
    assert siglip.vision_max_positions == (default.image_size // default.patch_size) ** 2 == 196


@pytest.mark.parametrize("folder", list(FOLDERS), ids=lambda p: p.name)
def test_fixture_settings_and_hub_size_fill_the_position_table(folder):
    model = load_model(str(folder))
    assert model.family.name == "vision-encoder"
    assert model.settings.vision_max_positions == FOLDERS[folder]
    processor = model.image_processor
    side = model.settings.vision_image_size
    if model.settings.do_resize:  # the hub processor makes any image exactly the model's size
        for height, width in [(480, 640), (30, 300), (side, side)]:
            assert real_size(processor, height, width) == (side, side)
            assert vision_encoder.count(height, width, model.settings).tokens == FOLDERS[folder]


def test_fixture_tokenizers_and_text_limits():
    assert load_model(str(VIT)).tokenizer is None  # google/vit-base-patch16-224 ships none
    clip = load_model(str(CLIP))
    assert clip.max_position_embeddings == 77 and clip.tokenizer.model_max_length == 77
    siglip = load_model(str(SIGLIP))
    assert siglip.max_position_embeddings is None  # SiglipTextConfig's 64 is a class default only
    assert siglip.tokenizer.model_max_length == 64


def test_unsupported_settings_are_refused():
    with pytest.raises(CountError):
        make("clip", CLIP_CONFIG, size={"shortest_edge": 224, "longest_edge": 448})
    with pytest.raises(CountError):
        make("siglip", SIGLIP_CONFIG, do_pad=True)


@lru_cache(maxsize=4)
def real_processor(folder):
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPProcessor, SiglipProcessor

    cls = CLIPProcessor if folder == CLIP else SiglipProcessor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(
            image_processor=AutoImageProcessor.from_pretrained(folder),
            tokenizer=AutoTokenizer.from_pretrained(folder),
        )


@pytest.mark.parametrize("folder", [CLIP, SIGLIP], ids=lambda p: p.name)
def test_processors_have_no_num_multimodal_tokens_helper(folder):
    """CLIPProcessor / SiglipProcessor define no _get_num_multimodal_tokens: no image token to count."""
    assert not hasattr(real_processor(folder), "_get_num_multimodal_tokens")


def _decode(ref):
    source = io.BytesIO(ref.data) if ref.data is not None else ref.path
    with Image.open(source) as image:
        image.load()
        return ImageOps.exif_transpose(image).convert("RGB")


@pytest.mark.parametrize("dataset", ["captions", "imagefolder", "llava"])
@pytest.mark.parametrize("folder", [CLIP, SIGLIP], ids=lambda p: p.name)
def test_scanner_equals_the_real_processor(folder, dataset):
    """Text: the caption's input_ids; images: pixel_values' size and its patches (+ CLS)."""
    processor = real_processor(folder)
    scanner = Scanner(ScanConfig(dataset="", model=str(folder)))
    checked = 0
    for outcome in scanner.scan_samples(iter_samples(str(DATASETS / dataset))):
        result = outcome.result
        if result.seq_len is None:
            continue
        text = scanner.render(result.sample.messages)
        images = [_decode(ref) for ref in result.sample.images]
        output = processor(text=[text], images=images or None)
        assert result.seq_len == result.text_tokens == len(output["input_ids"][0]), result.sample.location
        sizes = [tuple(int(v) for v in pixels.shape[-2:]) for pixels in output.get("pixel_values", [])]
        assert [(i.resized_height, i.resized_width) for i in result.images] == sizes
        assert all(i.tokens == FOLDERS[folder] for i in result.images)
        checked += 1
    assert checked > 0


def test_caption_text_is_the_caption_alone():
    scanner = Scanner(ScanConfig(dataset="", model=str(CLIP)))
    sample = next(iter(iter_samples(str(DATASETS / "captions"))))
    caption = sample.messages[-1].parts[0].text
    assert scanner.render(sample.messages) == caption


def _codes(folder, dataset, **config) -> list[list[str]]:
    scanner = Scanner(ScanConfig(dataset=str(dataset), model=str(folder), **config))
    return [sorted(f.code for f in outcome.findings) for outcome in scanner.scan()]


def test_vlm403_with_the_noresize_vit_and_not_with_the_resizing_one():
    noresize = _codes(VIT_NORESIZE, DATASETS / "captions")
    assert sum("VLM403" in codes for codes in noresize) >= 1
    assert all("VLM403" not in codes for codes in _codes(VIT, DATASETS / "captions"))
    for folder in (CLIP, SIGLIP):
        assert all("VLM403" not in codes for codes in _codes(folder, DATASETS / "captions"))


def test_vlm403_message_and_fix_carry_the_numbers():
    scanner = Scanner(ScanConfig(dataset=str(DATASETS / "captions"), model=str(VIT_NORESIZE)))
    findings = [f for outcome in scanner.scan() for f in outcome.findings if f.code == "VLM403"]
    vga = next(f for f in findings if "640x480" in f.message)
    assert "1201 vision tokens (30x40 patches + 1 CLS)" in vga.message and "197 positions" in vga.message
    assert "size to 224x224" in vga.fix and "do_resize true" in vga.fix
    # the 224x224 image fits exactly: 14x14 + CLS = 197
    exact = Scanner(ScanConfig(dataset="", model=str(VIT_NORESIZE))).model
    assert vision_encoder.count(224, 224, exact.settings).tokens == 197


def test_long_caption_gets_vlm404_against_the_text_tower(tmp_path):
    """The text tower's 77 positions are the model's context: VLM404 (VLM401 is for --max-length)."""
    image = tmp_path / "a.png"
    Image.new("RGB", (64, 48)).save(image)
    long_caption = " ".join(["a photo of a cat sitting on a red chair"] * 12)
    rows = [{"image": "a.png", "text": "a cat"}, {"image": "a.png", "text": long_caption}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path), model=str(CLIP)))
    outcomes = list(scanner.scan())
    lengths = [[f for f in o.findings if f.code.startswith("VLM4")] for o in outcomes]
    assert [[f.code for f in found] for found in lengths] == [[], ["VLM404"]]
    finding = lengths[1][0]
    ids = real_processor(CLIP)(text=[long_caption])["input_ids"][0]
    assert outcomes[1].result.seq_len == len(ids) > 77
    assert f"text length {len(ids)} tokens > the text encoder's 77 positions" in finding.message
    assert "max_length=77" in finding.fix


@pytest.mark.parametrize("dataset", ["captions", "llava"])
@pytest.mark.parametrize("folder", [VIT_NORESIZE, CLIP, SIGLIP], ids=lambda p: p.name)
def test_exact_mode_agrees_with_the_header_path(folder, dataset):
    fast = Scanner(ScanConfig(dataset=str(DATASETS / dataset), model=str(folder)))
    exact = Scanner(
        ScanConfig(dataset=str(DATASETS / dataset), model=str(folder), exact=True), model=fast.model
    )
    for a, b in zip(fast.scan(), exact.scan(), strict=True):
        assert a.result.images == b.result.images, a.result.sample.location
        assert a.result.seq_len == b.result.seq_len
        assert [f.code for f in a.findings] == [f.code for f in b.findings]
