"""A page's text and Markdown from its typed blocks.

Text: every block, in reading order, its lines one a line, blocks apart by a blank line (headers and
footers included: the text holds everything read). Markdown: titles as headings, tables as pipe tables
(HTML where a cell spans), figures and equations as a marked place with whatever text was read in them
(no LaTeX: no formula recogniser with registry weights exists), and headers and footers left out of the
body (they stay in the JSON).
"""

from __future__ import annotations

import statistics

from app.structure.layout import escape_markdown, is_heading
from app.structure.regions import Block

_OUT_OF_BODY = ("header", "footer")


def blocks_text(blocks: list[Block]) -> str:
    return "\n\n".join(b.text for b in blocks if b.lines).strip()


def blocks_markdown(blocks: list[Block]) -> str:
    lines = [line for b in blocks for line in b.lines]
    median_height = statistics.median(line.height for line in lines) if lines else 0.0
    parts = [_markdown(b, median_height) for b in blocks if b.type not in _OUT_OF_BODY]
    return "\n\n".join(p for p in parts if p).strip()


def _markdown(block: Block, median_height: float) -> str:
    text = "\n".join(escape_markdown(line.text) for line in block.lines)
    if block.type == "title":
        return "## " + text.replace("\n", " ") if text else ""
    if block.type == "table" and block.table is not None:
        return block.table.markdown()
    if block.type in ("figure", "equation"):
        return f"<!-- {block.type} -->" + ("\n" + text if text else "")
    if block.type == "text" and block.lines and is_heading(block.lines, median_height):
        return "## " + text.replace("\n", " ")
    return text
