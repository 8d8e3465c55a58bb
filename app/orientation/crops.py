"""Crops of text lines for the models that tell up from down: stretches of the ink's bands of
lines, of a strip, or of the detector's boxes; and the orders and turns they are asked in.
"""

from __future__ import annotations

import numpy as np

from app.orientation.axis import ink_bands
from app.page_size import as_rgb

READ_ASPECT = 5  # a detector line longer than this many heights is read in its first stretch only (the
# recognizer's cost grows with the width it reads)


def line_crops(page: np.ndarray, ink: np.ndarray, thumb_scale: float, lines: int) -> list[np.ndarray]:
    """RGB crops (from the full page, grey or RGB) of up to `lines` stretches of text lines lying across.

    A line is a band of rows with ink between rows without; a crop is a stretch of it about four
    line-heights long (the classifier's 48x192 shape), so a long line is not squeezed. The best
    stretch of each line comes first, the tallest lines first (small print reads worst when
    scaled up to the models' 48 px): more lines, more independent votes."""
    bands = [(top, bottom) for top, bottom in ink_bands(ink) if bottom - top >= 4]
    if not bands:
        return []
    median_height = float(np.median([bottom - top for top, bottom in bands]))
    by_line: dict = {}
    for top, bottom in bands:
        height = bottom - top
        if height > 3 * median_height:
            continue  # lines run together, or a picture
        columns = ink[top:bottom].sum(axis=0)
        filled = np.nonzero(columns)[0]
        if len(filled) == 0:
            continue
        left, right, step = int(filled[0]), int(filled[-1]) + 1, 4 * height
        stretches = []
        for x in range(left, right, step):
            end = min(right, x + step)
            density = float(columns[x:end].sum()) / (height * (end - x))
            if end - x >= height and 0.04 <= density <= 0.5:  # text: not blank, not a dark edge or picture
                stretches.append((density, top, bottom, x, end))
        if stretches:
            by_line[(top, bottom)] = sorted(stretches, reverse=True)
    tallest_first = [by_line[band] for band in sorted(by_line, key=lambda band: band[0] - band[1])]
    chosen = []
    for rank in range(max((len(stretches) for stretches in by_line.values()), default=0)):
        for stretches in tallest_first:
            if rank < len(stretches) and len(chosen) < lines:
                chosen.append(stretches[rank][1:])
    crops = []
    page_height, page_width = page.shape[:2]
    for top, bottom, x0, x1 in chosen:
        pad = 0.15 * (bottom - top)
        y0, y1 = int(max(0, (top - pad) / thumb_scale)), int(min(page_height, (bottom + pad) / thumb_scale))
        c0, c1 = int(max(0, x0 / thumb_scale)), int(min(page_width, x1 / thumb_scale))
        if y1 - y0 >= 2 and c1 - c0 >= 2:
            crops.append(as_rgb(page[y0:y1, c0:c1]))
    return crops


def strip_crops(page: np.ndarray, count: int) -> list[np.ndarray]:
    """A strip cut into stretches about four heights long, or into halves where it is shorter than
    two such: the line crops where no band of ink was found in it (the strip is all line)."""
    height, width = page.shape[:2]
    step = min(4 * height, width // 2)
    return [as_rgb(page[:, x:min(width, x + step)]) for x in range(0, width - step + 1, step)][:count]


def box_crops(rgb: np.ndarray, quads: list[np.ndarray], count: int) -> list[np.ndarray]:
    """The `count` longest lines lying across, each cut to its first READ_ASPECT heights."""
    page_height, page_width = rgb.shape[:2]
    bounds = []
    for quad in quads:
        x0, y0 = np.floor(quad.min(axis=0)).astype(int)
        x1, y1 = np.ceil(quad.max(axis=0)).astype(int)
        x0, y0, x1, y1 = max(0, x0), max(0, y0), min(page_width, x1), min(page_height, y1)
        if y1 - y0 >= 4 and x1 - x0 >= 2 * (y1 - y0):
            bounds.append((x1 - x0, x0, y0, x1, y1))
    bounds.sort(reverse=True)
    return [rgb[y0:y1, x0:min(x1, x0 + READ_ASPECT * (y1 - y0))] for _, x0, y0, x1, y1 in bounds[:count]]


def usual_height_first(crops: list[np.ndarray]) -> list[np.ndarray]:
    heights = [crop.shape[0] for crop in crops]
    usual = float(np.median(heights))
    return [crop for _, _, crop in sorted((abs(h - usual), index, crop) for index, (h, crop) in enumerate(zip(heights, crops)))]


def both_ways_up(crops: list[np.ndarray]) -> list[np.ndarray]:
    """The crops, then each turned 180 degrees: one batch asks every line both ways up."""
    return crops + [np.ascontiguousarray(crop[::-1, ::-1]) for crop in crops]
