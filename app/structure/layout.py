"""Reading order and Markdown from detected text boxes: pure functions, no Ray.

The page is cut recursively (an XY-cut): first at every horizontal band of
whitespace, then at a vertical gutter if the two sides are real columns. Two
sides whose lines sit on the same rows (a receipt's labels and amounts, a table)
are not columns: they are read row by row, unless they are running text: bands
side by side that share a gutter, each side a real share of the width with its
lines filling it (two columns set on the same baselines), or a body with a few
notes in its margin, are read column by column. What cannot be cut further is
grouped into lines by vertical overlap and read left to right.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

_MIN_GUTTER = 1.0  # a column gutter is at least this many median line heights wide
_ROW_ALIGNED = 0.6  # share of lines matched across a gutter above which it is a table, not columns
_ZONE_BANDS = 3  # rows side by side before they may be columns
_COLUMN_SHARE = 0.25  # a column of text is at least this share of the zone's width...
_FILLED = 0.6  # ...and its median line fills at least this share of the column
_RUNNING_TEXT = 10.0  # ...and is this many times as long as it is high: sentences, not labels or amounts
_NOTES_SHARE = 0.4  # notes in a margin sit beside at most this share of the body's lines...
_NOTES_NARROWER = 2.5  # ...and the body is at least this many times wider
_PARAGRAPH_GAP = 0.8  # a vertical gap this many line heights starts a new paragraph
_HEADING_HEIGHT = 1.6  # a short paragraph of lines this much taller than the median is a heading

_ORDERED_LIST = re.compile(r"^(\d+)\.(?=\s)")


@dataclass
class Box:
    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    confidence: float
    words: list = field(default_factory=list)  # the words' Boxes, where the engine gave them

    @property
    def height(self) -> float:
        return self.y1 - self.y0


@dataclass
class Line:
    boxes: list[Box]

    @property
    def y0(self) -> float:
        return min(b.y0 for b in self.boxes)

    @property
    def y1(self) -> float:
        return max(b.y1 for b in self.boxes)

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def text(self) -> str:
        return " ".join(b.text for b in self.boxes if b.text)


def box_from_quad(quad, scale: float, text: str, confidence: float, words=()) -> Box:
    """Axis-aligned box in source pixels from an engine-pixel quadrilateral (its words' likewise)."""
    xs = [p[0] / scale for p in quad]
    ys = [p[1] / scale for p in quad]
    word_boxes = [box_from_quad(w.quad, scale, w.text, w.confidence) for w in words]
    return Box(min(xs), min(ys), max(xs), max(ys), text, confidence, word_boxes)


def reading_order(boxes: list[Box]) -> list[Line]:
    boxes = [b for b in boxes if b.x1 > b.x0 and b.y1 > b.y0]
    if not boxes:
        return []
    median_height = statistics.median(b.height for b in boxes)
    return _cut(boxes, median_height)


def _cut(boxes: list[Box], median_height: float) -> list[Line]:
    bands = _split(boxes, axis="y", min_gap=0.0)
    if len(bands) > 1:
        return [line for zone in _zones(bands, median_height) for line in _read_zone(zone, median_height)]
    for columns in _column_splits(boxes, median_height):
        return [line for column in columns for line in _cut(column, median_height)]
    return _group_lines(boxes)


def _zones(bands: list[list[Box]], median_height: float) -> list[list[list[Box]]]:
    """Consecutive bands that share a vertical gutter, together: columns whose lines sit on the same
    rows are cut into one band per row, and only the bands side by side show the columns."""
    zones = [[bands[0]]]
    for band in bands[1:]:
        joined = [b for zone_band in zones[-1] for b in zone_band] + band
        if len(_split(joined, axis="x", min_gap=_MIN_GUTTER * median_height)) > 1:
            zones[-1].append(band)
        else:
            zones.append([band])
    return zones


def _read_zone(zone: list[list[Box]], median_height: float) -> list[Line]:
    """Columns of text, or a body with notes in its margin, column by column; else band by band."""
    if len(zone) >= _ZONE_BANDS:
        boxes = [b for band in zone for b in band]
        parts = _split(boxes, axis="x", min_gap=_MIN_GUTTER * median_height)
        if _text_columns(parts) or _side_notes(parts):
            return [line for part in parts for line in _cut(part, median_height)]
    return [line for band in zone for line in _cut(band, median_height)]


def _width(boxes: list[Box]) -> float:
    return max(b.x1 for b in boxes) - min(b.x0 for b in boxes)


def _text_columns(parts: list[list[Box]]) -> bool:
    """Columns of running text: each a real share of the width, its lines filling it and long. A table's
    or a receipt's columns are narrow (amounts), ragged or short (labels), so they stay rows."""
    whole = max(b.x1 for part in parts for b in part) - min(b.x0 for part in parts for b in part)
    for part in parts:
        lines = _group_lines(part)
        widths = [line.boxes[-1].x1 - line.boxes[0].x0 for line in lines]
        if len(lines) < _ZONE_BANDS or _width(part) < _COLUMN_SHARE * whole:
            return False
        heights = [line.height for line in lines]
        if statistics.median(widths) < max(_FILLED * _width(part), _RUNNING_TEXT * statistics.median(heights)):
            return False
    return True


def _side_notes(parts: list[list[Box]]) -> bool:
    """A body of text and notes in a margin beside a few of its lines, far narrower than it."""
    if len(parts) != 2:
        return False
    lines = sorted((_group_lines(part) for part in parts), key=len)
    notes, body = lines
    narrow = _width([b for line in notes for b in line.boxes]) * _NOTES_NARROWER <= _width(
        [b for line in body for b in line.boxes])
    return len(body) >= _ZONE_BANDS and len(notes) <= _NOTES_SHARE * len(body) and narrow and _text_columns([
        [b for line in body for b in line.boxes]])


def _split(boxes: list[Box], axis: str, min_gap: float) -> list[list[Box]]:
    """Split at every gap wider than min_gap in the projection on the axis, in ascending order."""
    lo, hi = ("y0", "y1") if axis == "y" else ("x0", "x1")
    ordered = sorted(boxes, key=lambda b: getattr(b, lo))
    groups: list[list[Box]] = [[ordered[0]]]
    reach = getattr(ordered[0], hi)
    for box in ordered[1:]:
        if getattr(box, lo) - reach > min_gap:
            groups.append([box])
        else:
            groups[-1].append(box)
        reach = max(reach, getattr(box, hi))
    return groups


def _column_splits(boxes: list[Box], median_height: float):
    """Yield [left, right] at the first gutter whose sides are columns, not rows of a table."""
    parts = _split(boxes, axis="x", min_gap=_MIN_GUTTER * median_height)
    for cut in range(1, len(parts)):
        left = [b for part in parts[:cut] for b in part]
        right = [b for part in parts[cut:] for b in part]
        if _are_columns(_group_lines(left), _group_lines(right)):
            yield [left, right]
            return


def _are_columns(left: list[Line], right: list[Line]) -> bool:
    if len(left) < 2 or len(right) < 2:
        return False
    fewer, more = sorted((left, right), key=len)
    aligned = sum(any(_same_row(a, b) for b in more) for a in fewer)
    return aligned / len(fewer) < _ROW_ALIGNED


def _same_row(a: Line | Box, b: Line | Box) -> bool:
    overlap = min(a.y1, b.y1) - max(a.y0, b.y0)
    return overlap >= 0.5 * min(a.height, b.height)


def _group_lines(boxes: list[Box]) -> list[Line]:
    """Lines by vertical overlap, top to bottom; boxes in a line left to right."""
    lines: list[Line] = []
    for box in sorted(boxes, key=lambda b: (b.y0 + b.y1) / 2):
        if lines and _same_row(lines[-1], box):
            lines[-1].boxes.append(box)
        else:
            lines.append(Line([box]))
    for line in lines:
        line.boxes.sort(key=lambda b: b.x0)
    return lines


def paragraphs(lines: list[Line]) -> list[list[Line]]:
    """Consecutive lines split where the gap is wide or the order jumps (a new column)."""
    if not lines:
        return []
    median_height = statistics.median(line.height for line in lines)
    groups = [[lines[0]]]
    for previous, line in zip(lines, lines[1:]):
        gap = line.y0 - previous.y1
        if gap > _PARAGRAPH_GAP * median_height or line.y1 <= previous.y0:
            groups.append([line])
        else:
            groups[-1].append(line)
    return groups


def page_text(groups: list[list[Line]]) -> str:
    return "\n\n".join("\n".join(line.text for line in group) for group in groups).strip()


def page_markdown(groups: list[list[Line]]) -> str:
    if not groups:
        return ""
    median_height = statistics.median(line.height for group in groups for line in group)
    blocks = []
    for group in groups:
        text = "\n".join(escape_markdown(line.text) for line in group)
        blocks.append("## " + text.replace("\n", " ") if is_heading(group, median_height) else text)
    return "\n\n".join(blocks).strip()


def is_heading(group: list[Line], median_height: float) -> bool:
    """A short paragraph of lines much taller than the page's median line."""
    return len(group) <= 2 and min(line.height for line in group) >= _HEADING_HEIGHT * median_height


def escape_markdown(text: str) -> str:
    """Keep OCR'd text literal: a leading '#', '-', '>' or '1.' must not become structure."""
    for char in "\\*_`":
        text = text.replace(char, "\\" + char)
    text = text.lstrip()
    if text[:1] in ("#", ">", "-", "+", "|", "="):
        return "\\" + text
    return _ORDERED_LIST.sub(r"\1\\.", text)
