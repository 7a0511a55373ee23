"""The `html` format: one self-contained page (inline CSS, SVG and images; no external asset).

The page shows the model and settings, the summary, two histograms (sequence length per row, image
tokens per image) as inline SVG, and the findings table with a thumbnail of each flagged row's images.
Only flagged rows' images are decoded, and only the first MAX_PREVIEW_FINDINGS findings get previews.
URLs are never fetched, images outside the dataset folder are read only when the scan allowed it, and
images above the decompression-bomb limit are never decoded. Every dataset string is escaped: dataset
text is untrusted. A Content-Security-Policy keeps the page from loading anything but data: images, and
the tiny filter script is optional (the page is complete without it).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from html import escape
from typing import Any

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


def _e(value: Any) -> str:
    # printable: a file name's newline would start a line of its own where the page is printed (a CI log).
    return escape(printable("" if value is None else str(value)), quote=True)


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


def _preview_cell(result: RowResult, previews: list[Preview] | None) -> str:
    if previews is None:
        return f'<div class="nopreview">no preview: only the first {MAX_PREVIEW_FINDINGS} findings have one</div>'
    if not previews:
        return '<div class="nopreview">no image in this row</div>'
    cells = []
    for number, (ref, preview) in enumerate(zip(result.sample.images, previews, strict=False), 1):
        label = f"image {number}: {ref.reference}"
        if preview.uri is not None:
            cells.append(
                f'<img src="{preview.uri}" alt="{_e(label)}" title="{_e(label)} ({_e(preview.note)})"'
                ' decoding="async">'
            )
        else:
            cells.append(f'<div class="nopreview" title="{_e(label)}">no preview: {_e(preview.note)}</div>')
    if len(previews) > len(result.sample.images[:MAX_PREVIEWS_PER_ROW]):
        cells.append(f'<div class="nopreview">{_e(previews[-1].note)}</div>')
    return f'<div class="thumbs">{"".join(cells)}</div>'


def _counts(result: RowResult) -> str:
    if result.seq_len is None:
        return '<span class="muted">-</span>'
    images = " + ".join(str(t) for t in result.image_tokens if t is not None) or "0"
    text = "-" if result.text_tokens is None else str(result.text_tokens)
    return f"seq {result.seq_len}<br>text {_e(text)}<br>img {_e(images)}"


def _svg_histogram(title: str, bins: list[Bin], unit: str, limit: int | None = None) -> str:
    """A bar chart of the bins; each bar carries a tooltip with its range and count."""
    if not bins:
        return f'<figure><figcaption>{_e(title)}</figcaption><p class="muted">no values</p></figure>'
    width, height = 640, 210
    left, right, top, bottom = 48, 12, 10, 38
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(b.count for b in bins) or 1
    bar_w = plot_w / len(bins)
    low, high = bins[0].low, bins[-1].high
    parts = [
        f'<svg class="hist" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
    ]
    for i, b in enumerate(bins):
        bar_h = b.count / peak * plot_h
        x = left + i * bar_w
        last = b.high if i < len(bins) - 1 else b.high - 1  # the last bin includes its maximum
        span = f"{b.low}" if last <= b.low else f"{b.low}-{last}"
        parts.append(
            f'<rect class="bar" x="{x + 0.5:.1f}" y="{top + plot_h - bar_h:.1f}" width="{max(bar_w - 1, 1):.1f}" '
            f'height="{bar_h:.1f}"><title>{_e(span)} {_e(unit)}: {b.count}</title></rect>'
        )
    axis_y = top + plot_h
    parts.append(f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}"/>')
    parts.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{axis_y}"/>')
    parts.append(f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">{peak}</text>')
    parts.append(f'<text x="{left - 6}" y="{axis_y}" text-anchor="end">0</text>')
    parts.append(f'<text x="{left}" y="{axis_y + 15}" text-anchor="start">{low}</text>')
    parts.append(f'<text x="{width - right}" y="{axis_y + 15}" text-anchor="end">{high - 1}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">{_e(unit)} '
        f"(bin width {bins[0].high - bins[0].low})</text>"
    )
    if limit is not None and low <= limit < high:
        x = left + (limit - low) / (high - low) * plot_w
        parts.append(
            f'<line class="limit" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}">'
            f"<title>length limit {limit}</title></line>"
        )
    parts.append("</svg>")
    return f"<figure><figcaption>{_e(title)}</figcaption>{''.join(parts)}</figure>"


def _kv_table(items: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_show(v))}</td></tr>" for k, v in items)
    return f'<table class="kv">{rows}</table>'


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


def render(report) -> str:
    """The whole page as one string (report is a formats.ReportInput)."""
    data: dict[str, Any] = report.report
    summary = report.summary
    settings: dict[str, Any] = data.get("settings", {})
    model: dict[str, Any] = data.get("model", {})
    stats: dict[str, Any] = data.get("summary") or summary.to_dict()
    dataset = settings.get("dataset", "")
    names, levels = _rule_names(report), _severity_of(report)
    total_findings = sum(summary.by_code.values())

    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>vlmlint report: {_e(dataset)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>vlmlint report: {_e(dataset)}</h1>",
        f'<p class="muted">vlmlint {_e(data.get("vlmlint_version", ""))} &middot; model '
        f"<b>{_e(report.model_name)}</b></p>",
    ]
    if data.get("incomplete"):  # an interrupted scan: a banner above everything
        from vlmlint.report.github import incomplete_text

        out.append(f'<p class="note incomplete"><b>{_e(incomplete_text(data["incomplete"]))}</b></p>')
    if report.text_tokens_estimated:
        out.append(
            f'<p class="note">note: {_e(report.text_tokens_estimated)}; for exact text counts pass '
            "--model &lt;hub id or folder&gt;</p>"
        )

    if summary.media_rows:
        from vlmlint.report.text import media_line

        out.append(f'<p class="note">{_e(media_line(summary))}</p>')

    # Summary: headline numbers, then by severity, by code and the percentiles.
    out.append('<h2 id="summary">Summary</h2><div class="cards">')
    for label, value in (
        ("rows scanned", stats.get("samples", summary.samples)),
        ("rows with findings", stats.get("samples_with_findings", summary.samples_with_findings)),
        ("findings", total_findings),
    ):
        out.append(f'<div class="card"><b>{_e(value)}</b>{_e(label)}</div>')
    for level in _SEVERITIES:
        count = summary.by_severity.get(level, 0)
        out.append(f'<div class="card"><b class="sevtext-{level}">{count}</b>{level}</div>')
    out.append("</div>")

    out.append('<div class="grid"><section><table id="by-code"><thead><tr><th>code</th><th>rule</th>')
    out.append('<th>severity</th><th class="num">findings</th></tr></thead><tbody>')
    for code, count in sorted(summary.by_code.items()):
        level = levels.get(code, "info")
        out.append(
            f'<tr><td><span class="sev sev-{_e(level)}">{_e(code)}</span></td><td>{_e(names.get(code, ""))}'
            f'</td><td class="sevtext-{_e(level)}">{_e(level)}</td><td class="num">{count}</td></tr>'
        )
    if not summary.by_code:
        out.append('<tr><td colspan="4" class="muted">no findings</td></tr>')
    out.append("</tbody></table></section>")

    out.append('<section><table id="percentiles"><thead><tr><th></th>')
    out.extend(f'<th class="num">{p}</th>' for p in _PERCENTILES)
    out.append("</tr></thead><tbody>")
    for label, key in (("sequence length", "seq_len"), ("image tokens / image", "image_tokens_per_image")):
        row = stats.get(key) or {}
        cells = "".join(f'<td class="num">{_e(_show(row.get(p)))}</td>' for p in _PERCENTILES)
        out.append(f"<tr><th>{label}</th>{cells}</tr>")
    out.append("</tbody></table>")
    verify = stats.get("verify") or {}
    if verify.get("rows") is not None:
        out.append(
            f'<p class="muted">--verify: {_e(verify["rows"])} rows rechecked with the real image processor, '
            f"{_e(verify.get('disagreements', 0))} disagreements</p>"
        )
    out.append("</section></div>")

    # Histograms of the whole scan (every row, not only flagged ones).
    limit = settings.get("max_length")
    out.append('<h2 id="distributions">Distributions</h2><div class="grid">')
    out.append(
        _svg_histogram(
            "Sequence length per row",
            histogram(summary.seq_lens, HISTOGRAM_BINS),
            "tokens",
            limit if isinstance(limit, int) else None,
        )
    )
    out.append(
        _svg_histogram(
            "Image tokens per image", histogram(summary.image_tokens, HISTOGRAM_BINS), "image tokens"
        )
    )
    out.append("</div>")

    _findings_section(out, summary, settings, names, total_findings)

    # Model and settings last: reference material, not the headline.
    out.append('<h2 id="settings">Model and settings</h2><div class="grid"><section>')
    out.append(_kv_table([(k, v) for k, v in model.items()]))
    out.append("</section><section>")
    out.append(_kv_table([(k, v) for k, v in settings.items()]))
    out.append("</section></div>")
    out.append(f"<script>{_SCRIPT}</script></body></html>\n")
    return "\n".join(out)


def _findings_section(out: list[str], summary, settings: dict[str, Any], names, total_findings: int) -> None:
    """Findings: one table row per finding, with its dataset row's images."""
    out.append(f'<h2 id="findings-title">Findings ({total_findings})</h2>')
    if summary.flagged:
        out.append(_filters(summary.by_code, names))
        out.append(
            '<table id="findings"><thead><tr><th>preview</th><th>location</th><th>id</th><th>rule</th>'
            "<th>message / fix</th><th>counts</th></tr></thead><tbody>"
        )
        allow_outside = bool(settings.get("allow_outside_root", False))
        shown = 0
        for outcome in summary.flagged:
            if shown >= MAX_TABLE_ROWS:
                break
            result = outcome.result
            previews = _row_previews(result, allow_outside) if shown < MAX_PREVIEW_FINDINGS else None
            preview_html = _preview_cell(result, previews)
            for finding in outcome.findings:
                if shown >= MAX_TABLE_ROWS:
                    break
                if shown >= MAX_PREVIEW_FINDINGS and previews is not None:
                    preview_html = _preview_cell(result, None)
                shown += 1
                level = finding.severity.value
                out.append(
                    f'<tr data-code="{_e(finding.code)}" data-severity="{_e(level)}">'
                    f"<td>{preview_html}</td>"
                    f'<td class="loc">{_e(result.sample.location)}</td>'
                    f'<td class="id">{_e(finding.id)}</td>'
                    f'<td><span class="sev sev-{_e(level)}">{_e(finding.code)}</span><br>{_e(finding.name)}'
                    f'<br><span class="sevtext-{_e(level)}">{_e(level)}</span></td>'
                    f'<td class="msg">{_e(finding.message)}<div class="fix">fix: {_e(finding.fix)}</div></td>'
                    f'<td class="counts">{_counts(result)}</td></tr>'
                )
        out.append("</tbody></table>")
        if total_findings > shown:
            out.append(
                f'<p class="note">{total_findings - shown} more findings not listed; '
                "use --format json for all of them.</p>"
            )
    else:
        out.append('<p class="muted">no findings</p>')


def _filters(by_code, names: dict[str, str]) -> str:
    """Filter controls, hidden until the script shows them (without the script they would do nothing)."""
    codes = "".join(
        f'<option value="{_e(code)}">{_e(code)} {_e(names.get(code, ""))} ({count})</option>'
        for code, count in sorted(by_code.items())
    )
    levels = "".join(f'<option value="{level}">{level}</option>' for level in _SEVERITIES)
    return (
        '<div id="filters" hidden><label>code <select id="filter-code"><option value="">all</option>'
        f'{codes}</select></label><label>severity <select id="filter-severity"><option value="">all</option>'
        f'{levels}</select></label><span id="filter-count" class="muted"></span></div>'
    )
