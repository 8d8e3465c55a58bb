"""How big a batch fits on the device: the search the VLM warm-up runs, kept pure so it can be tested.

The warm-up must measure what serving does: pages at the engine's input budget, the served
`max_new_tokens`, and `max_concurrent_batches` batches at once. `largest_fitting_batch`
finds the largest batch for which a probe `fits(pages)` holds, in O(log max_batch) probes:
doubling to bracket the limit, then bisection inside the bracket. It assumes a bigger batch
never needs less memory.
"""

from __future__ import annotations

import math
from typing import Callable

A4_ASPECT = 297 / 210  # height over width


def largest_fitting_batch(fits: Callable[[int], bool], max_batch: int) -> int:
    """The largest b in 1..max_batch with fits(b); 0 when not even one page fits."""
    if max_batch < 1 or not fits(1):
        return 0
    low, high = 1, None  # fits(low) holds; fits(high) fails, or high is unknown
    while high is None:
        size = min(low * 2, max_batch)
        if size == low:
            return low  # low is max_batch
        if fits(size):
            low = size
        else:
            high = size
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def budget_page_size(max_side: int, max_pixels: int, aspect: float = A4_ASPECT) -> tuple[int, int]:
    """(width, height) of the largest A4-shaped page the engine takes: the page serving sends at most."""
    height = min(max_side, int(math.sqrt(max_pixels * aspect)))
    width = min(max_side, int(height / aspect))
    return width, height
