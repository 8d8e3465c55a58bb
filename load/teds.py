"""TEDS, tree-edit-distance similarity of two HTML tables, as PubTabNet defines it (Zhong et al., 2020).

    TEDS(a, b) = 1 - EditDistance(a, b) / max(|a|, |b|)

over the trees of `<table>`, `<tr>` and `<td>` nodes (|t| counts nodes). Inserting or deleting a node
costs 1; renaming costs 1, except between two cells of the same tag and spans, which cost the
normalised Levenshtein distance of their text (tokenised by character, as PubTabNet's reference code
does). TEDS-struct ignores text: two such cells cost 0. `<thead>`, `<tbody>` and `<th>` are read as
`<tr>` rows and `<td>` cells on both sides, so that a table's head markup alone never costs anything.
The edit distance is APTED's (the `apted` package, the algorithm the reference code uses).
"""

from __future__ import annotations

from apted import APTED, Config
from lxml import html as lxml_html


class _Node:
    def __init__(self, tag: str, colspan: int = 1, rowspan: int = 1, text: str = ""):
        self.tag, self.colspan, self.rowspan, self.text = tag, colspan, rowspan, text
        self.children: list = []


class _Cost(Config):
    def __init__(self, structure_only: bool):
        self.structure_only = structure_only

    def rename(self, a: _Node, b: _Node) -> float:
        if a.tag != b.tag or a.colspan != b.colspan or a.rowspan != b.rowspan:
            return 1.0
        if a.tag == "td" and not self.structure_only:
            return _normalised_levenshtein(a.text, b.text)
        return 0.0

    def children(self, node: _Node) -> list:
        return node.children


def teds(predicted: str, truth: str, structure_only: bool = False) -> float:
    a, b = _tree(predicted), _tree(truth)
    if a is None or b is None:
        return 0.0
    distance = APTED(a, b, _Cost(structure_only)).compute_edit_distance()
    return max(0.0, 1.0 - distance / max(_count(a), _count(b)))


def _tree(markup: str):
    try:
        document = lxml_html.fromstring(markup)
    except Exception:
        return None
    tables = [document] if document.tag == "table" else document.findall(".//table")
    if not tables:
        return None
    root = _Node("table")
    for row in tables[0].iter("tr"):
        node = _Node("tr")
        for cell in row:
            if cell.tag in ("td", "th"):
                node.children.append(_Node("td", _int(cell.get("colspan")), _int(cell.get("rowspan")),
                                           " ".join(cell.text_content().split())))
        root.children.append(node)
    return root


def _int(value) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def _count(node: _Node) -> int:
    return 1 + sum(_count(child) for child in node.children)


def _normalised_levenshtein(a: str, b: str) -> float:
    if a == b:
        return 0.0
    if not a or not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1] / max(len(a), len(b))
