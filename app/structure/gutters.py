"""Does a block of text stand in columns? A cheap look at its pixels, for tables the layout model reads as
text (borderless tables; a table image cropped tight, which the model sees as one text block).

The block is inked where it is darker than half its own range; rules are taken out (a row inked over
most of the width is a horizontal rule, a column inked over most of the height a vertical one), then
the columns that hold no ink are gutters. A block with an interior gutter and at least three bands of
text is a candidate: the table model reads it, and the Postprocessor keeps the table only where the
page's own lines agree (app/structure/join.py).
"""

from __future__ import annotations

import numpy as np

_RULE = 0.6  # a row (column) inked over this share of the width (height) is a rule, not text
_MIN_GUTTER = 0.015  # of the block's width, and at least 6 pixels
_MIN_BANDS = 3


def in_columns(gray: np.ndarray) -> bool:
    if gray.size == 0 or min(gray.shape) < 8:
        return False
    low, high = np.percentile(gray, 2), np.percentile(gray, 98)
    if high - low < 40:  # no contrast: nothing written
        return False
    ink = gray < (low + high) / 2
    ink = ink[ink.mean(axis=1) < _RULE][:, ink.mean(axis=0) < _RULE] if ink.any() else ink
    if ink.size == 0:
        return False
    columns, rows = ink.any(axis=0), ink.any(axis=1)
    return _interior_gaps(columns, max(6, int(_MIN_GUTTER * len(columns)))) >= 1 and _bands(rows) >= _MIN_BANDS


def _interior_gaps(inked: np.ndarray, min_gap: int) -> int:
    where = np.flatnonzero(inked)
    if len(where) < 2:
        return 0
    gaps = np.diff(where) - 1
    return int((gaps >= min_gap).sum())


def _bands(inked: np.ndarray) -> int:
    edges = np.diff(inked.astype(np.int8))
    return int((edges == 1).sum() + (1 if inked[:1].any() else 0))
