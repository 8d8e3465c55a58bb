"""Reading order and Markdown on hand-placed boxes."""

from __future__ import annotations

from app.structure.layout import Box, box_from_quad, page_markdown, page_text, paragraphs, reading_order


def box(x0, y0, text, width=100, height=20):
    return Box(x0, y0, x0 + width, y0 + height, text, 0.9)


def order(boxes):
    return [line.text for line in reading_order(boxes)]


def test_lines_top_to_bottom_and_left_to_right():
    boxes = [box(300, 0, "world"), box(0, 40, "second"), box(0, 2, "hello")]
    assert order(boxes) == ["hello world", "second"]


def test_two_columns_are_read_column_by_column():
    left = [box(0, y, f"L{i}", width=200) for i, y in enumerate(range(0, 300, 30))]
    right = [box(300, y + 15, f"R{i}", width=200) for i, y in enumerate(range(0, 300, 30))]  # rows offset
    lines = order(right + left)
    assert lines == [f"L{i}" for i in range(10)] + [f"R{i}" for i in range(10)]


def test_receipt_rows_stay_rows_across_a_gutter():
    labels = [box(0, y, f"item{i}") for i, y in enumerate(range(0, 200, 30))]
    amounts = [box(500, y + 1, f"{i}.00", width=60) for i, y in enumerate(range(0, 200, 30))]
    assert order(amounts + labels) == [f"item{i} {i}.00" for i in range(7)]


def test_title_over_two_columns():
    title = box(0, 0, "Title", width=500, height=40)
    left = [box(0, 60 + 30 * i, f"L{i}", width=200) for i in range(4)]
    right = [box(300, 75 + 30 * i, f"R{i}", width=200) for i in range(4)]
    assert order([*right, title, *left]) == ["Title", "L0", "L1", "L2", "L3", "R0", "R1", "R2", "R3"]


def test_paragraphs_split_on_gaps_and_column_jumps():
    lines = reading_order([box(0, 0, "a"), box(0, 22, "b"), box(0, 100, "c")])
    assert [[l.text for l in group] for group in paragraphs(lines)] == [["a", "b"], ["c"]]
    assert page_text(paragraphs(lines)) == "a\nb\n\nc"


def test_markdown_headings_and_escaping():
    lines = reading_order([box(0, 0, "Big Title", height=50), box(0, 80, "# not a heading"), box(0, 102, "1. item *x*")])
    markdown = page_markdown(paragraphs(lines))
    assert markdown.splitlines() == ["## Big Title", "", "\\# not a heading", "1\\. item \\*x\\*"]


def test_box_from_quad_maps_back_to_source_pixels():
    b = box_from_quad([[10, 20], [110, 22], [108, 42], [9, 40]], scale=0.5, text="t", confidence=0.8)
    assert (b.x0, b.y0, b.x1, b.y1) == (18, 40, 220, 84)


def test_empty_and_degenerate_boxes():
    assert reading_order([]) == []
    assert order([Box(5, 5, 5, 9, "zero width", 1.0), box(0, 0, "ok")]) == ["ok"]


def test_two_columns_on_the_same_baselines_are_read_column_by_column():
    left = [box(0, 30 * i, f"L{i}", width=400) for i in range(8)]
    right = [box(450, 30 * i, f"R{i}", width=400) for i in range(8)]  # every row shared: one band per row
    assert order(right + left) == [f"L{i}" for i in range(8)] + [f"R{i}" for i in range(8)]


def test_notes_in_a_margin_come_after_the_body_they_sit_beside():
    body = [box(100, 30 * i, f"body{i}", width=600) for i in range(10)]
    notes = [box(750, 30, "noteA", width=150), box(750, 180, "noteB", width=150)]
    assert order(notes + body) == [f"body{i}" for i in range(10)] + ["noteA", "noteB"]


def test_a_receipts_short_labels_and_amounts_stay_rows_even_when_they_fill_their_side():
    # each side a third of the width and its lines filling it, as at the foot of devset receipt sroie_037
    labels = [box(0, 30 * i, text, width=160) for i, text in enumerate(["TOTAL:", "Type 3", "GST Summary", "SR 6%"])]
    amounts = [box(400, 30 * i, text, width=140) for i, text in enumerate(["RM 57.80", "Amount RM", "54.56", "3.27"])]
    assert order(amounts + labels) == ["TOTAL: RM 57.80", "Type 3 Amount RM", "GST Summary 54.56", "SR 6% 3.27"]


def test_a_two_column_page_read_by_the_engine_comes_out_column_by_column():
    import numpy as np

    from app.engines.base import EngineRuntime
    from app.engines.ppocr import PPOCREngine
    from app.settings.engines import TesseractOptions
    from app.synthetic import render_text_page

    left = [f"left column line {n} of running text" for n in range(1, 7)]
    right = [f"right column line {n} of running text" for n in range(1, 7)]
    page = render_text_page(left + right, width=1800, font_size=28, columns=2)  # the same baselines
    engine = PPOCREngine(TesseractOptions(fraktur_pass="off"), EngineRuntime(threads=1))
    engine.load()
    [result] = engine.infer([np.asarray(page)])
    boxes = [box_from_quad(line.quad, 1.0, line.text, line.confidence) for line in result.lines]
    assert [line.text for line in reading_order(boxes)] == left + right
