"""A page's text lines into typed blocks, read region by region. Pure: boxes in, blocks out.

Regions (the layout model's, app/structure/layout_model.py) set the reading order: regions first, by a
recursive XY-cut of their boxes, then the lines inside each region by the line reader
(app/structure/layout.py). The rules that keep this safe:

- no text is ever lost: every line belongs to exactly one block. A line outside every region falls back to
  a text block, and a page the model calls one figure (a receipt, a product photo) is read as lines alone,
  its regions dropped, as it was read before regions;
- overlapping regions (the model returns a title and a footer for the same box) keep the likelier;
- blocks side by side whose lines sit on the same rows (a receipt's labels and amounts that the model
  boxed apart) are one block, so rows stay rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from app.structure.layout import Box, Line, paragraphs, reading_order

TEXT_TYPES = ("text", "reference", "figure_caption", "table_caption")
KEPT_EMPTY = ("figure", "equation", "table")  # a region that means something without text of ours
_IN_REGION = 0.5  # a line belongs to a region holding at least this share of its area
_SAME_REGION = 0.5  # two regions overlapping this much (IoU) are one, the likelier kept
_WHOLE_PAGE_FIGURE = 0.5  # a page whose figures hold this share of its lines is not a figure
_ROWS_SHARED = 0.5  # blocks side by side sharing rows for this share of the smaller's lines are one
_RUNNING_TEXT = 10.0  # a line this many times as long as it is high is running text (app/structure/layout.py)
_TITLE_PRINT = 1.5  # a header or footer of one or two lines this many median line heights tall is a title


@dataclass
class Region:
    type: str
    x0: float
    y0: float
    x1: float
    y1: float
    score: float = 1.0
    table: object = None  # app.structure.tables.Table for a table region whose structure was read

    @property
    def area(self) -> float:
        return max(0.0, self.x1 - self.x0) * max(0.0, self.y1 - self.y0)


@dataclass
class Block:
    type: str
    bbox: tuple  # (x0, y0, x1, y1)
    lines: list = field(default_factory=list)  # list[Line], in reading order
    table: object = None

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def page_blocks(boxes: list[Box], regions: list[Region]) -> list[Block]:
    """Typed blocks in reading order, holding every box once."""
    boxes = [b for b in boxes if b.x1 > b.x0 and b.y1 > b.y0]
    regions = _distinct(regions)
    members = _assign(boxes, regions)
    if _whole_page_figure(regions, members, len(boxes)):  # the model did not see a document: read the lines
        regions, members = [], [boxes]
    if not regions:
        return [Block("text", _lines_bbox(group), group) for group in paragraphs(reading_order(boxes))]
    blocks = [Block(r.type, _bbox_of(r), [], r.table) for r in regions]
    median_height = _median_height(boxes)
    for block, region_boxes in zip(blocks, members[:-1]):
        block.lines = reading_order(region_boxes)
        if block.type in ("header", "footer") and _large_print(block.lines, median_height):
            block.type = "title"  # the model takes a page's first line for a header; a header is small print
        if block.lines and block.type not in ("table", "figure", "equation"):
            block.bbox = _union(block.bbox, _lines_bbox(block.lines))
    blocks = [b for b in blocks if b.lines or b.type in KEPT_EMPTY]
    blocks += [Block("text", _lines_bbox(group), group) for group in paragraphs(reading_order(members[-1]))]
    return xy_order(_merge_shared_rows(blocks))


def _median_height(boxes: list[Box]) -> float:
    heights = sorted(b.y1 - b.y0 for b in boxes)
    return heights[len(heights) // 2] if heights else 0.0


def _large_print(lines: list[Line], median_height: float) -> bool:
    return bool(lines) and len(lines) <= 2 and min(line.height for line in lines) >= _TITLE_PRINT * median_height


def _distinct(regions: list[Region]) -> list[Region]:
    kept: list[Region] = []
    for region in sorted(regions, key=lambda r: -r.score):
        if all(_iou(region, other) <= _SAME_REGION for other in kept):
            kept.append(region)
    return kept


def _assign(boxes: list[Box], regions: list[Region]) -> list[list[Box]]:
    """One list of boxes per region, and a last one for the boxes no region holds."""
    members: list[list[Box]] = [[] for _ in range(len(regions) + 1)]
    for box in boxes:
        area = (box.x1 - box.x0) * (box.y1 - box.y0)
        best, best_share = len(regions), _IN_REGION
        for index, region in enumerate(regions):
            share = _intersection(box, region) / area
            if share > best_share or (share == best_share and best < len(regions) and region.area < regions[best].area):
                best, best_share = index, share
        members[best].append(box)
    return members


def _whole_page_figure(regions: list[Region], members: list[list[Box]], total: int) -> bool:
    in_figures = sum(len(m) for r, m in zip(regions, members) if r.type == "figure")
    return total > 0 and in_figures >= _WHOLE_PAGE_FIGURE * total


def _merge_shared_rows(blocks: list[Block]) -> list[Block]:
    """Text blocks side by side whose lines share rows become one text block, read as rows."""
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(blocks):
            for j in range(i + 1, len(blocks)):
                b = blocks[j]
                if _shares_rows(a, b):
                    boxes = [box for line in a.lines + b.lines for box in line.boxes]
                    blocks[i] = Block("text", _union(a.bbox, b.bbox), reading_order(boxes))
                    del blocks[j]
                    merged = True
                    break
            if merged:
                break
    return blocks


def _shares_rows(a: Block, b: Block) -> bool:
    if a.type not in TEXT_TYPES or b.type not in TEXT_TYPES or not a.lines or not b.lines:
        return False
    if min(a.bbox[2], b.bbox[2]) > max(a.bbox[0], b.bbox[0]):  # they overlap across: one above the other
        return False
    if _running_text(a) and _running_text(b):  # two columns set on the same baselines: the line reader's case
        return False
    fewer, more = sorted((a.lines, b.lines), key=len)
    shared = sum(any(_same_row(x, y) for y in more) for x in fewer)
    return shared >= _ROWS_SHARED * len(fewer) and shared > 0


def _running_text(block: Block) -> bool:
    """Sentences, not labels or amounts: the median line is many times longer than it is high."""
    widths = sorted(line.boxes[-1].x1 - line.boxes[0].x0 for line in block.lines)
    heights = sorted(line.height for line in block.lines)
    return widths[len(widths) // 2] >= _RUNNING_TEXT * heights[len(heights) // 2]


def _same_row(a: Line, b: Line) -> bool:
    return min(a.y1, b.y1) - max(a.y0, b.y0) >= 0.5 * min(a.height, b.height)


def xy_order(blocks: list, box=lambda b: b.bbox) -> list:
    """A recursive XY-cut: columns first where a gutter runs the zone's whole height, then bands."""
    if len(blocks) <= 1:
        return list(blocks)
    for axis in (0, 1):
        parts = _split(blocks, axis, box)
        if len(parts) > 1:
            return [b for part in parts for b in xy_order(part, box)]
    return sorted(blocks, key=lambda b: (box(b)[1], box(b)[0]))


def _split(blocks: list, axis: int, box) -> list[list]:
    ordered = sorted(blocks, key=lambda b: box(b)[axis])
    parts = [[ordered[0]]]
    reach = box(ordered[0])[axis + 2]
    for block in ordered[1:]:
        if box(block)[axis] >= reach:
            parts.append([block])
        else:
            parts[-1].append(block)
        reach = max(reach, box(block)[axis + 2])
    return parts


def _intersection(box, region: Region) -> float:
    return max(0.0, min(box.x1, region.x1) - max(box.x0, region.x0)) * max(
        0.0, min(box.y1, region.y1) - max(box.y0, region.y0))


def _iou(a: Region, b: Region) -> float:
    inter = _intersection(a, b)
    return inter / max(a.area + b.area - inter, 1e-9)


def _bbox_of(region: Region) -> tuple:
    return (region.x0, region.y0, region.x1, region.y1)


def _lines_bbox(lines: list[Line]) -> tuple:
    boxes = [b for line in lines for b in line.boxes]
    return (min(b.x0 for b in boxes), min(b.y0 for b in boxes), max(b.x1 for b in boxes), max(b.y1 for b in boxes))


def _union(a: tuple, b: Optional[tuple]) -> tuple:
    if b is None:
        return a
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
