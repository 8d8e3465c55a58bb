"""Reading order and Markdown on hand-placed boxes."""

from __future__ import annotations

from app.pipeline.layout import Box, box_from_quad, page_markdown, page_text, paragraphs, reading_order


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
