"""TEDS, tree-edit-distance similarity of two HTML tables, as PubTabNet defines it (Zhong et al., 2020):

    TEDS(a, b) = 1 - EditDistance(a, b) / max(|a|, |b|)

The tree is the table's elements (`<thead>`, `<tbody>`, `<tr>`, `<td>`) under `<table>`; a cell's
content is a sequence of tokens: its characters, and each markup tag in it (`<b>`, `</b>`) as one token.
|t| counts every element under `<table>`, markup inside cells included, as the reference code counts
them. Inserting or deleting a node costs 1; renaming costs 1, except between two cells of the same
spans, which cost the normalised Levenshtein distance of their content (0 where both are empty).
TEDS-struct ignores content. The edit distance is APTED's (the `apted` package), as in PubTabNet's
reference implementation, whose scores this one reproduces (tests/test_teds.py).
"""

from __future__ import annotations

from apted import APTED, Config
from lxml import etree
from lxml import html as lxml_html

from load.metrics import edit_distance


class _Node:
    def __init__(self, tag: str, colspan: int = 0, rowspan: int = 0, content: tuple = ()):
        self.tag, self.colspan, self.rowspan, self.content = tag, colspan, rowspan, content
        self.children: list = []


class _Cost(Config):
    def rename(self, a: _Node, b: _Node) -> float:
        if a.tag != b.tag or a.colspan != b.colspan or a.rowspan != b.rowspan:
            return 1.0
        if a.tag == "td" and (a.content or b.content):
            return edit_distance(a.content, b.content) / max(len(a.content), len(b.content))
        return 0.0

    def children(self, node: _Node) -> list:
        return node.children


def teds(predicted: str, truth: str, structure_only: bool = False) -> float:
    """TEDS of two HTML documents (or fragments) holding a table; 0 where either has none."""
    a, b = _table(predicted), _table(truth)
    if a is None or b is None:
        return 0.0
    size = max(len(a.xpath(".//*")), len(b.xpath(".//*")))
    if size == 0:
        return 1.0
    tree_a, tree_b = _tree(a, structure_only), _tree(b, structure_only)
    return 1.0 - APTED(tree_a, tree_b, _Cost()).compute_edit_distance() / size


def _table(markup: str):
    if not markup or not markup.strip():
        return None
    try:
        root = lxml_html.fromstring(markup, parser=lxml_html.HTMLParser(remove_comments=True, encoding="utf-8"))
    except (etree.ParserError, ValueError):
        return None
    if root.tag == "table":
        return root
    found = root.xpath(".//table")
    return found[0] if found else None


def _tree(element, structure_only: bool) -> _Node:
    if element.tag == "td":
        content = () if structure_only else tuple(_tokens(element)[1:-1])
        return _Node("td", _span(element.get("colspan")), _span(element.get("rowspan")), content)
    node = _Node(element.tag)
    node.children = [_tree(child, structure_only) for child in element if isinstance(child.tag, str)]
    return node


def _tokens(element) -> list:
    """The cell as the reference tokenises it: <tag>, its characters, its children, </tag>, then (below a
    cell) the tail's characters."""
    tokens = [f"<{element.tag}>"] + list(element.text or "")
    for child in element:
        if isinstance(child.tag, str):
            tokens += _tokens(child)
    tokens.append(f"</{element.tag}>")
    if element.tag != "td":
        tokens += list(element.tail or "")
    return tokens


def _span(value) -> int:
    try:
        return int(value or 1)
    except ValueError:
        return 1
