"""Equal-width histograms of integer distributions, shared by `vlmlint stats` and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bin:
    low: int  # inclusive
    high: int  # exclusive, except for the last bin, which includes the maximum
    count: int


def histogram(values: Sequence[int], bins: int = 20) -> list[Bin]:
    """Split [min, max] into at most `bins` equal integer-width bins; [] for no values."""
    if not values:
        return []
    low, high = min(values), max(values)
    width = max(1, -(-(high - low + 1) // bins))  # ceil, so the bins cover every value
    count = -(-(high - low + 1) // width)
    counts = [0] * count
    for value in values:
        counts[(value - low) // width] += 1
    return [Bin(low + i * width, low + (i + 1) * width, n) for i, n in enumerate(counts)]
