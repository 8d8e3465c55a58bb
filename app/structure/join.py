"""The page's lines and its structure joined: typed blocks in reading order, tables with their cells' text.

The StructureModel's regions and cell boxes are in engine pixels of the upright page, like the engine's
lines; here they become source pixels of the upright page (divided by the page's scale), where the
lines already are (app/pipeline/layout.py's `box_from_quad`).
"""

from __future__ import annotations

from typing import Optional

from app.pipeline.layout import Box, paragraphs, reading_order
from app.schemas import PageStructure
from app.structure.regions import Block, Region, page_blocks
from app.structure.tables import Table, fill_cells, grid_from_tokens


def structured_blocks(boxes: list[Box], structure: Optional[PageStructure], scale: float) -> list[Block]:
    """Blocks holding every box once. Without regions (structure off, none found, or no models) the blocks
    are the line reader's paragraphs, typed text: the page reads exactly as it did before regions."""
    regions = _regions(structure, scale) if structure is not None else []
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


def _fill(block: Block) -> None:
    """The table's cells get the words of the block's lines (a line the engine did not split into words is
    one word). A word no cell holds stays in the block's lines, so nothing read is lost either way."""
    table: Table = block.table
    words = [w for line in block.lines for box in line.boxes for w in (box.words or [box])]
    fill_cells(table, words)


def _bbox(lines) -> tuple:
    boxes = [b for line in lines for b in line.boxes]
    return (min(b.x0 for b in boxes), min(b.y0 for b in boxes), max(b.x1 for b in boxes), max(b.y1 for b in boxes))
