"""OCR accuracy measures: CER after normalisation, and an order-tolerant character F1."""

from __future__ import annotations

import unicodedata
from collections import Counter


def normalise(text: str) -> str:
    """NFKC, case-folded, every run of whitespace one space: layout is not scored, characters are."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def edit_distance(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def cer(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edits, reference length) on normalised text, so callers can pool over a set."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    return edit_distance(ref, hyp), len(ref)


def char_f1(reference: str, hypothesis: str) -> float:
    """F1 of the character multisets (spaces excluded): blind to reading order."""
    ref = Counter(normalise(reference).replace(" ", ""))
    hyp = Counter(normalise(hypothesis).replace(" ", ""))
    if not ref and not hyp:
        return 1.0
    overlap = sum((ref & hyp).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(hyp.values()), overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall)
