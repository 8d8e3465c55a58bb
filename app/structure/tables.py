"""Tables as cells: a grid from structure tokens, each cell's text from the page's own OCR words, and the
table written as HTML (always) and as a Markdown pipe table (where no cell spans). Pure: no model here.

The same `Table` comes from SLANet's tokens and boxes on the CPU path and from a VLM's own Markdown or
HTML table (app/structure/markdown_blocks.py), so `tables[]` has one shape on every engine.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Optional

_SPAN = re.compile(r'(rowspan|colspan)="?(\d+)"?')
_MAX_SPAN = 100  # a span a model or a document claims beyond this is noise, not a table


@dataclass
class TableCell:
    row: int
    column: int
    row_span: int = 1
    column_span: int = 1
    bbox: Optional[tuple] = None  # (x0, y0, x1, y1) in the page's coordinates; None where the engine gave none
    text: str = ""
    header: bool = False  # in the table's head (<thead>, or a Markdown table's first row)

    def as_json(self) -> dict:
        return {"row": self.row, "column": self.column, "row_span": self.row_span, "column_span": self.column_span,
                "bbox": None if self.bbox is None else [round(v, 1) for v in self.bbox], "text": self.text}


@dataclass
class Table:
    cells: list = field(default_factory=list)  # list[TableCell], row by row

    @property
    def rows(self) -> int:
        return max((c.row + c.row_span for c in self.cells), default=0)

    @property
    def columns(self) -> int:
        return max((c.column + c.column_span for c in self.cells), default=0)

    @property
    def has_spans(self) -> bool:
        return any(c.row_span > 1 or c.column_span > 1 for c in self.cells)

    def html(self) -> str:
        """Header rows (the model's <thead>, a Markdown table's first row) in <thead>, as PubTabNet writes."""
        rows, head = [], 0
        for row in range(self.rows):
            cells = [c for c in self.cells if c.row == row]
            tds = "".join(f"<td{_span_attributes(c)}>{html.escape(c.text)}</td>" for c in cells)
            rows.append(f"<tr>{tds}</tr>")
            if cells and all(c.header for c in cells) and head == row:
                head = row + 1
        if head == 0 or head == len(rows):
            return "<table>" + "".join(rows) + "</table>"
        return f"<table><thead>{''.join(rows[:head])}</thead><tbody>{''.join(rows[head:])}</tbody></table>"

    def markdown(self) -> str:
        """A pipe table where no cell spans; HTML where one does (Markdown tables cannot span)."""
        if self.has_spans or not self.cells:
            return self.html()
        grid = [["" for _ in range(self.columns)] for _ in range(self.rows)]
        for cell in self.cells:
            grid[cell.row][cell.column] = _pipe_escape(cell.text)
        lines = ["| " + " | ".join(grid[0]) + " |", "|" + "|".join("---" for _ in grid[0]) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in grid[1:]]
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {"rows": self.rows, "columns": self.columns, "cells": [c.as_json() for c in self.cells],
                "html": self.html(), "markdown": self.markdown()}


def _span_attributes(cell: TableCell) -> str:
    return "".join(f' {name}="{value}"' for name, value in (("rowspan", cell.row_span), ("colspan", cell.column_span))
                   if value > 1)


def _pipe_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def grid_from_tokens(tokens: list, boxes: list) -> Table:
    """Cells placed on the grid from HTML structure tokens (SLANet's, or a parsed table's), one box per
    cell token in order. A cell is placed at the first column its row has free: spans from rows above
    hold their columns."""
    table = Table()
    taken: set = set()
    row, column, box_index, header = -1, 0, 0, False
    pending: Optional[TableCell] = None
    for token in tokens:
        if token in ("<thead>", "</thead>"):
            header = token == "<thead>"
        elif token == "<tr>":
            row, column = row + 1, 0
        elif token.startswith("<td") and row >= 0:
            pending = TableCell(row, 0, header=header)
            if box_index < len(boxes):
                pending.bbox = boxes[box_index]
            box_index += 1
            if token == "<td></td>" or token == "<td>":
                column = _place(table, pending, column, taken)
                pending = None
        elif pending is not None and _SPAN.search(token):
            for name, value in _SPAN.findall(token):
                span = max(1, min(_MAX_SPAN, int(value)))
                if name == "rowspan":
                    pending.row_span = span
                else:
                    pending.column_span = span
        elif pending is not None and (token.startswith(">") or token == "</td>"):
            column = _place(table, pending, column, taken)
            pending = None
    return table


def _place(table: Table, cell: TableCell, column: int, taken: set) -> int:
    while (cell.row, column) in taken:
        column += 1
    cell.column = column
    for r in range(cell.row, cell.row + cell.row_span):
        for c in range(column, column + cell.column_span):
            taken.add((r, c))
    table.cells.append(cell)
    return column + cell.column_span


def fill_cells(table: Table, words: list) -> list:
    """Each word (an object with x0, y0, x1, y1 and text, in the cells' coordinates) to the cell it lies
    in most, its text joined in reading order; returns the words no cell took (left outside the table's
    cells, they are never dropped: the caller keeps them as text)."""
    boxed = [c for c in table.cells if c.bbox is not None]
    taken: dict = {}
    left = []
    for word in words:
        cell = _best_cell(boxed, word)
        if cell is None:
            left.append(word)
        else:
            taken.setdefault(id(cell), []).append(word)
    for cell in boxed:
        inside = taken.get(id(cell), [])
        cell.text = " ".join(w.text for w in _reading(inside) if w.text)
    return left


def _best_cell(cells: list, word) -> Optional[TableCell]:
    """The cell holding the word's centre, else the one it overlaps most, else the nearest (SLANet's
    boxes are approximate: a word between two cells still belongs to one of them)."""
    cx, cy = (word.x0 + word.x1) / 2, (word.y0 + word.y1) / 2
    best, best_overlap = None, 0.0
    for cell in cells:
        x0, y0, x1, y1 = cell.bbox
        if x0 <= cx <= x1 and y0 <= cy <= y1:
            return cell
        overlap = max(0.0, min(x1, word.x1) - max(x0, word.x0)) * max(0.0, min(y1, word.y1) - max(y0, word.y0))
        if overlap > best_overlap:
            best, best_overlap = cell, overlap
    if best is not None or not cells:
        return best
    return min(cells, key=lambda c: _distance(c.bbox, cx, cy))


def _distance(box: tuple, x: float, y: float) -> float:
    dx = max(box[0] - x, 0.0, x - box[2])
    dy = max(box[1] - y, 0.0, y - box[3])
    return dx * dx + dy * dy


def _reading(words: list) -> list:
    """Top to bottom by rows (a word whose centre lies within the row's band joins it), left to right."""
    rows: list = []
    for word in sorted(words, key=lambda w: (w.y0 + w.y1) / 2):
        centre = (word.y0 + word.y1) / 2
        if rows and rows[-1][0] <= centre <= rows[-1][1]:
            rows[-1][2].append(word)
        else:
            rows.append([word.y0, word.y1, [word]])
    return [w for _, _, row in rows for w in sorted(row, key=lambda w: w.x0)]
