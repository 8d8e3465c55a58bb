"""Finding a page's rotation among 0/90/180/270, cheaply where the page is upright.

The first look, on every page (tens of milliseconds):
1. The axis of the text, from a thumbnail's ink: each blob of ink (a character, or part of
   one) and its two nearest neighbours. Within a line characters sit closer to each other
   than lines do, so neighbours lie along the lines. A strip (a line or two cut out, low and
   wide or tall and narrow) runs along its length. Where the blobs are unclear (Fraktur letters
   in pieces, receipts of sparse capitals), the gaps between lines: bands of ink, long for
   their height, between rows without.
2. Where the axis is clear, the page is turned so that the lines run across, and crops of six
   lines go to the bundled 0/180 classifier, each asked both ways up (its own lean towards one
   answer cancels out). Pooled, the lines settle it when they are surely one way up (on the
   devset, no upright page's lines came within 0.3 of the bar for upside down, nor the reverse).

Where the classifier is unsure (Fraktur, some receipts), a closer look at the same crops:
3. The engine's recognizer reads two of them, of the page's usual line height, both ways up; the
   way they read more confidently is up, or, if the two ways are close, two more lines are read
   and pooled. A crop that reads as nothing either way (a rule, an ornament) has no vote.

Where the axis is still unclear (mixed layouts, a word or two on a page), or fewer than two of the
crops read as text, the full look:
4. The detector's line boxes on a thumbnail give the axis: boxes longer across than down, by area.
5. The longest lines, turned along that axis, are read both ways up as in 3. No single line decides.

`Finding.confidence` is the share of the evidence for the angle chosen, in [0, 1]: the axis
vote's share times the up/down vote's share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from app.orientation.geometry import turn, turn_point
from app.page_size import as_rgb

LOOK_SIDE = 1024  # the thumbnail the ink is measured on
MIN_BLOBS = 12  # with fewer neighbour pairs than this, the ink says nothing about the axis
MAX_BLOBS = 6000  # beyond this (noise, halftone: no text page has so many), a sample: bounded memory
AXIS_SURE = 0.65  # share of neighbour pairs along one axis that settles the axis in the first look
FIRST_LINES = 6  # lines the first look classifies
CLASSIFIER_SURE = 0.20  # the lines' pooled P(upside down) must be below this, or above 1 minus it
STRIP_HEIGHT = 160  # a page at most this high and STRIP_ASPECT times as wide is a strip of text lying across
STRIP_ASPECT = 3
GAP_LINES = 4  # the gaps between lines settle the axis where they show at least this many lines...
GAP_RATIO = 3  # ...and this many times as many one way as the other
LINE_ASPECT = 4  # bands of ink that are, at the median, this many times as long as high are lines
READ_LINES = 2  # lines the recognizer reads both ways up, then as many again if the ways are close
READ_MARGIN = 0.15  # mean scores at least this far apart settle it without more lines
READ_FLOOR = 0.3  # a line read below this both ways up is no text (a rule, a picture): it has no vote
READ_ASPECT = 5  # a detector line longer than this many heights is read in its first stretch only (the
# recognizer's cost grows with the width it reads)


@dataclass(frozen=True)
class Finding:
    rotation: int  # clockwise degrees that make the page upright
    confidence: float
    look: str  # "first": the classifier settled it; "read": the recognizer did; "full"; "blank": no text, left as is


class OrientationFinder:
    """Finds rotations; holds the models. Thread-safe: one page per call."""

    def __init__(self, direction=None, reader=None):
        from app.orientation.models import LineDirection, LineReader

        self._direction = direction or LineDirection()
        self._reader = reader or LineReader()

    def find(self, page: np.ndarray) -> Finding:
        """`page`: HxW grey or HxWx3 RGB uint8. Only the crops the models read become RGB."""
        thumb, thumb_scale = _thumbnail(_grey(page), LOOK_SIDE)
        ink = _ink(thumb)
        strip = _strip_axis(page)
        if strip is not None:
            across, axis_share = strip, 1.0
        else:
            across, axis_share = _axis_from_blobs(ink)
            if across is None or axis_share < AXIS_SURE:
                across, axis_share = _axis_from_gaps(ink, across, axis_share)
        if across is not None and axis_share >= AXIS_SURE:
            base = 0 if across else 90
            crops = _line_crops(turn(page, base), turn(ink, base), thumb_scale, FIRST_LINES)
            if strip is not None and len(crops) < 2:
                crops = _strip_crops(turn(page, base), FIRST_LINES)
            if len(crops) >= 2:  # one line is not a vote
                settled = self._up_or_down(crops)
                if settled is not None:
                    flipped, share, look = settled
                    return Finding((base + 180 * flipped) % 360, round(axis_share * share, 3), look)
        return self._full_look(page, across, axis_share)

    def _up_or_down(self, crops: list[np.ndarray]) -> Optional[tuple[bool, float, str]]:
        """(upside down?, the vote's share, which look settled it) for crops of lines lying across;
        None where neither the classifier nor the recognizer could tell."""
        both = self._direction.upside_down(_both_ways_up(crops))
        upside_down = float(np.mean((both[:len(crops)] + 1.0 - both[len(crops):]) / 2))
        if upside_down <= CLASSIFIER_SURE or upside_down >= 1 - CLASSIFIER_SURE:
            return upside_down > 0.5, max(upside_down, 1 - upside_down), "first"
        read = self._read_both_ways(crops)
        return None if read is None else (*read, "read")

    def _read_both_ways(self, crops: list[np.ndarray]) -> Optional[tuple[bool, float]]:
        """(upside down?, share) from the recognizer's confidence in each line, read both ways up:
        lines of the page's usual height first (the tallest bands are often headings, drop caps or
        rules), two at a time, until two lines that read as text either way come out at least
        READ_MARGIN apart, or four such lines are in. A line read below READ_FLOOR both ways is no
        text and has no vote. None with fewer than two lines of text: no single line decides."""
        scores = np.zeros((0, 2))
        ordered = _usual_height_first(crops)
        for start in range(0, len(ordered), READ_LINES):
            batch = ordered[start:start + READ_LINES]
            read = self._reader.scores(_both_ways_up(batch))
            pairs = np.column_stack([read[:len(batch)], read[len(batch):]])
            scores = np.vstack([scores, pairs[pairs.max(axis=1) >= READ_FLOOR]])
            if len(scores) >= READ_LINES:
                as_is, flipped = scores.mean(axis=0)
                if abs(as_is - flipped) >= READ_MARGIN or len(scores) >= 2 * READ_LINES:
                    break
        if len(scores) < 2:
            return None
        as_is, flipped = (float(value) for value in scores.mean(axis=0))
        return flipped > as_is, max(as_is, flipped) / (as_is + flipped)

    def _full_look(self, page: np.ndarray, blob_across: Optional[bool], blob_share: float) -> Finding:
        rgb = as_rgb(page)
        boxes = self._reader.boxes(rgb)
        across, axis_share = _axis_from_boxes(boxes)
        if across is None:  # no line long enough to have an axis (a word or two): the blobs decide
            across, axis_share = blob_across, blob_share
        if across is None or not boxes:
            return Finding(0, 0.0, "blank")
        base = 0 if across else 90
        height, width = rgb.shape[:2]
        turned = turn(rgb, base)
        lines = [np.array([turn_point(x, y, base, width, height) for x, y in quad]) for quad in boxes]
        read = self._read_both_ways(_box_crops(turned, lines, FIRST_LINES))
        if read is None:  # the axis, but no way up: the page as uploaded along it
            return Finding(base, round(axis_share * 0.5, 3), "full")
        flipped, share = read
        return Finding((base + 180 * flipped) % 360, round(axis_share * share, 3), "full")


def _usual_height_first(crops: list[np.ndarray]) -> list[np.ndarray]:
    heights = [crop.shape[0] for crop in crops]
    usual = float(np.median(heights))
    return [crop for _, _, crop in sorted((abs(h - usual), index, crop) for index, (h, crop) in enumerate(zip(heights, crops)))]


def _both_ways_up(crops: list[np.ndarray]) -> list[np.ndarray]:
    """The crops, then each turned 180 degrees: one batch asks every line both ways up."""
    return crops + [np.ascontiguousarray(crop[::-1, ::-1]) for crop in crops]


def _grey(page: np.ndarray) -> np.ndarray:
    import cv2

    return page if page.ndim == 2 else cv2.cvtColor(page, cv2.COLOR_RGB2GRAY)


def _thumbnail(grey: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    import cv2

    height, width = grey.shape
    scale = min(1.0, side / max(height, width))
    if scale >= 1.0:
        return grey, 1.0
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA), scale


def _ink(grey: np.ndarray) -> np.ndarray:
    """Dark marks on a lighter local background (uneven light and coloured paper included), as 0/1."""
    import cv2

    block = max(15, (min(grey.shape) // 16) | 1)
    return cv2.adaptiveThreshold(grey, 1, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY_INV, block, 12)


def _blobs(ink: np.ndarray) -> np.ndarray:
    """Rows of (cx, cy, width, height) for character-sized connected blobs of ink."""
    import cv2

    count, _, stats, centroids = cv2.connectedComponentsWithStats(ink, connectivity=8)
    if count <= 1:
        return np.zeros((0, 4))
    widths, heights, areas = stats[1:, 2], stats[1:, 3], stats[1:, 4]
    limit = max(ink.shape) / 8
    keep = (areas >= 4) & (widths < limit) & (heights < limit) & (np.maximum(widths, heights) >= 3)
    return np.column_stack([centroids[1:][keep], widths[keep], heights[keep]]).astype(float)


def _axis_from_blobs(ink: np.ndarray, neighbours: int = 2, queries: int = 250) -> tuple[Optional[bool], float]:
    """(True if lines run across, share of neighbour pairs along that axis); None without enough blobs."""
    blobs = _blobs(ink)
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


def _strip_axis(page: np.ndarray) -> Optional[bool]:
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


def _axis_from_gaps(ink: np.ndarray, blob_across: Optional[bool], blob_share: float) -> tuple[Optional[bool], float]:
    """The axis from the gaps between lines, where the blobs left it unclear (Fraktur letters in
    pieces, receipts of sparse capitals, pictures among text), on a page, not a strip. Down a page of
    lines lying across, the rows go from ink to gap and back once per line, and the bands of ink are
    lines: long across for their height. Bands the other way are letters or blocks.
    Sure when one way has at least GAP_LINES line-shaped bands and GAP_RATIO times the other's;
    otherwise the blobs' answer stands."""
    across, down = _line_bands(ink), _line_bands(ink.T)
    many, few = max(across, down), min(across, down)
    if many >= GAP_LINES and many >= GAP_RATIO * few:
        return bool(across > down), many / (many + few)
    return blob_across, blob_share


def _line_bands(ink: np.ndarray) -> int:
    """How many bands of rows with ink lie between rows without, where the bands are lines: their
    ink spans, at the median, at least LINE_ASPECT times their height across (bands of letters,
    on a page turned the other way or in a single line, are about as high as long). 0 otherwise."""
    for_rows = ink.mean(axis=1)
    has_ink = np.concatenate([[False], for_rows > max(0.01, 0.1 * float(for_rows.max(initial=0))), [False]])
    edges = np.flatnonzero(np.diff(has_ink.astype(np.int8)))
    aspects = []
    for top, bottom in zip(edges[::2], edges[1::2]):
        filled = np.flatnonzero(ink[top:bottom].any(axis=0))
        if bottom - top >= 2 and len(filled):  # a row or two of specks is no line
            aspects.append((filled[-1] - filled[0] + 1) / (bottom - top))
    return len(aspects) if aspects and float(np.median(aspects)) >= LINE_ASPECT else 0


def _strip_crops(page: np.ndarray, count: int) -> list[np.ndarray]:
    """A strip cut into stretches about four heights long, or into halves where it is shorter than
    two such: the line crops where no band of ink was found in it (the strip is all line)."""
    height, width = page.shape[:2]
    step = min(4 * height, width // 2)
    return [as_rgb(page[:, x:min(width, x + step)]) for x in range(0, width - step + 1, step)][:count]


def _axis_from_boxes(boxes: list[np.ndarray]) -> tuple[Optional[bool], float]:
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


def _box_crops(rgb: np.ndarray, quads: list[np.ndarray], count: int) -> list[np.ndarray]:
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


def _line_crops(page: np.ndarray, ink: np.ndarray, thumb_scale: float, lines: int) -> list[np.ndarray]:
    """RGB crops (from the full page, grey or RGB) of up to `lines` stretches of text lines lying across.

    A line is a band of rows with ink between rows without; a crop is a stretch of it about four
    line-heights long (the classifier's 48x192 shape), so a long line is not squeezed. The best
    stretch of each line comes first, the tallest lines first (small print reads worst when
    scaled up to the models' 48 px): more lines, more independent votes."""
    rows = ink.mean(axis=1)
    has_ink = rows > max(0.01, 0.1 * float(rows.max(initial=0)))
    bands, start = [], None
    for y, on in enumerate(np.append(has_ink, False)):
        if on and start is None:
            start = y
        elif not on and start is not None:
            if y - start >= 4:
                bands.append((start, y))
            start = None
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
