"""load/teds.py against PubTabNet's reference implementation (github.com/ibm-aur-nlp/PubTabNet, src/metric.py).

The expected scores were computed with the reference itself on these pairs (it reads `<html><body>`
documents); on its own 20 sample predictions (src/sample_pred.json against src/sample_gt.json) ours
differed from it by 0 on TEDS and TEDS-struct alike.
"""

from __future__ import annotations

import pytest

from load.teds import teds

PAIRS = [  # (predicted, truth, TEDS by the reference, TEDS-struct by the reference)
    ("<table><tr><td>a</td><td>b</td></tr></table>", "<table><tr><td>a</td><td>b</td></tr></table>", 1.0, 1.0),
    ("<table><thead><tr><td><b>Year</b></td><td>Units</td></tr></thead><tbody><tr><td>2019</td><td>12</td></tr></tbody>"
     "</table>", "<table><thead><tr><td><b>Year</b></td><td>Units</td></tr></thead><tbody><tr><td>2019</td><td>13</td>"
     "</tr></tbody></table>", 0.944444, 1.0),
    ('<table><tr><td colspan="2">Half year</td></tr><tr><td>1</td><td>2</td></tr></table>',
     "<table><tr><td>Half year</td><td></td></tr><tr><td>1</td><td>2</td></tr></table>", 0.666667, 0.666667),
    ("<table><tr><td>Costs</td><td>3,637</td></tr><tr><td>5,903</td></tr></table>",
     '<table><tr><td rowspan="2">Costs</td><td>3,637</td></tr><tr><td>5,903</td></tr></table>', 0.8, 0.8),
    ("<table><tr><td>North</td><td>4,289</td><td>421</td></tr></table>",
     "<table><tr><td>Nort</td><td>4,289</td></tr><tr><td>421</td></tr></table>", 0.36, 0.4),
]


@pytest.mark.parametrize("predicted,truth,reference,reference_struct", PAIRS)
def test_teds_reproduces_the_reference(predicted, truth, reference, reference_struct):
    assert teds(predicted, truth) == pytest.approx(reference, abs=1e-6)
    assert teds(predicted, truth, structure_only=True) == pytest.approx(reference_struct, abs=1e-6)
    wrapped = f"<html><body>{predicted}</body></html>"  # a whole document reads as its table
    assert teds(wrapped, truth) == pytest.approx(reference, abs=1e-6)


def test_no_table_scores_zero():
    assert teds("<p>no table</p>", PAIRS[0][1]) == 0.0 and teds("", PAIRS[0][1]) == 0.0
