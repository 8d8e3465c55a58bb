"""Report pages with a table of known structure, drawn from a seed: the table devset (load/tables.py)
and the structure tests. Each table has a header row, sometimes a header cell spanning columns and a
first-column cell spanning rows, and one of three rulings: every cell boxed, a three-line table (rules
above and below the header and at the foot only), or no rules at all."""

from __future__ import annotations

import html
import random
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

RULINGS = ("grid", "three-line", "none")
_WORDS = ("Revenue", "Costs", "Region", "North", "South", "East", "West", "Total", "Units", "Price", "Margin",
          "Budget", "Actual", "Q1", "Q2", "Q3", "Q4", "Staff", "Assets", "Loans", "Rate", "Year", "Office")


@dataclass
class Cell:
    text: str
    row: int
    column: int
    row_span: int = 1
    column_span: int = 1


@dataclass
class TablePage:
    image: Image.Image
    cells: list  # list[Cell], row by row
    rows: int
    columns: int
    ruling: str
    title: str
    table_box: tuple  # (x0, y0, x1, y1) in the image's pixels

    @property
    def html(self) -> str:
        return cells_html(self.cells, self.rows)


def cells_html(cells: list, rows: int) -> str:
    """<table><thead><tr><td ...>text</td>...</tr></thead><tbody>...</tbody></table>: the first row is the
    header, as PubTabNet writes a table (and the service, where the model finds the head)."""
    body = []
    for row in range(rows):
        tds = []
        for cell in (c for c in cells if c.row == row):
            spans = "".join(f' {name}="{value}"' for name, value in (("rowspan", cell.row_span),
                                                                    ("colspan", cell.column_span)) if value > 1)
            tds.append(f"<td{spans}>{html.escape(cell.text)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><thead>{body[0]}</thead><tbody>{''.join(body[1:])}</tbody></table>"


def table_page(seed: int, ruling: str | None = None, width: int = 1240) -> TablePage:
    rng = random.Random(seed)
    ruling = ruling or RULINGS[seed % len(RULINGS)]
    rows, columns = rng.randint(4, 8), rng.randint(3, 5)
    cells = _cells(rng, rows, columns)
    font = ImageFont.load_default(size=22)
    title_font = ImageFont.load_default(size=40)
    column_width = (width - 200) // columns
    row_height = 46
    top = 260
    height = top + rows * row_height + 260
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    title = f"Quarterly report {seed}"
    draw.text((100, 60), title, fill="black", font=title_font)
    draw.text((100, 150), f"The table below lists the figures of section {seed % 9 + 1} for each office.",
              fill="black", font=font)
    x0, y0 = 100, top
    for cell in cells:
        left, upper = x0 + cell.column * column_width, y0 + cell.row * row_height
        right, lower = left + cell.column_span * column_width, upper + cell.row_span * row_height
        if ruling == "grid":
            draw.rectangle((left, upper, right, lower), outline="black", width=2)
        draw.text((left + 12, upper + (lower - upper) / 2 - 12), cell.text, fill="black", font=font)
    x1, y1 = x0 + columns * column_width, y0 + rows * row_height
    if ruling == "three-line":
        for y in (y0, y0 + row_height, y1):
            draw.line((x0, y, x1, y), fill="black", width=3 if y != y0 + row_height else 1)
    draw.text((100, y1 + 60), f"Table {seed}: figures by office, unaudited.", fill="black", font=font)
    return TablePage(image, cells, rows, columns, ruling, title, (x0, y0, x1, y1))


def _cells(rng: random.Random, rows: int, columns: int) -> list:
    taken = set()
    cells = []
    header_span = rng.random() < 0.5 and columns >= 4
    row_span = rng.random() < 0.5 and rows >= 5
    for row in range(rows):
        for column in range(columns):
            if (row, column) in taken:
                continue
            text = rng.choice(_WORDS) if row == 0 or column == 0 else f"{rng.randint(1, 9999):,}"
            cell = Cell(text, row, column)
            if header_span and row == 0 and column == 1:
                cell.column_span, cell.text = 2, "Half year"
            if row_span and row == 2 and column == 0:
                cell.row_span = 2
            cells.append(cell)
            for r in range(row, row + cell.row_span):
                for c in range(column, column + cell.column_span):
                    taken.add((r, c))
    return cells
