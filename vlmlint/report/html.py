"""The `html` format: one self-contained page (inline CSS, SVG and images; no external asset).

The page comes from the jinja2 template templates/report.html.j2 (its pieces in macros.html.j2); this
module computes the values it shows, as plain records, and the template lays them out. It shows the
model and settings, the summary, two histograms (sequence length per row, image tokens per image) as
inline SVG, and the findings table with a thumbnail of each flagged row's images. Only flagged rows'
images are decoded, and only the first MAX_PREVIEW_FINDINGS findings get previews. URLs are never
fetched, images outside the dataset folder are read only when the scan allowed it, and images above the
decompression-bomb limit are never decoded. Every dataset string is escaped (the template's autoescape):
dataset text is untrusted. A Content-Security-Policy keeps the page from loading anything but data:
images, and the tiny filter script is optional (the page is complete without it).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from functools import cache
from html import escape
from pathlib import Path
from typing import Any

from markupsafe import Markup

from vlmlint.aggregate import Bin, histogram
from vlmlint.records import ImageError, ImageInfo, ImageRef, RowResult
from vlmlint.report.safe import printable

MAX_PREVIEW_FINDINGS = 500  # findings (table rows) that get thumbnails; later rows say why they have none
MAX_PREVIEWS_PER_ROW = 8  # images shown for one dataset row; the rest are counted
MAX_TABLE_ROWS = 20_000  # findings listed in the table; beyond, the page points at --format json
THUMBNAIL_SIDE = 128
MAX_PREVIEW_PIXELS = 89_478_485  # PIL's decompression-bomb limit: larger images are never decoded
HISTOGRAM_BINS = 30
_SEVERITIES = ("error", "warning", "info")
_PERCENTILES = ("min", "p50", "p90", "p99", "max")

_STYLE = """
:root { --error: #c62828; --warning: #a15c00; --info: #1565c0; --line: #d9dde3; --muted: #5f6b7a; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2329;
  margin: 0; padding: 24px 32px; background: #f6f7f9; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 10px; }
section, figure { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 14px 18px;
  margin: 0 0 16px; }
.muted { color: var(--muted); }
.note { color: var(--warning); }
table { border-collapse: collapse; }
th, td { text-align: left; vertical-align: top; padding: 5px 10px; border-bottom: 1px solid var(--line); }
th { background: #eef0f3; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.kv th { background: none; font-weight: 500; color: var(--muted); }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 16px; min-width: 140px; }
.card b { display: block; font-size: 22px; }
.grid { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; }
.sev { display: inline-block; padding: 0 6px; border-radius: 3px; color: #fff; font-weight: 600;
  font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.sev-error { background: var(--error); }
.sev-warning { background: var(--warning); }
.sev-info { background: var(--info); }
.sevtext-error { color: var(--error); }
.sevtext-warning { color: var(--warning); }
.sevtext-info { color: var(--info); }
figure { margin: 0 0 16px; }
figcaption { font-weight: 600; margin-bottom: 6px; }
svg.hist { display: block; max-width: 100%; height: auto; }
svg.hist .bar { fill: #5b8def; }
svg.hist .bar:hover { fill: #2f5fc4; }
svg.hist .axis { stroke: #8a94a3; stroke-width: 1; }
svg.hist .limit { stroke: var(--error); stroke-width: 1.5; stroke-dasharray: 4 3; }
svg.hist text { font-size: 11px; fill: #4a5562; }
#findings { width: 100%; background: #fff; }
#findings td.loc, #findings td.id { font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
  font-size: 12px; word-break: break-all; max-width: 240px; }
#findings td.msg { max-width: 520px; overflow-wrap: anywhere; }
#findings .fix { color: var(--muted); margin-top: 3px; }
#findings td.counts { white-space: nowrap; font-variant-numeric: tabular-nums; }
.thumbs { display: flex; gap: 4px; flex-wrap: wrap; max-width: 272px; }
.thumbs img { display: block; max-width: 128px; max-height: 128px; border: 1px solid var(--line);
  background: #fff; }
.nopreview { width: 128px; min-height: 48px; padding: 4px 6px; font-size: 11px; color: var(--muted);
  border: 1px dashed #b8c0cc; border-radius: 3px; overflow-wrap: anywhere; background: #fafbfc; }
#filters { margin: 0 0 10px; }
#filters select { margin-right: 12px; }
"""

# Optional: filter the findings table by code and severity. The page is complete without it.
_SCRIPT = """
(function () {
  var box = document.getElementById("filters");
  if (!box) { return; }
  var code = document.getElementById("filter-code");
  var severity = document.getElementById("filter-severity");
  var count = document.getElementById("filter-count");
  var rows = document.querySelectorAll("#findings tbody tr");
  function apply() {
    var shown = 0;
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      var ok = (!code.value || row.getAttribute("data-code") === code.value) &&
        (!severity.value || row.getAttribute("data-severity") === severity.value);
      row.hidden = !ok;
      if (ok) { shown++; }
    }
    count.textContent = shown + " of " + rows.length + " shown";
  }
  code.addEventListener("change", apply);
  severity.addEventListener("change", apply);
  box.hidden = false;
  apply();
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# Nothing but data: images, and only this page's own style and script (by hash), may load.
_CSP = (
    f"default-src 'none'; img-src data:; style-src {_csp_hash(_STYLE)}; "
    f"script-src {_csp_hash(_SCRIPT)}; base-uri 'none'; form-action 'none'"
)


@dataclass(frozen=True)
class Preview:
    """One image's cell: a data: URI, or None with the reason there is no picture."""

    uri: str | None
    note: str


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def thumbnail(ref: ImageRef, info: ImageInfo | None, *, allow_outside_root: bool) -> Preview:
    """A JPEG thumbnail of one image as the processor sees it (EXIF-rotated, RGB on white)."""
    if ref.url is not None or ref.kind == "url":
        return Preview(None, "remote: not fetched")
    if ref.outside_root and not allow_outside_root:
        return Preview(None, "outside the dataset folder: not read (--allow-outside-root)")
    if info is not None and info.width and info.height and info.width * info.height > MAX_PREVIEW_PIXELS:
        return _too_large(info.width, info.height)
    if info is not None and info.error_code == ImageError.UNREADABLE and info.error:  # read once, not twice
        return Preview(None, f"unreadable: {_reason(Exception(info.error))}")
    if ref.data is None and ref.dropped:
        return Preview(None, "embedded image not kept (the report's memory budget for thumbnails is spent)")
    if ref.data is not None:
        source: Any = io.BytesIO(ref.data)
    elif ref.path is None or not os.path.exists(ref.path):
        return Preview(None, "missing: file not found")
    elif not os.path.isfile(ref.path):
        return Preview(None, "not a regular file")
    else:
        source = ref.path
    from PIL import Image, ImageOps

    from vlmlint.images import open_image, open_regular

    try:
        with warnings.catch_warnings():
            # Above the limit PIL only warns (it raises above twice it): refuse both before decoding.
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if isinstance(source, str):  # no FIFO swapped in after the check, no program-starting plugin
                source = open_regular(source, ref.reference)
            with source, open_image(source) as image:
                width, height = image.size
                if width * height > MAX_PREVIEW_PIXELS:
                    return _too_large(width, height)
                image.draft("RGB", (THUMBNAIL_SIDE * 2, THUMBNAIL_SIDE * 2))  # JPEG: decode at reduced scale
                picture = ImageOps.exif_transpose(image)
                picture = _to_rgb(picture)
                picture.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return Preview(None, "too large to preview (decompression-bomb limit)")
    except Exception as exc:  # unreadable, truncated, unsupported mode: a cell with the reason, never a crash
        reason = _reason(exc)
        if ref.path:  # PIL names the absolute path; the dataset's own reference is shorter and safer to share
            reason = reason.replace(ref.path, ref.reference)
        return Preview(None, f"unreadable: {reason}")
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=82)
    uri = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return Preview(uri, f"{width}x{height}")


def _too_large(width: int, height: int) -> Preview:
    return Preview(None, f"too large to preview: {width}x{height} px (decompression-bomb limit)")


def _to_rgb(image):
    from PIL import Image

    if image.mode.startswith("I;16"):
        # 16-bit greyscale: scale 0-65535 to 0-255 (convert("L") would clip everything above 255 to white).
        image = image.convert("F").point(lambda v: v / 257.0).convert("L")
    elif image.mode in ("I", "F"):  # 32-bit int or float (16-bit PNGs often open as "I")
        low, high = image.getextrema()
        if low >= 0 and high <= 65535:
            scale = 1.0 if high <= 255 else 1 / 257.0
            image = image.convert("F").point(lambda v: v * scale).convert("L")
        else:  # another range: stretch its own
            span = (high - low) or 1
            image = image.convert("F").point(lambda v: (v - low) * 255.0 / span).convert("L")
    if "A" in image.getbands() or "a" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


# ------------------------------------------------------------------------------------ the page's records
# Plain values for the template, much of it dataset text: the template escapes each value where it is
# written (autoescape, with _finalize); only what is Markup (built here, said why) is written as is.


@dataclass(frozen=True)
class Thumb:
    """One image of a findings row's preview cell: a picture (uri) or the reason there is none (note)."""

    label: str  # "image N: <the dataset's reference>"
    uri: Markup | None
    note: str


@dataclass(frozen=True)
class PreviewCell:
    """A findings row's preview column; thumbs is None past MAX_PREVIEW_FINDINGS."""

    thumbs: tuple[Thumb, ...] | None
    more: str | None = None  # "N more images not shown"


@dataclass(frozen=True)
class Counts:
    """A findings row's token counts; seq_len None when the row was never counted."""

    seq_len: int | None
    text: str
    images: str


@dataclass(frozen=True)
class FindingRow:
    """One row of the findings table: one finding, with its dataset row's preview and counts."""

    code: str
    level: str
    name: str
    location: str
    id: Any
    message: Any
    fix: Any
    preview: PreviewCell
    counts: Counts


@dataclass(frozen=True)
class Bar:
    """One histogram bar, its coordinates already formatted as the SVG carries them."""

    x: str
    y: str
    width: str
    height: str
    span: str
    count: int


@dataclass(frozen=True)
class Plot:
    """A histogram's bars and axes, in SVG user units (floats already formatted as the SVG has them)."""

    bars: tuple[Bar, ...]
    width: int
    height: int
    left: int  # the y axis
    right: int  # the x axis's end
    top: int
    axis_y: int  # the x axis
    peak: int  # the tallest bar's count
    low: int  # the first bin's start
    last: int  # the last value of the last bin
    middle: str  # the unit label's x
    bin_width: int
    limit_x: str | None  # the --max-length line, where it falls inside the chart
    limit: int | None


@dataclass(frozen=True)
class Chart:
    """One histogram: its title and unit, and the plot (None: no values)."""

    title: str
    unit: str
    plot: Plot | None


@dataclass(frozen=True)
class ByCode:
    """One code's row of the by-code table, and its option in the code filter."""

    code: str
    name: str
    level: str
    count: int


# ---------------------------------------------------------------------------------------- the template

_TEMPLATES = Path(__file__).with_name("templates")


def _finalize(value: Any) -> Any:
    """Every {{ value }} of the template, escaped as the page always was.

    printable first (a file name's newline would start a line of its own where the page is printed, a
    CI log), then html.escape with quote=True: markupsafe's own escape writes ' as &#39; where the page
    has &#x27;. The Markup returned tells autoescape the value is escaped already; values that are Markup
    (the CSS, the script, data: URIs, macro output) pass untouched.
    """
    if hasattr(value, "__html__"):
        return value
    return Markup(escape(printable("" if value is None else str(value)), quote=True))


@cache
def _environment():
    """The template environment, built on first use (the page is rarely asked for)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        finalize=_finalize,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def render(report) -> str:
    """The whole page as one string (report is a formats.ReportInput), from templates/report.html.j2."""
    data: dict[str, Any] = report.report
    summary = report.summary
    settings: dict[str, Any] = data.get("settings", {})
    model: dict[str, Any] = data.get("model", {})
    stats: dict[str, Any] = data.get("summary") or summary.to_dict()
    names, levels = _rule_names(report), _severity_of(report)
    total_findings = sum(summary.by_code.values())
    rows = _finding_rows(summary, settings)
    limit = settings.get("max_length")
    page = {
        # Both are this module's constants (no dataset text); the CSP hashes them exactly as written.
        "style": Markup(_STYLE),
        "script": Markup(_SCRIPT),
        "csp": _CSP,
        "dataset": settings.get("dataset", ""),
        "version": data.get("vlmlint_version", ""),
        "model_name": report.model_name,
        "incomplete": _incomplete(data),
        "estimated": report.text_tokens_estimated,
        "media": _media(summary),
        "cards": [
            ("rows scanned", stats.get("samples", summary.samples)),
            ("rows with findings", stats.get("samples_with_findings", summary.samples_with_findings)),
            ("findings", total_findings),
        ],
        "severities": [(level, summary.by_severity.get(level, 0)) for level in _SEVERITIES],
        "by_code": [
            ByCode(code, names.get(code, ""), levels.get(code, "info"), count)
            for code, count in sorted(summary.by_code.items())
        ],
        "percentile_names": _PERCENTILES,
        "percentiles": [
            (label, [_show((stats.get(key) or {}).get(p)) for p in _PERCENTILES])
            for label, key in (
                ("sequence length", "seq_len"),
                ("image tokens / image", "image_tokens_per_image"),
            )
        ],
        "verify": stats.get("verify") or {},
        "charts": [
            _chart(
                "Sequence length per row",
                histogram(summary.seq_lens, HISTOGRAM_BINS),
                "tokens",
                limit if isinstance(limit, int) else None,
            ),
            _chart("Image tokens per image", histogram(summary.image_tokens, HISTOGRAM_BINS), "image tokens"),
        ],
        "total_findings": total_findings,
        "flagged": bool(summary.flagged),
        "rows": rows,
        "severity_names": _SEVERITIES,
        "max_preview_findings": MAX_PREVIEW_FINDINGS,
        "model": [(k, _show(v)) for k, v in model.items()],
        "settings": [(k, _show(v)) for k, v in settings.items()],
    }
    return _environment().get_template("report.html.j2").render(page)


def _incomplete(data: dict[str, Any]) -> str | None:
    """An interrupted scan's banner text, or None."""
    if not data.get("incomplete"):
        return None
    from vlmlint.report.github import incomplete_text

    return incomplete_text(data["incomplete"])


def _media(summary) -> str | None:
    """The line on video and audio that vlmlint does not count, or None."""
    if not summary.media_rows:
        return None
    from vlmlint.report.text import media_line

    return media_line(summary)


def _finding_rows(summary, settings: dict[str, Any]) -> list[FindingRow]:
    """Findings: one table row per finding (at most MAX_TABLE_ROWS), with its dataset row's images."""
    allow_outside = bool(settings.get("allow_outside_root", False))
    rows: list[FindingRow] = []
    for outcome in summary.flagged:
        if len(rows) >= MAX_TABLE_ROWS:
            break
        result = outcome.result
        previews = _row_previews(result, allow_outside) if len(rows) < MAX_PREVIEW_FINDINGS else None
        cell = _preview_cell(result, previews)
        counts = _counts(result)
        for finding in outcome.findings:
            if len(rows) >= MAX_TABLE_ROWS:
                break
            if len(rows) >= MAX_PREVIEW_FINDINGS:  # the limit falls inside this dataset row's findings
                cell = PreviewCell(None)
            rows.append(
                FindingRow(
                    code=finding.code,
                    level=finding.severity.value,
                    name=finding.name,
                    location=result.sample.location,
                    id=finding.id,
                    message=finding.message,
                    fix=finding.fix,
                    preview=cell,
                    counts=counts,
                )
            )
    return rows


def _row_previews(result: RowResult, allow_outside_root: bool) -> list[Preview]:
    images = result.sample.images
    infos: tuple[ImageInfo | None, ...] = (
        result.images if len(result.images) == len(images) else (None,) * len(images)
    )
    previews = [
        thumbnail(ref, info, allow_outside_root=allow_outside_root)
        for ref, info in zip(images[:MAX_PREVIEWS_PER_ROW], infos, strict=False)
    ]
    if len(images) > MAX_PREVIEWS_PER_ROW:
        previews.append(Preview(None, f"{len(images) - MAX_PREVIEWS_PER_ROW} more images not shown"))
    return previews


def _preview_cell(result: RowResult, previews: list[Preview] | None) -> PreviewCell:
    if previews is None:
        return PreviewCell(None)
    # zip as the page always has: past MAX_PREVIEWS_PER_ROW the "more images" note is also paired with
    # the next image (a cell of its own), then repeated on its own.
    thumbs = tuple(
        Thumb(
            f"image {number}: {ref.reference}",
            # thumbnail() built it: "data:image/jpeg;base64," and the base64 alphabet, nothing to escape.
            None if preview.uri is None else Markup(preview.uri),
            preview.note,
        )
        for number, (ref, preview) in enumerate(zip(result.sample.images, previews, strict=False), 1)
    )
    more = previews[-1].note if len(previews) > len(result.sample.images[:MAX_PREVIEWS_PER_ROW]) else None
    return PreviewCell(thumbs, more)


def _counts(result: RowResult) -> Counts:
    images = " + ".join(str(t) for t in result.image_tokens if t is not None) or "0"
    text = "-" if result.text_tokens is None else str(result.text_tokens)
    return Counts(result.seq_len, text, images)


def _chart(title: str, bins: list[Bin], unit: str, limit: int | None = None) -> Chart:
    """A bar chart of the bins; each bar carries a tooltip with its range and count."""
    if not bins:
        return Chart(title, unit, None)
    width, height = 640, 210
    left, right, top, bottom = 48, 12, 10, 38
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(b.count for b in bins) or 1
    bar_w = plot_w / len(bins)
    low, high = bins[0].low, bins[-1].high
    bars = []
    for i, b in enumerate(bins):
        bar_h = b.count / peak * plot_h
        last = b.high if i < len(bins) - 1 else b.high - 1  # the last bin includes its maximum
        bars.append(
            Bar(
                x=f"{left + i * bar_w + 0.5:.1f}",
                y=f"{top + plot_h - bar_h:.1f}",
                width=f"{max(bar_w - 1, 1):.1f}",
                height=f"{bar_h:.1f}",
                span=f"{b.low}" if last <= b.low else f"{b.low}-{last}",
                count=b.count,
            )
        )
    inside = limit is not None and low <= limit < high
    plot = Plot(
        bars=tuple(bars),
        width=width,
        height=height,
        left=left,
        right=width - right,
        top=top,
        axis_y=top + plot_h,
        peak=peak,
        low=low,
        last=high - 1,
        middle=f"{left + plot_w / 2:.1f}",
        bin_width=bins[0].high - bins[0].low,
        limit_x=f"{left + (limit - low) / (high - low) * plot_w:.1f}" if inside else None,
        limit=limit if inside else None,
    )
    return Chart(title, unit, plot)


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_show(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(_show(v) for v in value) or "-"
    return str(value)


def _rule_names(report) -> dict[str, str]:
    from vlmlint.rules import RULES_BY_CODE

    names = {code: rule.name for code, rule in RULES_BY_CODE.items()}
    for outcome in report.summary.flagged:  # codes from elsewhere (e.g. reader problems) name themselves
        for finding in outcome.findings:
            names.setdefault(finding.code, finding.name)
    return names


def _severity_of(report) -> dict[str, str]:
    from vlmlint.rules import RULES_BY_CODE

    levels = {code: rule.severity.value for code, rule in RULES_BY_CODE.items()}
    for outcome in report.summary.flagged:
        for finding in outcome.findings:
            levels[finding.code] = finding.severity.value  # the level actually reported wins
    return levels
