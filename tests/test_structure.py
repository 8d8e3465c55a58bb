"""Document structure (app/structure): tables as cells from structure tokens, typed blocks in reading order
that never lose a line, a VLM's Markdown in the same shapes, and the real models on pages drawn with a
known table (scored by TEDS against the drawn table's HTML, load/teds.py)."""

from __future__ import annotations

import numpy as np
import pytest

from app.structure.layout import Box, paragraphs, reading_order
from app.structure.markdown_blocks import markdown_blocks
from app.structure.regions import Region, page_blocks
from app.structure.tables import fill_cells, grid_from_tokens
from load.teds import teds


def box(x0, y0, x1, y1, text, words=()):
    return Box(x0, y0, x1, y1, text, 0.9, list(words))


# SLANet writes a spanning cell as `<td`, its span attributes, `>`, `</td>`; a plain one as `<td></td>`.
SPANNED = ["<thead>", "<tr>", "<td></td>", "<td", ' colspan="2"', ">", "</td>", "</tr>", "</thead>", "<tbody>",
           "<tr>", "<td", ' rowspan="2"', ">", "</td>", "<td></td>", "<td></td>", "</tr>",
           "<tr>", "<td></td>", "<td></td>", "</tr>", "</tbody>"]


def test_a_grid_from_structure_tokens_places_spanned_cells():
    table = grid_from_tokens(SPANNED, [])
    placed = [(c.row, c.column, c.row_span, c.column_span) for c in table.cells]
    # the second row's rowspan holds column 0 in the third row: its cells start at column 1
    assert placed == [(0, 0, 1, 1), (0, 1, 1, 2), (1, 0, 2, 1), (1, 1, 1, 1), (1, 2, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1)]
    assert (table.rows, table.columns, table.has_spans) == (3, 3, True)
    assert table.markdown().startswith("<table>")  # Markdown tables cannot span
    assert table.html() == ('<table><thead><tr><td></td><td colspan="2"></td></tr></thead><tbody><tr><td rowspan="2">'
                            '</td><td></td><td></td></tr><tr><td></td><td></td></tr></tbody></table>')


def test_cells_take_the_page_words_they_hold_and_a_plain_table_is_a_pipe_table():
    tokens = ["<tr>", "<td></td>", "<td></td>", "</tr>", "<tr>", "<td></td>", "<td></td>", "</tr>"]
    cells = [(0, 0, 100, 20), (100, 0, 200, 20), (0, 20, 100, 40), (100, 20, 200, 40)]
    table = grid_from_tokens(tokens, cells)
    words = [box(110, 2, 150, 18, "Price"), box(5, 2, 40, 18, "Item"), box(45, 2, 90, 18, "name"),
             box(5, 22, 50, 38, "Tea|pot"), box(120, 21, 160, 39, "3.40"), box(205, 25, 230, 35, "stray")]
    left = fill_cells(table, words)
    assert [c.text for c in table.cells] == ["Item name", "Price", "Tea|pot", "3.40 stray"]
    assert left == []  # the nearest cell takes a word outside every cell box: none is dropped
    assert table.markdown() == "| Item name | Price |\n|---|---|\n| Tea\\|pot | 3.40 stray |"


def lines_text(blocks) -> list[str]:
    return [box.text for block in blocks for line in block.lines for box in line.boxes]


RECEIPT = [box(10, 10 + 30 * i, 200, 30 + 30 * i, f"ITEM {i}") for i in range(6)] + \
          [box(400, 10 + 30 * i, 460, 30 + 30 * i, f"{i}.00") for i in range(6)]


def test_a_page_the_model_calls_one_figure_reads_as_its_lines_alone():
    regions = [Region("figure", 0, 0, 500, 300, 0.9), Region("text", 5, 5, 210, 45, 0.6)]
    blocks = page_blocks(RECEIPT, regions)
    expected = [Box for Box in paragraphs(reading_order(RECEIPT))]
    assert [b.type for b in blocks] == ["text"] * len(expected)
    assert lines_text(blocks) == [b.text for group in expected for line in group for b in line.boxes]
    assert [line.text for line in blocks[0].lines][:2] == ["ITEM 0 0.00", "ITEM 1 1.00"]  # rows stay rows


def test_labels_and_amounts_boxed_apart_stay_rows():
    regions = [Region("text", 5, 5, 205, 195, 0.9), Region("text", 395, 5, 465, 195, 0.8)]
    blocks = page_blocks(RECEIPT, regions)
    assert len(blocks) == 1 and [line.text for line in blocks[0].lines][:2] == ["ITEM 0 0.00", "ITEM 1 1.00"]


def test_every_line_is_in_one_block_once_and_regions_set_the_order():
    title = box(50, 10, 450, 50, "Annual report")
    left = [box(10, 100 + 25 * i, 240, 120 + 25 * i, f"left {i} running text of the first column") for i in range(4)]
    right = [box(280, 100 + 25 * i, 510, 120 + 25 * i, f"right {i} running text of the second column") for i in range(4)]
    stray = box(10, 400, 100, 420, "page 7")
    regions = [Region("title", 40, 5, 460, 55, 0.9), Region("title", 45, 8, 455, 52, 0.5),  # the same box twice
               Region("text", 5, 95, 245, 205, 0.9), Region("text", 275, 95, 515, 205, 0.9)]
    boxes = [stray] + right + left + [title]
    blocks = page_blocks(boxes, regions)
    assert sorted(lines_text(blocks)) == sorted(b.text for b in boxes)
    assert lines_text(blocks) == [title.text] + [b.text for b in left] + [b.text for b in right] + [stray.text]
    assert [b.type for b in blocks] == ["title", "text", "text", "text"]


CAPTURED_VLM = """# Quarterly report

Figures of section 3.

| Item | Qty | Price |
|---|---|---|
| Paper | 12 | 3.40 |
| Toner \\| black | 2 | 61.00 |

<table><thead><tr><th>Office</th><th colspan="2">Half year</th></tr></thead>
<tbody><tr><td rowspan="2">North</td><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></tbody></table>

$$
E = mc^2
$$

![chart](figure1.png)
"""


def test_a_vlm_page_yields_the_same_table_shape_as_the_cpu_path():
    blocks = markdown_blocks(CAPTURED_VLM)
    assert [b.type for b in blocks] == ["title", "text", "table", "table", "equation", "figure"]
    pipe, spanned = blocks[2].table, blocks[3].table
    assert [c.text for c in pipe.cells] == ["Item", "Qty", "Price", "Paper", "12", "3.40", "Toner | black", "2", "61.00"]
    cpu = grid_from_tokens(SPANNED, [])  # the CPU path's table for the same structure
    for cell, text in zip(cpu.cells, ["Office", "Half year", "North", "1", "2", "3", "4"]):
        cell.text = text
    assert spanned.as_json()["cells"] == cpu.as_json()["cells"]
    assert set(spanned.as_json()) == set(cpu.as_json()) == {"rows", "columns", "cells", "html", "markdown"}
    assert teds(spanned.html(), cpu.html()) == 1.0


def test_a_looping_vlm_table_stops_at_the_cell_cap():
    endless = "| a | b |\n|---|---|\n" + "| x | y |\n" * 20_000
    [block] = markdown_blocks(endless)
    assert len(block.table.cells) == 10_000


@pytest.fixture(scope="module")
def readers():
    from app.config import Settings
    from app.engines import build_engine
    from app.structure.deployment import StructureReader
    from app.settings.structure import StructureSettings

    engine = build_engine(Settings(), threads=2)
    engine.load()
    return engine, StructureReader(StructureSettings())


def page_result(readers, rgb: np.ndarray) -> dict:
    from app.pipeline.postprocess import build_page_result
    from app.schemas import PageOCR, PagePayload

    engine, structure = readers
    [result] = engine.infer([rgb])
    page = PagePayload("t", 0, 1, rgb, rgb.shape[1], rgb.shape[0], rgb.shape[1], rgb.shape[0], 1.0)
    return build_page_result(PageOCR(page, result, 1, page.pixels), structure.read(rgb))


@pytest.mark.parametrize("seed", [0, 1, 3])  # boxed, three-line, boxed with spans
def test_a_drawn_report_page_comes_back_with_its_title_and_its_table_cell_by_cell(readers, seed):
    from app.testkit.tables import table_page

    drawn = table_page(seed)
    page = page_result(readers, np.asarray(drawn.image))
    assert "table" in [r["type"] for r in page["regions"]] and page["regions"][0]["type"] == "title"
    [table] = page["tables"]
    assert teds(table["html"], drawn.html) >= 0.95, (table["html"], drawn.html)
    assert table["rows"] == drawn.rows and table["columns"] == drawn.columns
    assert all(cell["bbox"] is not None for cell in table["cells"])
    assert page["markdown"].startswith(f"## {drawn.title}")
    assert sum(len(r["text"]) for r in page["regions"]) >= sum(len(b["text"]) for b in page["blocks"])


def test_a_devset_photo_the_model_calls_a_figure_loses_no_line(readers):
    from PIL import Image

    from load.common import DEFAULT_MANIFEST

    image = Image.open(DEFAULT_MANIFEST.parent / "zh" / "pages" / "mtwi2018_109.jpg").convert("RGB")
    rgb = np.asarray(image)
    _, structure = readers
    assert "figure" in [kind for kind, _, _ in structure.read(rgb).regions]  # what the model says of it
    page = page_result(readers, rgb)
    texts = [b["text"] for b in page["blocks"]]
    region_lines = "\n".join(r["text"] for r in page["regions"]).split("\n")
    assert sorted(region_lines) == sorted(line for line in _lines_of(page)) and len(texts) >= 8
    assert {r["type"] for r in page["regions"]} == {"text"}


def _lines_of(page: dict) -> list[str]:
    by_line: dict = {}
    for block in page["blocks"]:
        by_line.setdefault(block["line"], []).append(block["text"])
    return [" ".join(p for p in parts if p) for _, parts in sorted(by_line.items())]


def test_a_borderless_table_cropped_tight_is_read_as_a_table(readers):
    """The layout model reads a table without rules, cropped to itself, as text or a figure: its columns of
    ink make it a candidate, and the page's own rows of short boxes confirm it."""
    from app.testkit.tables import table_page

    drawn = table_page(2)  # no rules at all
    assert drawn.ruling == "none"
    x0, y0, x1, y1 = drawn.table_box
    page = page_result(readers, np.asarray(drawn.image.crop((x0 - 24, y0 - 24, x1 + 24, y1 + 24))))
    [table] = page["tables"]
    assert teds(table["html"], drawn.html) >= 0.95


def test_prose_in_two_columns_is_not_a_table():
    from app.structure.join import table_like
    from app.structure.tables import Table, TableCell

    two_by_two = Table([TableCell(0, 0), TableCell(0, 1), TableCell(1, 0), TableCell(1, 1)])
    prose = [box(10, 20 * i, 400, 20 * i + 16, "a sentence of running text") for i in range(6)] + \
            [box(440, 20 * i, 830, 20 * i + 16, "another sentence of running text") for i in range(6)]
    cells = [box(10 + 120 * c, 20 * i, 80 + 120 * c, 20 * i + 16, "12.5") for i in range(5) for c in range(3)]
    assert not table_like(prose, two_by_two)
    assert table_like(cells, two_by_two)
    assert not table_like(cells, Table([TableCell(0, 0), TableCell(1, 0)]))  # the model read one column


def test_columns_of_ink_are_found_and_rules_do_not_hide_them():
    from app.structure.gutters import in_columns

    page = np.full((120, 400), 255, np.uint8)
    for row in range(4):
        page[10 + 25 * row:22 + 25 * row, 20:120] = 0  # a column of words
        page[10 + 25 * row:22 + 25 * row, 220:300] = 0  # and another, a gutter between
    assert in_columns(page)
    ruled = page.copy()
    ruled[5, :] = ruled[:, 200] = 0  # a horizontal rule across, and a vertical one in the gutter
    assert in_columns(ruled)
    prose = np.full((120, 400), 255, np.uint8)
    for row in range(4):
        prose[10 + 25 * row:22 + 25 * row, 20:380] = 0
    assert not in_columns(prose)
    one_line = np.full((40, 400), 255, np.uint8)
    one_line[10:22, 20:120] = one_line[10:22, 220:300] = 0
    assert not in_columns(one_line)  # a single row is no table


def test_a_vlm_page_and_a_cpu_page_answer_tables_in_one_shape():
    """build_page_result for an engine that writes Markdown, and for one that boxes lines with a table region
    the StructureModel read: the same keys at every level, the VLM's without boxes."""
    from app.engines.word_boxes import TextWord
    from app.pipeline.postprocess import build_page_result
    from app.schemas import EngineResult, PageOCR, PagePayload, PageStructure, TextLine

    page = PagePayload("t", 0, 1, None, 400, 200, 400, 200, 1.0)
    written = build_page_result(PageOCR(page, EngineResult(markdown=CAPTURED_VLM), 1, 1))

    def line(x0, y0, x1, y1, text):
        quad = [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]
        return TextLine(quad, text, 0.9, [TextWord(quad, text, 0.9)])

    lines = [line(10, 10, 60, 30, "Office"), line(110, 10, 260, 30, "Half year"),
             line(10, 40, 60, 60, "North"), line(110, 40, 140, 60, "1"), line(210, 40, 240, 60, "2"),
             line(110, 70, 140, 90, "3"), line(210, 70, 240, 90, "4")]
    cells = [(0, 0, 100, 35), (100, 0, 300, 35), (0, 35, 100, 95), (100, 35, 200, 65), (200, 35, 300, 65),
             (100, 65, 200, 95), (200, 65, 300, 95)]
    structure = PageStructure([("table", (0, 0, 300, 95), 0.9)], {0: (SPANNED, cells)})
    boxed = build_page_result(PageOCR(page, EngineResult(lines=lines), 1, 1), structure)
    [cpu] = boxed["tables"]
    vlm = written["tables"][1]
    assert set(cpu) == set(vlm) and set(cpu["cells"][0]) == set(vlm["cells"][0])
    assert [{k: v for k, v in c.items() if k != "bbox"} for c in cpu["cells"]] == \
           [{k: v for k, v in c.items() if k != "bbox"} for c in vlm["cells"]]
    assert cpu["html"] == vlm["html"] and all(c["bbox"] for c in cpu["cells"]) and not any(c["bbox"] for c in vlm["cells"])
    assert [r["type"] for r in written["regions"]] == ["title", "text", "table", "table", "equation", "figure"]
    assert set(written["regions"][0]) == set(boxed["regions"][0])


def test_a_page_the_structure_models_choke_on_is_still_read_as_lines():
    import asyncio

    from app.pipeline.postprocess import build_page_result
    from app.schemas import EngineResult, PageOCR, PagePayload, TextLine
    from app.structure.deployment import StructureModel

    class Choking:
        def read(self, image):
            raise ValueError("a crafted page")

    model = StructureModel.func_or_class.__new__(StructureModel.func_or_class)
    model._reader, model._missing = Choking(), None
    page = PagePayload("t", 0, 1, np.zeros((50, 200, 3), np.uint8), 200, 50, 200, 50, 1.0)
    found = asyncio.run(model.analyse(page))
    assert found.regions == [] and "not read (ValueError)" in found.note
    line = TextLine([[10, 10], [150, 10], [150, 30], [10, 30]], "still here", 0.9)
    result = build_page_result(PageOCR(page, EngineResult(lines=[line]), 1, 1), found)
    assert result["text"] == "still here" and found.note in result["notes"]
