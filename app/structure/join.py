"""The page's lines and its structure joined: typed blocks in reading order, tables with their cells' text.

The StructureModel's regions and cell boxes are in engine pixels of the upright page, like the engine's
lines; here they become source pixels of the upright page (divided by the page's scale), where the
lines already are (app/structure/layout.py's `box_from_quad`).
"""

from __future__ import annotations

from typing import Optional

from app.structure.layout import Box, paragraphs, reading_order
from app.schemas import PageStructure
from app.structure.regions import Block, Region, page_blocks
from app.structure.tables import Table, fill_cells, grid_from_tokens

_ROWS_IN_CELLS = 0.6  # a table candidate: at least this share of its rows hold several boxes...
_CELL_TEXT = 8.0  # ...and its median box is shorter than this many times its height (prose runs longer)


def structured_blocks(boxes: list[Box], structure: Optional[PageStructure], scale: float) -> list[Block]:
    """Blocks holding every box once. Without regions (structure off, none found, or no models) the blocks
    are the line reader's paragraphs, typed text: the page reads exactly as it did before regions."""
    regions = _regions(structure, scale) if structure is not None else []
    if regions:
        regions = _confirm_candidates(regions, structure, boxes)
    if not regions:
        lines = reading_order(boxes)
        return [Block("text", _bbox(group), group) for group in paragraphs(lines)]
    blocks = page_blocks(boxes, regions)
    for block in blocks:
        if block.type == "table" and block.table is not None:
            _fill(block)
    return blocks


def _regions(structure: PageStructure, scale: float) -> list[Region]:
    regions = []
    for index, (kind, box, score) in enumerate(structure.regions):
        region = Region(kind, *(v / scale for v in box), score=score)
        if index in structure.tables:
            tokens, cells = structure.tables[index]
            region.table = grid_from_tokens(list(tokens), [tuple(v / scale for v in cell) for cell in cells])
            if not region.table.cells:
                region.table = None
        regions.append(region)
    return regions


def _confirm_candidates(regions: list[Region], structure: PageStructure, boxes: list[Box]) -> list[Region]:
    """A text region the table model read because it stands in columns becomes a table only where the page's
    own lines agree: rows of several short boxes, not prose. Otherwise it stays text, and a region added
    for a page without any is dropped (the page then reads as its lines, as before regions)."""
    kept = []
    for index, region in enumerate(regions):
        if index in structure.candidates:
            inside = [b for b in boxes if region.x0 <= (b.x0 + b.x1) / 2 <= region.x1
                      and region.y0 <= (b.y0 + b.y1) / 2 <= region.y1]
            if region.table is not None and table_like(inside, region.table):
                region.type = "table"
            else:
                region.table = None
                if index == structure.whole_page:
                    continue
        kept.append(region)
    return kept


def table_like(boxes: list[Box], table: Table) -> bool:
    """Three rows or more, most of them holding several boxes, the boxes short (cells, not sentences), and
    a table read with at least two rows and two columns."""
    if table.rows < 2 or table.columns < 2 or len(boxes) < 4:
        return False
    rows = _rows(boxes)
    several = sum(1 for row in rows if len(row) >= 2)
    widths = sorted(b.x1 - b.x0 for b in boxes)
    heights = sorted(b.y1 - b.y0 for b in boxes)
    short = widths[len(widths) // 2] < _CELL_TEXT * heights[len(heights) // 2]
    return len(rows) >= 3 and several >= _ROWS_IN_CELLS * len(rows) and short


def _rows(boxes: list[Box]) -> list[list[Box]]:
    rows: list[list[Box]] = []
    for box in sorted(boxes, key=lambda b: (b.y0 + b.y1) / 2):
        centre = (box.y0 + box.y1) / 2
        if rows and min(b.y0 for b in rows[-1]) <= centre <= max(b.y1 for b in rows[-1]):
            rows[-1].append(box)
        else:
            rows.append([box])
    return rows


def _fill(block: Block) -> None:
    """The table's cells get the words of the block's lines (a line the engine did not split into words is
    one word). A word no cell holds stays in the block's lines, so nothing read is lost either way."""
    table: Table = block.table
    words = [w for line in block.lines for box in line.boxes for w in (box.words or [box])]
    fill_cells(table, words)


def _bbox(lines) -> tuple:
    boxes = [b for line in lines for b in line.boxes]
    return (min(b.x0 for b in boxes), min(b.y0 for b in boxes), max(b.x1 for b in boxes), max(b.y1 for b in boxes))
