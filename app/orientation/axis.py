"""Which way a page's lines run: across, or down (the page turned a quarter).

Cheap cues on a thumbnail's ink, in the order app/orientation/finder.py asks them: a strip's shape,
each blob's nearest neighbours, the gaps between lines; and, for the full look, the detector's boxes.
Each answers (True if the lines run across, the share of its evidence for that), None where it
cannot tell.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

MIN_BLOBS = 12  # with fewer neighbour pairs than this, the ink says nothing about the axis
MAX_BLOBS = 6000  # beyond this (noise, halftone: no text page has so many), a sample: bounded memory
STRIP_HEIGHT = 160  # a page at most this high and STRIP_ASPECT times as wide is a strip of text lying across
STRIP_ASPECT = 3
GAP_LINES = 4  # the gaps between lines settle the axis where they show at least this many lines...
GAP_RATIO = 3  # ...and this many times as many one way as the other
LINE_ASPECT = 4  # bands of ink that are, at the median, this many times as long as high are lines


def to_grey(page: np.ndarray) -> np.ndarray:
    import cv2

    return page if page.ndim == 2 else cv2.cvtColor(page, cv2.COLOR_RGB2GRAY)


def thumbnail(grey: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    import cv2

    height, width = grey.shape
    scale = min(1.0, side / max(height, width))
    if scale >= 1.0:
        return grey, 1.0
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA), scale


def ink_mask(grey: np.ndarray) -> np.ndarray:
    """Dark marks on a lighter local background (uneven light and coloured paper included), as 0/1."""
    import cv2

    block = max(15, (min(grey.shape) // 16) | 1)
    return cv2.adaptiveThreshold(grey, 1, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY_INV, block, 12)


def ink_blobs(ink: np.ndarray) -> np.ndarray:
    """Rows of (cx, cy, width, height) for character-sized connected blobs of ink."""
    import cv2

    count, _, stats, centroids = cv2.connectedComponentsWithStats(ink, connectivity=8)
    if count <= 1:
        return np.zeros((0, 4))
    widths, heights, areas = stats[1:, 2], stats[1:, 3], stats[1:, 4]
    limit = max(ink.shape) / 8
    keep = (areas >= 4) & (widths < limit) & (heights < limit) & (np.maximum(widths, heights) >= 3)
    return np.column_stack([centroids[1:][keep], widths[keep], heights[keep]]).astype(float)


def axis_from_blobs(ink: np.ndarray, neighbours: int = 2, queries: int = 250) -> tuple[Optional[bool], float]:
    """(True if lines run across, share of neighbour pairs along that axis); None without enough blobs."""
    blobs = ink_blobs(ink)
    if len(blobs) > MAX_BLOBS:  # the distance matrix below is asked x blobs
        blobs = blobs[np.random.default_rng(0).choice(len(blobs), MAX_BLOBS, replace=False)]
    if len(blobs) < MIN_BLOBS:
        return None, 0.0
    centres = blobs[:, :2].astype(np.float32)
    size = float(np.median(np.maximum(blobs[:, 2], blobs[:, 3])))
    asked = centres
    if len(centres) > queries:  # every blob can be a neighbour, but only a sample asks
        asked = centres[np.random.default_rng(0).choice(len(centres), queries, replace=False)]
    dx_all = centres[None, :, 0] - asked[:, None, 0]
    dy_all = centres[None, :, 1] - asked[:, None, 1]
    squared = dx_all * dx_all + dy_all * dy_all
    squared[squared == 0] = np.inf  # the blob itself
    nearest = np.argpartition(squared, neighbours, axis=1)[:, :neighbours]
    rows = np.arange(len(asked))[:, None]
    dx = np.abs(dx_all[rows, nearest])
    dy = np.abs(dy_all[rows, nearest])
    near = squared[rows, nearest] < (4 * size) ** 2  # a neighbour across a wide gap says nothing
    along_x = float(np.sum((dx > dy) & near))
    along_y = float(np.sum((dy > dx) & near))
    if along_x + along_y < MIN_BLOBS:
        return None, 0.0
    return along_x >= along_y, max(along_x, along_y) / (along_x + along_y)


def strip_axis(page: np.ndarray) -> Optional[bool]:
    """A picture of a line or two (a cut-out field, a caption) is a strip, low and wide or, turned,
    narrow and tall; its lines run along it, whatever its few blobs say. True for a strip lying
    across, False for one standing (vertical CJK text in a standing strip is turned to lie across,
    as the detector's boxes would have it), None for a page."""
    height, width = page.shape[:2]
    if height <= STRIP_HEIGHT and width >= STRIP_ASPECT * height:
        return True
    if width <= STRIP_HEIGHT and height >= STRIP_ASPECT * width:
        return False
    return None


def axis_from_gaps(ink: np.ndarray, blob_across: Optional[bool], blob_share: float) -> tuple[Optional[bool], float]:
    """The axis from the gaps between lines, where the blobs left it unclear (Fraktur letters in
    pieces, receipts of sparse capitals, pictures among text), on a page, not a strip. Down a page of
    lines lying across, the rows go from ink to gap and back once per line, and the bands of ink are
    lines: long across for their height. Bands the other way are letters or blocks.
    Sure when one way has at least GAP_LINES line-shaped bands and GAP_RATIO times the other's;
    otherwise the blobs' answer stands."""
    across, down = line_bands(ink), line_bands(ink.T)
    many, few = max(across, down), min(across, down)
    if many >= GAP_LINES and many >= GAP_RATIO * few:
        return bool(across > down), many / (many + few)
    return blob_across, blob_share


def line_bands(ink: np.ndarray) -> int:
    """How many bands of rows with ink lie between rows without, where the bands are lines: their
    ink spans, at the median, at least LINE_ASPECT times their height across (bands of letters,
    on a page turned the other way or in a single line, are about as high as long). 0 otherwise."""
    aspects = []
    for top, bottom in ink_bands(ink):
        filled = np.flatnonzero(ink[top:bottom].any(axis=0))
        if bottom - top >= 2 and len(filled):  # a row or two of specks is no line
            aspects.append((filled[-1] - filled[0] + 1) / (bottom - top))
    return len(aspects) if aspects and float(np.median(aspects)) >= LINE_ASPECT else 0


def ink_bands(ink: np.ndarray) -> list[tuple[int, int]]:
    """(top, bottom) of each band of rows with ink between rows without. A row has ink where its
    share is above 1% and a tenth of the fullest row's (specks of noise in the margins do not)."""
    for_rows = ink.mean(axis=1)
    has_ink = np.concatenate([[False], for_rows > max(0.01, 0.1 * float(for_rows.max(initial=0))), [False]])
    edges = np.flatnonzero(np.diff(has_ink.astype(np.int8)))
    return [(int(top), int(bottom)) for top, bottom in zip(edges[::2], edges[1::2])]


def axis_from_boxes(boxes: list[np.ndarray]) -> tuple[Optional[bool], float]:
    """(True if lines run across, their share of the area of elongated boxes); None without any."""
    across = down = 0.0
    for quad in boxes:
        width = float(np.linalg.norm(quad[1] - quad[0]))
        height = float(np.linalg.norm(quad[3] - quad[0]))
        if width > 1.5 * height:
            across += width * height
        elif height > 1.5 * width:
            down += width * height
    if across + down == 0:
        return None, 0.0
    return across >= down, max(across, down) / (across + down)
