"""`vlmlint stats` in the terminal: histograms as horizontal bars, percentiles, and what to set to fit."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vlmlint.aggregate import (
    PERCENTILES,
    Bin,
    DatasetStats,
    Distribution,
    KnobStats,
    Recommendation,
    VideoKnobStats,
    VideoRecommendation,
    VideoStats,
)

BAR_WIDTH = 40


def _bars(title: str, distribution: Distribution) -> Table:
    table = Table(title=title, show_header=False, box=None, padding=(0, 1), title_justify="left")
    table.add_column("range", justify="right", no_wrap=True)
    table.add_column("bar", no_wrap=True)
    table.add_column("rows", justify="right", no_wrap=True)
    peak = max((b.count for b in distribution.histogram), default=0)
    for item in distribution.histogram:
        table.add_row(_range(item), _bar(item.count, peak), str(item.count))
    return table


def _range(item: Bin) -> str:
    last = item.high - 1  # bins are [low, high) on integers
    return f"{item.low:,}" if last == item.low else f"{item.low:,} - {last:,}"


def _bar(count: int, peak: int) -> Text:
    if not count or not peak:
        return Text("")
    return Text("█" * max(1, round(BAR_WIDTH * count / peak)), style="cyan")


def _percentiles(stats: DatasetStats) -> Table:
    table = Table(title="Percentiles (nearest rank)", header_style="bold", title_justify="left")
    table.add_column("")
    table.add_column("n", justify="right")
    for label, _ in PERCENTILES:
        table.add_column(label, justify="right")
    for name, distribution in (
        ("sequence length / row", stats.seq_len),
        ("image tokens / image", stats.image_tokens),
    ):
        values = distribution.percentiles
        table.add_row(
            name,
            str(distribution.count),
            *("-" if values[label] is None else f"{values[label]:,}" for label, _ in PERCENTILES),
        )
    return table


def _kept(item: Recommendation, rows: int) -> str:
    return f"{item.rows_kept}/{rows} rows"


def _length_cell(item: Recommendation, stats: DatasetStats) -> Text:
    if item.value is None:
        return Text("-")
    cell = Text(f"{item.value}  ({_kept(item, stats.rows_counted)})")  # plain digits: pasted into configs
    if stats.model_context is not None and item.value > stats.model_context:
        cell.append(f"  above the model's {stats.model_context:,} context", style="yellow")
    return cell


def _knob_cell(item: Recommendation, knob: KnobStats) -> Text:
    if item.value is None:
        return Text("no single value", style="yellow")
    if item.unbounded:
        return Text(
            f">= {item.value}  ({_kept(item, knob.rows_fittable)}; any larger value too)", style="green"
        )
    return Text(f"{item.value}  ({_kept(item, knob.rows_fittable)})")


def _fit(stats: DatasetStats) -> Table:
    knob = stats.knob
    where = f"{stats.limit} ({stats.limit_source})" if stats.limit is not None else "none known"
    table = Table(
        title=f"What to set to fit (length limit: {where})", header_style="bold", title_justify="left"
    )
    table.add_column("keep")
    table.add_column("--max-length")
    if knob:
        table.add_column(f"{knob.name} (to fit {stats.limit})")
    for position, length in enumerate(stats.max_length):
        cells = [length.keep, _length_cell(length, stats)]
        if knob:
            cells.append(_knob_cell(knob.recommendations[position], knob))
        table.add_row(*cells)
    return table


def render_stats(stats: DatasetStats, console: Console, *, model_name: str) -> None:
    console.print(
        Text(f"{stats.dataset}: {stats.rows} rows, {stats.rows_counted} counted ({model_name})", style="bold")
    )
    if stats.rows_counted < stats.rows:
        console.print(
            f"{stats.rows - stats.rows_counted} row(s) have no count (unreadable, missing images, placeholder "
            "mismatch...): 'vlmlint scan' says why",
            highlight=False,
        )
    if stats.rows_lower_bound:
        console.print(
            Text(
                f"{stats.rows_lower_bound} counted row(s) hold video or audio that vlmlint does not count "
                "(VLM109): their lengths are lower bounds, and so are the settings below that keep them",
                style="yellow",
            ),
            soft_wrap=True,
        )
    console.print(_bars("Sequence length per row", stats.seq_len))
    console.print(_bars("Image tokens per image", stats.image_tokens))
    console.print(_percentiles(stats))
    console.print(_fit(stats))
    if stats.limit is not None:
        console.print(
            f"now: {stats.rows_within_limit} of {stats.rows_counted} counted rows are within {stats.limit}",
            highlight=False,
        )
    _knob_lines(stats, console)
    if stats.video is not None:
        _video(stats.video, console)


def _knob_lines(stats: DatasetStats, console: Console) -> None:
    knob = stats.knob
    if knob is None:
        if stats.knob_note:
            console.print(Text(f"image-size knob: {stats.knob_note}", style="dim"), soft_wrap=True)
        return
    console.print(
        f"{knob.name}: the largest value on the {'processor' if knob.step else 'trainer'}'s grid ({knob.grid}) "
        "that keeps the share of "
        f"rows within {knob.limit}; the current {knob.name}={knob.current} keeps "
        f"{knob.rows_at_current} of those {knob.rows_fittable} rows.",
        highlight=False,
    )
    if knob.unfittable:
        shown = ", ".join(knob.unfittable_rows)
        more = (
            f" and {knob.unfittable - len(knob.unfittable_rows)} more"
            if knob.unfittable > len(knob.unfittable_rows)
            else ""
        )
        console.print(
            Text(
                f"{knob.unfittable} row(s) cannot fit {knob.limit:,} at any {knob.name} (not even at "
                f"{knob.low:,}): shorten their text or split them; they are not in the shares above: "
                f"{shown}{more}",
                style="yellow",
            ),
            soft_wrap=True,
        )


# -- videos -----------------------------------------------------------------------------------------


def _number(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)  # plain digits: pasted into configs


def _now(knob: VideoKnobStats) -> str:
    """The knob's current value, or what the sampler does while the key is not in effect."""
    return "every frame" if knob.current is None else _number(knob.current)


def _current(knob: VideoKnobStats) -> str:
    return (
        "the current setting (every frame kept)"
        if knob.current is None
        else f"the current {_number(knob.current)}"
    )


def _video_cell(item: VideoRecommendation, knob: VideoKnobStats) -> Text:
    if item.value is None:
        return Text("no grid value", style="yellow")
    cell = Text(f"{_number(item.value)}  ({item.rows_kept}/{knob.rows_fittable} rows")
    cell.append("; the grid's largest)" if item.top else ")")
    return cell


def _video(video: VideoStats, console: Console) -> None:
    console.print(
        Text(f"Videos: {video.rows} counted row(s) with video", style="bold")
        + Text(
            f", {video.rows_uncounted} more with a video vlmlint does not count (VLM109: not searched)"
            if video.rows_uncounted
            else ""
        )
    )
    for note in video.notes:
        console.print(Text(f"video knob: {note}", style="dim"), soft_wrap=True)
    if not video.knobs:
        return
    first = video.knobs[0]
    table = Table(
        title=f"Video settings that fit (length limit {first.limit}; one at a time, the others as now; {first.mode})",
        header_style="bold",
        title_justify="left",
    )
    table.add_column("keep")
    for knob in video.knobs:
        table.add_column(f"{knob.name} (now {_now(knob)})")
    for position, (label, _) in enumerate((r.keep, None) for r in first.recommendations):
        table.add_row(label, *(_video_cell(knob.recommendations[position], knob) for knob in video.knobs))
    console.print(table)
    for knob in video.knobs:
        line = (
            f"{knob.name}: the largest value tried ({knob.grid}) that keeps the share of video rows within "
            f"{knob.limit}, each counted exactly; {_current(knob)} keeps {knob.rows_at_current} of "
            f"those {knob.rows_fittable} rows."
        )
        console.print(line, highlight=False, soft_wrap=True)
        if knob.unfittable:
            shown = ", ".join(knob.unfittable_rows)
            more = (
                f" and {knob.unfittable - len(knob.unfittable_rows)} more"
                if knob.unfittable > len(knob.unfittable_rows)
                else ""
            )
            console.print(
                Text(
                    f"{knob.unfittable} video row(s) fit {knob.limit:,} at no {knob.name} tried: change another "
                    f"setting, shorten or split them; they are not in the shares above: {shown}{more}",
                    style="yellow",
                ),
                soft_wrap=True,
            )
