"""The check a turn must pass before a page is turned: each line votes for its own way up.

The finder (finder.py) answers "which way is most of this page's text up?" from a few lines. On a
page whose text runs several ways (a product box with a label up its side and a sticker upside
down) that answer can be a minority's, at a confidence no lower than a truly turned page's. So a
turn the finder proposes is confirmed before it is made:

1. the detector's line boxes on the page as uploaded (a thumbnail), the longest first;
2. each line is read the two ways its axis allows (a line lying across: as is and turned 180; a
   line running down: turned 90 and 270), and votes, weighted by its length, for the turn that
   reads it best;
3. the page is turned only where the lines voting for the finder's turn hold at least
   `min_share` of the weight. Otherwise it is read as uploaded, and the page says why: `mixed`
   where a real share of its lines already reads upright, `unsure` where the evidence is thin.

An upright page (the finder's usual answer) costs nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.orientation.geometry import turn
from app.page_size import as_rgb

VOTING_LINES = 10  # the longest lines asked
LINE_ASPECT = 2.0  # a box this many times longer than wide is a line with an axis
READ_FLOOR = 0.3  # a line read below this every way is no text (a rule, a picture): it has no vote
UPRIGHT_SHARE = 0.2  # lines holding this share that already read upright make the page "mixed"
READ_HEIGHTS = 12  # a line is read over at most this many of its heights: enough to tell


@dataclass(frozen=True)
class Votes:
    shares: dict  # turn (clockwise degrees) -> share of the lines' weight that reads best so
    lines: int  # lines that voted

    def share(self, rotation: int) -> float:
        return self.shares.get(rotation, 0.0)


def line_votes(page: np.ndarray, boxes: list[np.ndarray], reader) -> Votes:
    """The lines' votes: `boxes` are the detector's quads on `page` (pixels), `reader` scores crops."""
    rgb = as_rgb(page)
    crops, turns, weights = [], [], []
    for quad, length in _longest_lines(boxes):
        x0, y0 = np.maximum(np.floor(quad.min(axis=0)).astype(int), 0)
        x1, y1 = np.ceil(quad.max(axis=0)).astype(int)
        crop = rgb[y0:y1, x0:x1]
        if min(crop.shape[:2]) < 4:
            continue
        across = crop.shape[1] >= crop.shape[0]
        options = (0, 180) if across else (90, 270)
        for rotation in options:  # the crop turned as the page would be
            turned = turn(crop, rotation)
            crops.append(np.ascontiguousarray(turned[:, :READ_HEIGHTS * turned.shape[0]]))
            turns.append(rotation)
        weights.append(length)
    if not crops:
        return Votes({}, 0)
    scores = reader.scores(crops).reshape(-1, 2)
    totals: dict = {}
    voted = 0
    for (first, second), (turn_a, turn_b), weight in zip(scores, np.array(turns).reshape(-1, 2), weights):
        if max(first, second) < READ_FLOOR:
            continue
        best = int(turn_a if first >= second else turn_b)
        totals[best] = totals.get(best, 0.0) + weight * float(max(first, second))
        voted += 1
    whole = sum(totals.values())
    return Votes({k: v / whole for k, v in totals.items()} if whole else {}, voted)


def _longest_lines(boxes: list[np.ndarray]):
    lines = []
    for quad in boxes:
        quad = np.asarray(quad, dtype=float)
        along = float(np.linalg.norm(quad[1] - quad[0]))
        across = float(np.linalg.norm(quad[3] - quad[0]))
        long_side, short_side = max(along, across), min(along, across)
        if short_side >= 4 and long_side >= LINE_ASPECT * short_side:
            lines.append((long_side, quad))
    lines.sort(key=lambda item: -item[0])
    return [(quad, length) for length, quad in lines[:VOTING_LINES]]


def verdict(votes: Votes, rotation: int, confidence: float, min_share: float) -> str:
    """"turn" where the lines back the finder's turn; else "mixed" or "unsure" (read as uploaded).
    Where no line could vote (a line or two of a few characters), the finder's own confidence must
    reach `min_share` instead."""
    if not votes.lines:
        return "turn" if confidence >= min_share else "unsure"
    if votes.share(rotation) >= min_share:  # the finder found it: one line backing it is enough
        return "turn"
    return "mixed" if votes.share(0) >= UPRIGHT_SHARE else "unsure"
