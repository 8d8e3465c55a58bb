"""Words within a detected line: the whitespace-separated tokens of its text, each with its quadrilateral.

A word is a token of the line's own text, so words joined by spaces are the line, whatever the engine
split: rapidocr boxes Latin words but single characters in CJK and mixed lines, and its parts are
merged here into the line's tokens (a run of CJK without spaces is one word). Where an engine gives no
parts, or parts that do not spell the line, the line is shared out by character count along its quad.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TextWord:
    """One word: a quadrilateral in engine pixels (clockwise from the top-left of the text), text, score."""

    quad: list
    text: str
    confidence: float


def words_from_parts(text: str, parts, line_quad, confidence: float) -> list[TextWord]:
    """`parts`: (text, score, quad) in reading order, as rapidocr's word boxes. Falls back to shares."""
    pieces = [(str(part), float(score), np.asarray(quad, dtype=float)) for part, score, quad in parts or ()]
    if not pieces or "".join(p for p, _, _ in pieces).replace(" ", "") != "".join(text.split()):
        return words_by_share(line_quad, text, confidence)
    words, queue = [], list(pieces)
    for token in text.split():
        needed, quads, scores = len(token), [], []
        while needed > 0:
            part, score, quad = queue.pop(0)
            part = part.replace(" ", "")
            if len(part) > needed:  # a part across a space the engine did not see: share it
                return words_by_share(line_quad, text, confidence)
            needed -= len(part)
            quads.append(quad)
            scores.append(score)
        words.append(TextWord(quad=_hull(quads), text=token, confidence=min(scores)))
    return words


def words_by_share(quad, text: str, confidence: float) -> list[TextWord]:
    """Each token gets the stretch of the quad its characters take of the line (spaces counted)."""
    quad = np.asarray(quad, dtype=float)
    top_left, top_right, bottom_right, bottom_left = quad
    length = max(len(text), 1)
    words, position = [], 0
    for token in text.split():
        start = text.index(token, position)
        position = start + len(token)
        t0, t1 = start / length, position / length
        corners = [top_left + (top_right - top_left) * t0, top_left + (top_right - top_left) * t1,
                   bottom_left + (bottom_right - bottom_left) * t1, bottom_left + (bottom_right - bottom_left) * t0]
        words.append(TextWord(quad=np.asarray(corners).round(2).tolist(), text=token, confidence=confidence))
    return words


def _hull(quads: list) -> list:
    """The quad from the first part's left edge to the last part's right edge."""
    first, last = quads[0], quads[-1]
    return np.asarray([first[0], last[1], last[2], first[3]]).round(2).tolist()
