"""A VLM's page (Markdown, with HTML tables and LaTeX formulas as such models write them) as typed blocks:
headings are titles, pipe and HTML tables are tables with cells (the same `Table` as the CPU path's),
display formulas are equations, images are figures, the rest is text. The engine wrote no boxes, so
no block or cell has one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Optional

from app.structure.tables import Table, TableCell, grid_from_tokens

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_IMAGE = re.compile(r"^\s*!\[([^\]]*)\]\([^)]*\)\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_MAX_CELLS = 10_000  # a looping model's endless table stops here


@dataclass
class TextBlock:
    type: str
    text: str
    table: Optional[Table] = None


def markdown_blocks(markdown: str) -> list[TextBlock]:
    lines = markdown.splitlines()
    blocks: list[TextBlock] = []
    paragraph: list[str] = []
    i = 0

    def flush():
        if paragraph:
            blocks.append(TextBlock("text", "\n".join(paragraph).strip()))
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            flush()
        elif (heading := _HEADING.match(line)) is not None:
            flush()
            blocks.append(TextBlock("title", heading.group(1)))
        elif stripped.lower().startswith("<table"):
            flush()
            end = _find(lines, i, lambda l: "</table>" in l.lower())
            table = html_table("\n".join(lines[i:end + 1]))
            blocks.append(TextBlock("table", _table_text(table), table))
            i = end
        elif stripped.startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            flush()
            end = _find(lines, i + 2, lambda l: not l.strip().startswith("|"), missing=len(lines)) - 1
            table = pipe_table([lines[i]] + lines[i + 2:end + 1])
            blocks.append(TextBlock("table", _table_text(table), table))
            i = end
        elif stripped.startswith(("$$", "\\[")):
            flush()
            closing = "$$" if stripped.startswith("$$") else "\\]"
            done = stripped.endswith(closing) and len(stripped) > 2
            end = i if done else _find(lines, i + 1, lambda l: closing in l)
            blocks.append(TextBlock("equation", "\n".join(lines[i:end + 1]).strip()))
            i = end
        elif (image := _IMAGE.match(line)) is not None:
            flush()
            blocks.append(TextBlock("figure", image.group(1)))
        else:
            paragraph.append(line)
        i += 1
    flush()
    return [b for b in blocks if b.text or b.type in ("figure", "table")]


def _find(lines: list, start: int, found, missing: Optional[int] = None) -> int:
    for index in range(start, len(lines)):
        if found(lines[index]):
            return index
    return len(lines) - 1 if missing is None else missing


def pipe_table(rows: list[str]) -> Table:
    """A pipe table's header row and body rows (the separator row left out)."""
    table = Table()
    for r, row in enumerate(rows):
        inner = row.strip()
        inner = inner[1:] if inner.startswith("|") else inner
        inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
        for c, text in enumerate(_CELL_SPLIT.split(inner)):
            if len(table.cells) >= _MAX_CELLS:
                return table
            table.cells.append(TableCell(r, c, text=text.strip().replace("\\|", "|"), header=r == 0))
    return table


class _TableTokens(HTMLParser):
    """An HTML table as the structure tokens the table model writes, and each cell's text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[str] = []
        self.texts: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag in ("thead", "tbody") or tag == "tr":
            self.tokens.append(f"<{tag}>")
        elif tag in ("td", "th") and len(self.texts) < _MAX_CELLS:
            spans = [f' {name}="{value}"' for name, value in attrs if name in ("rowspan", "colspan") and value
                     and value.strip().isdigit()]
            self.tokens += ["<td"] + spans + [">"]
            self.texts.append("")
            self._in_cell = True
        elif tag == "br" and self._in_cell:
            self.texts[-1] += " "

    def handle_endtag(self, tag):
        if tag in ("thead", "tbody"):
            self.tokens.append(f"</{tag}>")
        elif tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.texts[-1] += data


def html_table(html: str) -> Table:
    parser = _TableTokens()
    parser.feed(html)
    parser.close()
    table = grid_from_tokens(parser.tokens, [])
    for cell, text in zip(table.cells, parser.texts):
        cell.text = " ".join(text.split())
    return table


def _table_text(table: Table) -> str:
    rows = {}
    for cell in table.cells:
        rows.setdefault(cell.row, []).append(cell.text)
    return "\n".join(" ".join(t for t in texts if t) for _, texts in sorted(rows.items()))
